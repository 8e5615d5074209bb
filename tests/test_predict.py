"""hpcdl predict's model, piece by piece, against costs computed by hand; and its monotonic behaviour."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import RECIPES, hpcdl
from hpcdl.nets import load_net
from hpcdl.plan import JobRequest
from hpcdl.predict import Options, predict
from hpcdl.predict.collectives import (
    Link, Topology, allreduce_time, best_allreduce, hierarchical, rabenseifner, recursive_doubling, ring,
    ring_tree_crossover_bytes, tree,
)
from hpcdl.predict.costs import LayerCost, NetCost, net_cost
from hpcdl.predict.host import waterfill
from hpcdl.predict.model import Machine, Workload, buckets, predict_iteration, scaling
from hpcdl.sites import load_site

US, GB = 1e-6, 1e9


def test_the_ring_costs_2_p_minus_1_latencies_and_2_p_minus_1_over_p_of_the_bytes():
    link = Link(2 * US, 1 / (10 * GB))
    # p = 4, 1 MB: 2*3*2 us + 2*3/4 * 1e6 B / 10 GB/s = 12 us + 150 us
    assert ring(1e6, 4, link) == pytest.approx(162e-6)
    assert ring(1e6, 1, link) == 0.0


def test_recursive_doubling_rabenseifner_and_the_tree_by_hand():
    link = Link(1 * US, 1 / GB)
    assert recursive_doubling(1000, 8, link) == pytest.approx(3 * (1e-6 + 1e-6))  # lg 8 (a + n b)
    assert rabenseifner(1e6, 8, link) == pytest.approx(6e-6 + 2 * 7 / 8 * 1e-3)  # 2 lg p a + 2 (p-1)/p n b
    # not a power of two: MPICH folds the extra ranks in, (2 floor(lg p) + 2) a + (2 (p-1)/p + 2) n b
    assert rabenseifner(1e6, 6, link) == pytest.approx(6e-6 + (2 * 5 / 6 + 2) * 1e-3)
    assert tree(1e6, 8, link) == pytest.approx(6e-6 + 2e-3)


def test_ring_and_tree_cross_where_the_hand_computed_size_says():
    link = Link(1 * US, 1 / GB)
    # p = 8: n* = p a ((p-1) - lg p) / b = 8 * 1e-6 * 4 * 1e9 = 32,000 bytes
    n_star = ring_tree_crossover_bytes(8, link)
    assert n_star == pytest.approx(32_000)
    assert ring(n_star, 8, link) == pytest.approx(tree(n_star, 8, link))
    assert tree(n_star / 4, 8, link) < ring(n_star / 4, 8, link)  # small: the tree's log latency wins
    assert ring(n_star * 4, 8, link) < tree(n_star * 4, 8, link)  # large: the ring's (p-1)/p bandwidth wins
    topo = Topology(8, 1, link, link)
    assert best_allreduce(1000, topo, ("ring", "tree"))[1] == "tree"
    assert best_allreduce(10e6, topo, ("ring", "tree"))[1] == "ring"


def test_the_crossover_moves_up_with_the_rank_count_as_the_ring_latency_grows_linearly():
    link = Link(1 * US, 1 / (12.5 * GB))
    sizes = [ring_tree_crossover_bytes(p, link) for p in (8, 64, 512)]
    assert sizes == sorted(sizes) and sizes[-1] > 100 * sizes[0]


def test_hierarchical_is_reduce_scatter_inside_allreduce_of_a_share_across_allgather_inside():
    intra, inter = Link(1 * US, 1 / (50 * GB)), Link(2 * US, 1 / (12.5 * GB))
    topo = Topology(nodes=4, ranks_per_node=4, intra=intra, inter=inter, rails=1)
    n = 100e6
    inside = 2 * (3 * 1e-6 + 3 / 4 * n / 50e9)  # reduce-scatter + allgather, ring over 4 local ranks
    # each local rank reduces n/4 across the 4 nodes; the 4 share the one NIC: 4x its seconds per byte
    across = min(ring(n / 4, 4, Link(2 * US, 4 / 12.5e9)), rabenseifner(n / 4, 4, Link(2 * US, 4 / 12.5e9)))
    assert hierarchical(n, topo)[0] == pytest.approx(inside + across)
    assert hierarchical(n, topo)[1] == "rabenseifner"
    # with one rail per local rank (Summit's four ports) the share across no longer queues
    railed = Topology(nodes=4, ranks_per_node=4, intra=intra, inter=inter, rails=4)
    assert hierarchical(n, railed)[0] < hierarchical(n, topo)[0]
    # across many nodes it beats the flat ring, whose latency counts every rank
    big = Topology(nodes=512, ranks_per_node=6, intra=intra, inter=inter, rails=4)
    assert allreduce_time(1e6, big, "hierarchical") < allreduce_time(1e6, big, "ring")


def test_a_ring_over_nodes_pays_the_networks_latency_only_on_the_hops_between_nodes():
    # NCCL's tuning model (src/graph/tuning.cc): of 2(p-1) steps, 2(N-1) cross nodes
    intra, inter = Link(1 * US, 1 / (50 * GB)), Link(5 * US, 1 / (12.5 * GB))
    topo = Topology(nodes=4, ranks_per_node=4, intra=intra, inter=inter, rails=1)
    n = 1e6
    # p = 16: 2 x 12 steps at 1 us inside + 2 x 3 at 5 us across; bytes at the slower link's rate
    assert allreduce_time(n, topo, "ring") == pytest.approx(24e-6 + 30e-6 + 2 * 15 / 16 * n / 12.5e9)
    # one node, or one rank per node: every step is on the one link, as before
    assert allreduce_time(n, Topology(1, 16, intra, inter), "ring") == pytest.approx(ring(n, 16, intra))
    assert allreduce_time(n, Topology(16, 1, intra, inter), "ring") == pytest.approx(ring(n, 16, inter))


def test_horovods_wait_for_its_cycle_overlaps_the_allreduces_already_queued_on_the_stream():
    # z, y, x are ready at 0.02, 0.04, 0.06 s of a 0.2 s backward, w at its end; z's 100 MB take 100 ms.
    # Horovod's background thread hands each buffer to the stream at its cycle and goes on, so y's and
    # x's half-cycle waits pass while z's allreduce runs: they start as it ends, one after the other
    net = NetCost("toy", (LayerCost("w", 0.7e9, 1_000), LayerCost("x", 0.1e9, 1_000), LayerCost("y", 0.1e9, 1_000),
                          LayerCost("z", 0.1e9, 25_000_000)))
    wait = 0.01
    work = Workload(net, 100, "nccl", 64 * 2**20, cycle_s=1e-3, per_bucket_wait_s=wait)
    it = predict_iteration(_machine(alpha_us=0.0, gbyte_s=1.0), work, 2, 1)
    assert it.buckets == 4
    small = 4_000 / 1e9  # 4 kB on a ring of 2 at 1 GB/s
    # w is ready at 0.2 s, waits 10 ms and goes alone: the one wait left exposed
    assert it.exposed_comm_s == pytest.approx(wait + small)
    assert it.comm_s == pytest.approx(0.1 + 3 * small + 4 * wait)  # end to end, waits included


def _two_layer_net(params_late: int, params_early: int, flops: float = 1e9) -> NetCost:
    # forward order: "early" (most of the work) then "late"; backward reaches "late" first
    return NetCost("toy", (LayerCost("early", flops * 0.9, params_early), LayerCost("late", flops * 0.1, params_late)))


def _machine(alpha_us=10.0, gbyte_s=10.0, flops=1e12) -> Machine:
    link = Link.of(alpha_us, gbyte_s)
    return Machine(rank_flops_per_s=flops, batch_half=0.0, memory_gbyte_s=1e6, intra=link, inter=link)


def test_overlap_hides_the_late_layers_allreduce_behind_the_rest_of_backward():
    net = _two_layer_net(params_late=25_000_000, params_early=1_000)  # 100 MB ready at 10 % of backward
    machine = _machine(alpha_us=0.0, gbyte_s=10.0, flops=1e12)
    work = Workload(net, batch_per_rank=100, library="gloo", bucket_bytes=0)
    it = predict_iteration(machine, work, nodes=2, ranks_per_node=1)
    # compute = 100 x 3 GFLOP / 1 TFLOP/s = 0.3 s, backward 0.2 s; "late" is ready after 0.02 s;
    # ring, p = 2: 100 MB / 10 GB/s = 10 ms, well inside the 0.18 s of backward left
    assert it.compute_s == pytest.approx(0.3)
    assert it.comm_s == pytest.approx(0.01 + 4_000 / 10e9)
    assert it.exposed_comm_s == pytest.approx(4_000 / 10e9)  # only the early layer's, sent after backward
    no_overlap = predict_iteration(machine, Workload(net, 100, "gloo", 0, overlap=False), 2, 1)
    assert no_overlap.exposed_comm_s == pytest.approx(it.comm_s)
    assert no_overlap.time_per_iter_s > it.time_per_iter_s


def test_backward_runs_slower_only_while_an_allreduce_shares_the_gpu_with_it():
    from dataclasses import replace

    from hpcdl.predict.model import OVERLAP_SLOWDOWN_GPU

    net = _two_layer_net(params_late=25_000_000, params_early=1_000)  # 100 MB ready at 10 % of backward
    gpu = replace(_machine(alpha_us=0.0, gbyte_s=10.0, flops=1e12), overlap_slowdown=OVERLAP_SLOWDOWN_GPU)
    it = predict_iteration(gpu, Workload(net, 100, "gloo", 0), nodes=2, ranks_per_node=1)
    # the late layer's 10 ms allreduce runs beside backward from 0.02 s: backward does 10 ms / 1.189 of
    # its work in those 10 ms, so it ends 10 ms x 0.189 / 1.189 later (the early layer's is sent after)
    assert it.contention_s == pytest.approx(0.01 * OVERLAP_SLOWDOWN_GPU / (1 + OVERLAP_SLOWDOWN_GPU))
    assert it.compute_s == pytest.approx(0.3 + it.contention_s)
    # nothing overlaps without overlap, on one rank, or on a CPU rank (no slowdown given)
    assert predict_iteration(gpu, Workload(net, 100, "gloo", 0, overlap=False), 2, 1).contention_s == 0.0
    assert predict_iteration(gpu, Workload(net, 100, "gloo", 0), 1, 1).contention_s == 0.0
    assert predict_iteration(_machine(0.0), Workload(net, 100, "gloo", 0), 2, 1).contention_s == 0.0


def test_a_comm_bound_iteration_is_not_slowed_by_the_contention_the_allreduce_sets_the_pace():
    from dataclasses import replace

    net = _two_layer_net(params_late=25_000_000, params_early=1_000)
    slow_link = _machine(alpha_us=0.0, gbyte_s=0.1, flops=1e12)  # 1 s of allreduce beside 0.18 s of backward
    plain = predict_iteration(slow_link, Workload(net, 100, "gloo", 0), 2, 1)
    contended = predict_iteration(replace(slow_link, overlap_slowdown=0.189), Workload(net, 100, "gloo", 0), 2, 1)
    assert contended.contention_s > 0 and contended.time_per_iter_s == pytest.approx(plain.time_per_iter_s)


def test_a_big_early_layer_cannot_be_hidden():
    net = _two_layer_net(params_late=1_000, params_early=25_000_000)  # 100 MB ready only when backward ends
    it = predict_iteration(_machine(alpha_us=0.0), Workload(net, 100, "gloo", 0), 2, 1)
    assert it.exposed_comm_s == pytest.approx(0.01, rel=0.01)


def test_fp16_compression_halves_the_bytes_on_the_wire():
    net = _two_layer_net(params_late=1_000, params_early=25_000_000)
    full = predict_iteration(_machine(alpha_us=0.0), Workload(net, 100, "gloo", 0), 2, 1)
    half = predict_iteration(_machine(alpha_us=0.0), Workload(net, 100, "gloo", 0, gradient_bytes_per_parameter=2), 2, 1)
    assert half.comm_s == pytest.approx(full.comm_s / 2)


def test_buckets_follow_backward_order_and_close_at_the_bucket_size():
    cost = net_cost(load_net("resnet50"))
    plan = buckets(cost, 25 * 2**20, 4.0)
    assert sum(size for _, size in plan) == pytest.approx(cost.parameters * 4)
    assert [f for f, _ in plan] == sorted(f for f, _ in plan)
    assert all(size >= 25 * 2**20 for _, size in plan[:-1])
    per_layer = buckets(cost, 0, 4.0)
    assert len(per_layer) == sum(1 for layer in cost.layers if layer.parameters)


def test_weak_and_strong_scaling_efficiency_is_per_node_against_the_first_count():
    net = _two_layer_net(params_late=1_000_000, params_early=1_000_000)
    weak = scaling(_machine(), Workload(net, 64, "gloo", 0), 1, [1, 2, 4], "weak")
    assert weak[0].efficiency == 1.0 and all(r.batch_per_rank == 64 for r in weak)
    strong = scaling(_machine(), Workload(net, 64, "gloo", 0), 1, [1, 2, 4], "strong")
    assert [r.batch_per_rank for r in strong] == [64, 32, 16] and {r.global_batch for r in strong} == {64}
    assert strong[2].efficiency < weak[2].efficiency <= 1.0


def test_the_counted_work_and_gradients_of_the_bundled_nets_match_their_published_sizes():
    # forward multiply-adds: AlexNet/CaffeNet about 0.72 G, GoogLeNet about 1.5-1.6 G, ResNet-50 about 4.1 G
    assert net_cost(load_net("caffenet")).forward_flops / 2 == pytest.approx(0.72e9, rel=0.05)
    assert net_cost(load_net("googlenet")).forward_flops / 2 == pytest.approx(1.55e9, rel=0.06)
    assert net_cost(load_net("resnet50")).forward_flops / 2 == pytest.approx(4.1e9, rel=0.05)
    assert net_cost(load_net("resnet50")).parameters == 25_557_032


def test_waterfill_gives_no_group_more_than_it_asks_and_splits_the_rest_evenly():
    assert waterfill(2, [1, 1, 3]) == pytest.approx([2 / 3] * 3)
    assert waterfill(4, [1, 5, 5]) == pytest.approx([1, 1.5, 1.5])
    assert sum(waterfill(2, [0.5, 0.5])) == pytest.approx(1.0)


NETS = ["cifar10_quick", "caffenet", "googlenet", "resnet50"]


@settings(max_examples=60, deadline=None)
@given(net=st.sampled_from(NETS), nodes=st.sampled_from([2, 8, 64, 512]), rpn=st.sampled_from([1, 4, 6]),
       alpha=st.floats(0.1, 500), gbyte=st.floats(0.1, 200), factor=st.floats(1.0, 100.0),
       library=st.sampled_from(["nccl", "mpi", "gloo", "horovod"]), bucket=st.sampled_from([0, 25 * 2**20]))
def test_more_latency_never_predicts_faster_and_more_bandwidth_never_slower(net, nodes, rpn, alpha, gbyte, factor,
                                                                             library, bucket):
    cost = net_cost(load_net(net))
    work = Workload(cost, 32, library, bucket, cycle_s=1e-3 if library == "horovod" else 0.0)

    def t(a_us, g):
        link = Link.of(a_us, g)
        m = Machine(rank_flops_per_s=5e12, batch_half=5, memory_gbyte_s=900, intra=Link.of(a_us / 2, 2 * g),
                    inter=link, rails=2)
        return predict_iteration(m, work, nodes, rpn).time_per_iter_s

    base = t(alpha, gbyte)
    assert t(alpha * factor, gbyte) >= base * (1 - 1e-12)
    assert t(alpha, gbyte * factor) <= base * (1 + 1e-12)


@pytest.mark.parametrize("site", ["summit", "stampede2-knl", "perlmutter", "frontier", "cori-knl", "lassen"])
def test_every_shipped_site_predicts_from_its_profile_and_efficiency_never_exceeds_one(site):
    p = predict(load_site(site), "resnet50", 32, [1, 2, 8, 64, 512], "weak")
    assert [r.nodes for r in p.rows] == [1, 2, 8, 64, 512]
    for r in p.rows:
        assert 0 < r.efficiency <= 1 + 1e-9 and r.time_per_iter_s > 0 and math.isfinite(r.images_per_sec)
        assert r.time_per_iter_s == pytest.approx(r.compute_s + r.exposed_comm_s + r.data_s + r.update_s + r.straggler_s
                                                  + r.halo_s)
    assert [r.efficiency for r in p.rows] == sorted((r.efficiency for r in p.rows), reverse=True)


def test_predict_json_lists_the_fields_per_node_count():
    proc = hpcdl("predict", "--site", "summit", RECIPES / "resnet50.yaml", "--nodes", "1,2,4,1024", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [r["nodes"] for r in rows] == [1, 2, 4, 1024]
    for r in rows:
        assert {"nodes", "ranks", "images_per_sec", "efficiency", "time_per_iter_s", "compute_s", "exposed_comm_s",
                "comm_s", "data_s", "algorithm"} <= set(r)
    assert rows[-1]["ranks"] == 6 * 1024


def test_predict_prints_a_table_and_draws_a_picture(tmp_path):
    picture = tmp_path / "scaling.png"
    proc = hpcdl("predict", "--site", "stampede2-knl", RECIPES / "caffenet.yaml", "--nodes", "1,2,4,8",
                 "--scaling", "strong", "--picture", picture)
    assert proc.returncode == 0, proc.stderr
    assert "strong scaling (predicted)" in proc.stdout and "compute:" in proc.stdout
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args, field", [
    (["--nodes", "1,two"], "--nodes"), (["--nodes", "0,2"], "--nodes"), (["--scaling", "sideways"], "--scaling"),
])
def test_bad_predict_input_gets_one_line_naming_the_option(args, field, tmp_path):
    proc = hpcdl("predict", "--site", "summit", RECIPES / "resnet50.yaml", *args, "--picture", tmp_path / "x.png")
    assert proc.returncode == 2 and field in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.png").exists()


def test_fp16_allreduce_and_no_overlap_move_the_prediction_the_right_way():
    site = load_site("summit")
    request = JobRequest(distributed="nccl")
    base = predict(site, "caffenet", 32, [64], "weak", request).rows[0]
    half = predict(site, "caffenet", 32, [64], "weak", request, options=Options(fp16_allreduce=True)).rows[0]
    serial = predict(site, "caffenet", 32, [64], "weak", request, options=Options(overlap=False)).rows[0]
    assert half.comm_s < base.comm_s and serial.exposed_comm_s >= base.exposed_comm_s


def test_a_cpu_core_that_adds_the_gradients_costs_gamma_per_byte_reduced():
    link = Link(1 * US, 1 / (10 * GB), 1 / (2 * GB))
    # ring, p = 4, 1 MB: 2*3*1 us + 2*3/4 * 1e6 / 10 GB/s + 3/4 * 1e6 / 2 GB/s
    assert ring(1e6, 4, link) == pytest.approx(6e-6 + 150e-6 + 375e-6)
    assert tree(1e6, 8, link) == pytest.approx(6e-6 + 200e-6 + 500e-6)


def test_one_knl_core_limits_an_onload_omni_path_rank_and_adds_the_gradients():
    from hpcdl.predict.fabric import fabric_of, host_limited

    _, knl = load_site("stampede2-knl").node_kind()
    fabric = fabric_of(knl)
    assert fabric.onload and fabric.inter.beta_s_per_byte == pytest.approx(1 / 12.5e9)
    limited = host_limited(fabric, 8.0, cpu_reduces=True)
    assert limited.inter.beta_s_per_byte == pytest.approx(2 / 8e9)  # 4 GB/s: below the 12.5 GB/s link
    assert limited.inter.gamma_s_per_byte == pytest.approx(3 / 8e9)
    _, ac922 = load_site("summit").node_kind()
    ib = host_limited(fabric_of(ac922), 15.0, cpu_reduces=False)  # RDMA and GPU adds: the link's own rate
    assert not ib.onload and ib.inter.beta_s_per_byte == pytest.approx(1 / 6.25e9) and ib.inter.gamma_s_per_byte == 0


def test_plan_with_a_recipe_shows_the_prediction_for_the_request():
    proc = hpcdl("plan", "--site", "summit", "-N", "16", "--recipe", RECIPES / "resnet50.yaml", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["prediction"]
    assert [r["nodes"] for r in rows] == [1, 16] and rows[1]["ranks"] == 96
    text = hpcdl("plan", "--site", "summit", "-N", "16", "--recipe", RECIPES / "resnet50.yaml").stdout
    assert "predicted for resnet50" in text


def test_a_calibration_is_saved_beside_the_sites_references_and_used_afterwards(tmp_path):
    from conftest import ROOT

    (tmp_path / "references").mkdir()
    (tmp_path / "references" / "local.yaml").write_text("site: local\nreferences: {}\n")
    env = {"HPCDL_SITE_PATH": str(tmp_path)}
    run = ROOT / "tests" / "fixtures" / "predict" / "local-collectives-scaling.jsonl"
    proc = hpcdl("predict", "--site", "local", RECIPES / "digits-quick.yaml", "--nodes", "1", "--calibration", run,
                 "--save-calibration", env=env)
    assert proc.returncode == 0, proc.stderr
    saved = tmp_path / "references" / "local.calibration.yaml"
    assert saved.is_file() and "flops_per_s" in saved.read_text()
    again = hpcdl("predict", "--site", "local", RECIPES / "digits-quick.yaml", "--nodes", "1", env=env)
    assert again.returncode == 0 and str(run) in again.stdout  # the saved calibration names its run


def test_spatial_parallelism_splits_each_samples_work_over_its_group():
    net = _two_layer_net(params_late=1_000, params_early=1_000)
    alone = predict_iteration(_machine(), Workload(net, 4, "gloo", 0), 1, 4)
    shared = predict_iteration(_machine(), Workload(net, 4, "gloo", 0, spatial_ways=4), 1, 4)
    assert shared.compute_s == pytest.approx(alone.compute_s / 4)
    assert shared.global_batch == alone.global_batch // 4  # four ranks, one group, four samples
    proc = hpcdl("predict", "--site", "summit", RECIPES / "mesh-spatial.yaml", "--nodes", "1,2", "--json")
    assert proc.returncode == 0, proc.stderr

"""The terms that make efficiency fall with scale, each against a case computed by hand, and their
monotonic behaviour: the wait for the slowest rank, contention past a leaf switch, the data
pipeline, the halo exchange of spatial parallelism, and strong scaling that never grows its batch."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT
from hpcdl.predict.calibration import Calibration, MeasuredCompute, load_calibration
from hpcdl.predict.collectives import Link, Topology, best_allreduce
from hpcdl.predict.costs import LayerCost, NetCost
from hpcdl.predict.model import (
    BatchTooSmall, Machine, Workload, data_time, expected_max_normal, halo_time, leaf_limited, predict_iteration,
    scaling, slowest_rank_wait,
)

US, GB = 1e-6, 1e9
FIXTURES = ROOT / "tests" / "fixtures" / "predict"


def _net(params: int = 1_000, flops: float = 1e9, halo_bytes: float = 0.0) -> NetCost:
    return NetCost("toy", (LayerCost("conv", flops * 0.9, params // 2, halo_bytes),
                           LayerCost("fc", flops * 0.1, params - params // 2)))


def _machine(**kw) -> Machine:
    link = Link.of(10.0, 10.0)
    return Machine(rank_flops_per_s=1e12, batch_half=0.0, memory_gbyte_s=1e6, intra=link, inter=link, **kw)


# --- the wait for the slowest rank -------------------------------------------------------------------------

def test_the_expected_maximum_of_normal_ranks_by_hand():
    # Blom: Phi^-1((n - 0.375) / (n + 0.25)); n = 2: Phi^-1(0.7222) = 0.589 (exact 1/sqrt(pi) = 0.564)
    assert expected_max_normal(1) == 0.0
    assert expected_max_normal(2) == pytest.approx(0.5894, abs=1e-3)
    assert expected_max_normal(8) == pytest.approx(1.4338, abs=1e-3)  # tables: 1.4236
    # 5 % spread of a 100 ms iteration, 8 ranks: 5 ms x 1.434 = 7.17 ms
    assert slowest_rank_wait(0.05, 0.100, 8) == pytest.approx(7.17e-3, rel=1e-3)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 100_000), st.integers(1, 100_000), st.floats(0.0, 0.5))
def test_more_ranks_never_shorten_the_wait_for_the_slowest(a, b, jitter):
    small, large = sorted((a, b))
    assert slowest_rank_wait(jitter, 0.1, small) <= slowest_rank_wait(jitter, 0.1, large)


def test_the_wait_enters_the_iteration_and_grows_with_the_node_count():
    net = _net()
    work = Workload(net, 100, "gloo", 0)
    rows = scaling(_machine(iteration_jitter=0.02), work, 4, [1, 2, 8, 64], "weak")
    waits = [r.straggler_s for r in rows]
    assert waits == sorted(waits) and waits[0] > 0  # 4 ranks on one node wait too
    # compute 100 x 3 GFLOP (forward and backward) / 1 TFLOP/s = 0.3 s; 256 ranks: 2 % x 0.3 s x E[max of 256]
    assert rows[-1].straggler_s == pytest.approx(0.006 * expected_max_normal(256))
    effs = [r.efficiency for r in rows]
    assert effs == sorted(effs, reverse=True)
    quiet = scaling(_machine(), work, 4, [1, 64], "weak")
    assert quiet[-1].straggler_s == 0.0 and quiet[-1].time_per_iter_s < rows[-1].time_per_iter_s


def test_the_validation_suite_measures_the_spread_and_the_calibration_carries_it():
    from hpcdl.validate.checks import window_jitter

    steps = [{"event": "step", "images_per_sec_rank": x} for x in (50.0, 100.0, 100.0, 50.0, 100.0)]
    # the warm-up window left out: times per image 1/100, 1/100, 1/50, 1/100 -> mean 0.0125, stdev 0.005
    assert window_jitter(steps) == pytest.approx(0.005 / 0.0125)
    assert window_jitter(steps[:3]) is None
    records = [
        {"event": "measurement", "series": "scaling", "mode": "weak", "p": 1, "ranks": 1, "global_batch": 32,
         "images_per_sec": 320.0, "net": "cifar10_quick", "precision": "fp32", "window_jitter": 0.04},
    ]
    from hpcdl.predict.calibration import calibrate

    cal = calibrate(records, "local", "here")
    assert cal.compute[0].iteration_jitter == 0.04 and cal.compute[0].precision == "fp32"


def test_a_cpu_ranks_single_iterations_spread_is_taken_before_the_windows_and_a_gpus_is_not():
    from hpcdl.predict.calibration import calibrate
    from hpcdl.train.backends.pytorch.steps import iteration_spread
    from hpcdl.validate.checks import iteration_jitter

    # 30, 30, 36, 24 ms: mean 30, sample stdev sqrt(72 / 3) = 4.899 ms
    assert iteration_spread([0.030, 0.030, 0.036, 0.024])["iteration_cv"] == pytest.approx(4.899 / 30, rel=1e-3)
    assert iteration_spread([0.030, 0.031]) == {}
    steps = [{"event": "step", "iteration_cv": cv} for cv in (0.5, 0.02, 0.06, 0.04)]
    assert iteration_jitter(steps) == pytest.approx(0.04)  # the median after the warm-up window
    assert iteration_jitter(steps[:1]) is None and iteration_jitter([{"event": "step"}]) is None
    point = {"event": "measurement", "series": "scaling", "mode": "weak", "p": 1, "ranks": 1, "global_batch": 32,
             "images_per_sec": 320.0, "net": "cifar10_quick", "precision": "fp32", "window_jitter": 0.01,
             "iteration_jitter": 0.04}
    assert calibrate([point], "local", "here").compute[0].iteration_jitter == 0.04
    gpu = calibrate([{**point, "gpu": True}], "local", "here").compute[0]
    assert gpu.iteration_jitter == 0.01  # a GPU loop times the host's queueing: the windows' spread stands


def test_the_trainers_display_steps_carry_the_spread_of_their_single_iterations(tmp_path):
    from test_train import records, train_here, write_recipe

    train_here(write_recipe(tmp_path, max_iter=8, display=4), tmp_path / "r.jsonl")
    cvs = [r.get("iteration_cv") for r in records(tmp_path / "r.jsonl") if r["event"] == "step"]
    assert len(cvs) == 2 and all(cv is not None and cv >= 0 for cv in cvs)


def test_a_measured_rate_is_taken_for_its_own_net_and_precision_first():
    def measured(net, precision, flops):
        return MeasuredCompute(net, True, 1, 64, 100.0, 1.0, flops, f"{net} {precision}", precision)

    cal = Calibration("x", "here", compute=(measured("alexnet", "fp32", 1.0), measured("resnet50", "fp16", 2.0),
                                            measured("resnet50", "fp32", 3.0)))
    assert cal.compute_for(True, "resnet50", "fp32").flops_per_s == 3.0
    assert cal.compute_for(True, "resnet50", "fp16").flops_per_s == 2.0
    assert cal.compute_for(True, "googlenet", "fp16").flops_per_s == 2.0  # same precision, another net
    assert cal.compute_for(False, "resnet50", "fp32") is None  # no CPU rank measured: the data sheet


def test_predict_says_when_no_spread_was_measured_and_uses_it_when_it_was(tmp_path):
    from hpcdl.plan import JobRequest
    from hpcdl.predict import predict
    from hpcdl.sites import load_site

    site = load_site("local")
    plain = predict(site, "cifar10_quick", 32, [1, 2], "weak", JobRequest(ranks_per_node=2, threads_per_rank=1))
    assert any("slowest rank: not counted" in n for n in plain.notes)
    assert any("data-sheet" in n or "derived" in n or "measured" in n for n in plain.notes)
    records = (FIXTURES / "local-collectives-scaling.jsonl").read_text().splitlines()
    import json

    patched = []
    for line in records:
        r = json.loads(line)
        if r.get("series") == "scaling":
            r["window_jitter"] = 0.05
        patched.append(json.dumps(r))
    results = tmp_path / "results.jsonl"
    results.write_text("\n".join(patched) + "\n")
    cal = load_calibration("local", results)
    measured = predict(site, "cifar10_quick", 32, [1, 2], "weak", JobRequest(ranks_per_node=2, threads_per_rank=1),
                       cal)
    assert measured.machine.iteration_jitter == 0.05
    assert any("5.0% spread" in n for n in measured.notes)
    assert measured.rows[-1].straggler_s > 0


def test_a_gpu_site_with_nothing_measured_waits_for_the_slowest_gpu_at_the_published_spread():
    # TACC's TensorFlow guide, one V100, ResNet-50 at batch 32: "images/sec: 343.4 +/- 0.3 (jitter = 3.6)"; the
    # jitter is a robust standard deviation of single steps, 3.6 / 343.4 = 1.048 % of an iteration
    from hpcdl.predict import predict
    from hpcdl.sites import load_site

    summit = predict(load_site("summit"), "resnet50", 32, [1, 64, 4608], "weak")
    assert summit.machine.iteration_jitter == pytest.approx(0.01048, abs=1e-5)
    assert any("published (TACC" in n for n in summit.notes)
    row = summit.rows[1]  # 64 nodes x 6 GPUs: E[max of 384 normals] = Phi^-1(383.625 / 384.25) = 2.9428
    alone = row.compute_s - row.contention_s
    assert row.straggler_s == pytest.approx(3.6 / 343.4 * alone * 2.9428, rel=1e-4)
    effs = [r.efficiency for r in summit.rows]  # the curve falls with every node added
    assert effs[0] > effs[1] > effs[2]
    knl = predict(load_site("stampede2-knl"), "resnet50", 32, [1, 8], "weak")  # CPU ranks: nothing published
    assert knl.machine.iteration_jitter == 0.0 and knl.rows[-1].straggler_s == 0.0
    assert any("slowest rank: not counted" in n for n in knl.notes)


# --- contention past a leaf switch ------------------------------------------------------------------------

def test_past_one_leaf_the_bytes_cross_uplinks_at_one_over_the_taper():
    link = Link.of(1.0, 12.5)  # 12.5 GB/s
    assert leaf_limited(link, 16, 16, 2.0) == link  # within one leaf: the NIC's rate
    wide = leaf_limited(link, 17, 16, 2.0)
    assert wide.beta_s_per_byte == pytest.approx(2 / (12.5 * GB)) and wide.alpha_s == link.alpha_s
    # a 100 MB ring over 32 nodes: 2 x 31/32 x 100 MB at 6.25 GB/s = 31 ms (15.5 ms within a leaf)
    topo = Topology(32, 1, wide, wide)
    t, _ = best_allreduce(100e6, topo, ("ring",))
    assert t == pytest.approx(62 * 1e-6 + 2 * 31 / 32 * 100e6 / 6.25e9, rel=1e-6)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4096), st.integers(1, 512), st.floats(1.0, 16.0))
def test_contention_never_speeds_anything_up(nodes, leaf, taper):
    link = Link.of(1.0, 12.5)
    assert leaf_limited(link, nodes, leaf, taper).beta_s_per_byte >= link.beta_s_per_byte
    net = _net(params=10_000_000)
    work = Workload(net, 8, "mpi", 0, overlap=False)
    free = predict_iteration(_machine(), work, max(2, nodes), 1)
    tapered = predict_iteration(_machine(leaf_nodes=leaf, taper=taper), work, max(2, nodes), 1)
    assert tapered.time_per_iter_s >= free.time_per_iter_s


def test_a_profile_states_its_leaf_and_taper_and_the_prediction_says_so():
    from hpcdl.plan import JobRequest
    from hpcdl.predict import predict
    from hpcdl.sites.schema import Site

    site = {"name": "tapered", "scheduler": "slurm", "launcher": "srun", "node_kinds": {"n": {
        "sockets": 1, "cores_per_socket": 8, "memory_gb": 64, "cpu_target": "zen4",
        "nics": [{"kind": "infiniband", "device": "mlx5_0", "socket": 0, "leaf_nodes": 18, "taper": 2}]}}}
    rows = predict(Site.model_validate(site), "caffenet", 64, [1, 16, 32], "weak",
                   JobRequest(ranks_per_node=1, distributed="mpi")).rows
    same = predict(Site.model_validate({**site, "node_kinds": {"n": {**site["node_kinds"]["n"], "nics": [
        {"kind": "infiniband", "device": "mlx5_0", "socket": 0}]}}}), "caffenet", 64, [1, 16, 32], "weak",
        JobRequest(ranks_per_node=1, distributed="mpi")).rows
    assert rows[1].comm_s == pytest.approx(same[1].comm_s)  # 16 nodes: one leaf
    assert rows[2].comm_s > same[2].comm_s  # 32 nodes: the uplinks


# --- the data pipeline ------------------------------------------------------------------------------------

def test_the_input_pipeline_costs_what_decoding_does_not_hide_behind_compute():
    machine = _machine(decode_images_per_core_s=200.0, data_cores_per_node=10)
    # 4,000 images per node at 200 images/s per core on 10 cores: 2 s of decoding against 1.5 s of compute
    assert data_time(machine, 4000, 1.5) == pytest.approx(0.5)
    assert data_time(machine, 1000, 1.5) == 0.0  # hidden
    assert data_time(_machine(), 4000, 1.5) == 0.0  # not known: not counted


# --- spatial parallelism ----------------------------------------------------------------------------------

def test_the_halo_exchange_by_hand():
    link = Link.of(10.0, 1.0)  # 10 us, 1 GB/s
    net = _net(halo_bytes=1e6)  # one layer borrows 1 MB per image from each neighbour
    # 2-way: one neighbour, 2 samples, forward and backward: 2 x (10 us + 2 MB / 1 GB/s) = 4.02 ms
    assert halo_time(link, net, 2, 2) == pytest.approx(2 * (10e-6 + 2e-3))
    assert halo_time(link, net, 2, 4) == pytest.approx(4 * (10e-6 + 2e-3))  # inner slabs: two neighbours
    assert halo_time(link, net, 2, 1) == 0.0
    machine = Machine(rank_flops_per_s=1e12, batch_half=5.0, memory_gbyte_s=1e6, intra=link, inter=link)
    one = predict_iteration(machine, Workload(net, 2, "gloo", 0), 1, 1)
    assert one.halo_s == 0.0  # unsplit: no neighbour to borrow from
    two = predict_iteration(machine, Workload(net, 2, "gloo", 0, spatial_ways=2), 1, 2)
    # slab efficiency: one sample's worth of work per rank runs at 1/(1+5) of the large-batch rate, not 2/(2+5)
    assert two.compute_s == pytest.approx(1 * 1e9 * 3 / 1e12 * 6 / 1)
    assert two.halo_s == pytest.approx(halo_time(link, net, 2, 2)) and two.halo_s > 0


def test_two_way_spatial_against_this_machines_measured_figure():
    """docs/performance.md, 'Spatial vs sample parallelism': the mesh net at 192 x 192, mini-batch 2 on 2 ranks of
    1 thread: 2-way spatial 3.00 samples/s against sample parallelism's 3.32 (0.90x), measured on this machine.
    Predicted from the same machine's validation calibration (gloo's links, a rank's rate), within 15 %."""
    from hpcdl.nets import load_net
    from hpcdl.plan import JobRequest, make_plan
    from hpcdl.predict.costs import net_cost
    from hpcdl.predict.scenario import Options, machine_for
    from hpcdl.sites import load_site

    site = load_site("local")
    plan = make_plan(site, JobRequest(ranks_per_node=2, threads_per_rank=1, distributed="gloo"))
    cal = load_calibration("local", FIXTURES / "local-collectives-scaling.jsonl")
    cost = net_cost(load_net("mesh", image_size=192))
    machine = machine_for(site, plan, cal, Options(), cost)
    samples = predict_iteration(machine, Workload(cost, 1, "gloo"), 1, 2)
    spatial = predict_iteration(machine, Workload(cost, 2, "gloo", spatial_ways=2), 1, 2)
    assert spatial.halo_s > 0
    ratio = spatial.images_per_sec / samples.images_per_sec
    assert ratio < 1.0  # never the ideal: the halo costs
    assert abs(ratio / (3.00 / 3.32) - 1) <= 0.15


# --- strong scaling ---------------------------------------------------------------------------------------

def test_strong_scaling_refuses_counts_the_fixed_batch_cannot_split():
    work = Workload(_net(), 8, "gloo", 0)
    with pytest.raises(BatchTooSmall, match="global batch of 64 cannot give each rank one sample on 32"):
        scaling(_machine(), work, 4, [2, 4, 32], "strong")  # 64 images over 128 ranks
    spatial = Workload(_net(), 8, "gloo", 0, spatial_ways=4)
    with pytest.raises(BatchTooSmall, match="4-way spatial group"):
        scaling(_machine(), spatial, 4, [1, 16], "strong", global_batch=8)


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 4096), st.lists(st.integers(1, 64), min_size=1, max_size=5), st.integers(1, 8))
def test_strong_scaling_never_grows_its_batch(total, counts, per_node):
    work = Workload(_net(), 1, "gloo", 0)
    try:
        rows = scaling(_machine(), work, per_node, counts, "strong", global_batch=total)
    except BatchTooSmall:
        assert max(counts) * per_node > total
        return
    assert all(1 <= r.global_batch <= total for r in rows)


def test_the_cli_refuses_a_strong_count_with_one_line_and_status_2():
    from conftest import RECIPES, hpcdl

    proc = hpcdl("predict", "--site", "summit", RECIPES / "resnet50.yaml", "--nodes", "1,64", "--scaling", "strong",
                 "--global-batch", "100")
    assert proc.returncode == 2 and "cannot give each rank one sample on 64" in proc.stderr
    assert proc.stdout == ""


# --- node links ---------------------------------------------------------------------------------------------

def test_perlmutters_a100_nodes_get_nvlink_3_not_the_v100s_nvlink_2_and_the_output_says_which():
    from hpcdl.plan import JobRequest
    from hpcdl.predict import predict
    from hpcdl.sites import load_site

    prediction = predict(load_site("perlmutter"), "resnet50", 64, [1], "weak", JobRequest())
    network = next(n for n in prediction.notes if n.startswith("network:"))
    assert "NVLink 3 default" in network and "no intra_node_link in the profile" in network
    assert prediction.machine.intra.beta_s_per_byte == pytest.approx(1 / (100 * GB))
    summit = predict(load_site("summit"), "resnet50", 64, [1], "weak", JobRequest())
    assert "NVLink 3" not in next(n for n in summit.notes if n.startswith("network:"))


def test_a_message_inside_the_measured_sweep_takes_the_sweeps_time_and_outside_it_the_fitted_line():
    from hpcdl.predict.calibration import MeasuredLink, fit_link

    # a 2-rank sweep whose middle is slower than the line through its ends (a shaped TCP link at 1 Gbit/s:
    # 0.5 MiB at 0.51 Gbit/s of bus bandwidth where 2 MiB reaches 0.92)
    sweep = [{"backend": "gloo", "scope": "inter-node", "ranks": 2, "bytes": b, "time_us": us}
             for b, us in ((8, 1000.0), (32, 1000.0), (128, 1000.0), (524288, 8180.0), (2097152, 18270.0))]
    measured = fit_link(sweep)
    assert measured.points[3] == (524288, 8180.0)
    link = measured.link()
    # by hand: 8.18 ms + (582312 - 524288) x (18.27 - 8.18) ms / (2097152 - 524288)
    expected = 8.18e-3 + (582312 - 524288) * (18.27e-3 - 8.18e-3) / (2097152 - 524288)
    assert link.measured_time(582312, 2) == pytest.approx(expected)
    two_nodes = Topology(2, 1, link, link)
    assert best_allreduce(582312, two_nodes, ("ring",)) == (pytest.approx(expected), "measured")
    plain = replace(link, measured=())
    line, _ = best_allreduce(582312, Topology(2, 1, plain, plain), ("ring",))
    assert line < expected - 1e-3  # the alpha-beta line through the ends is 2.5 ms too fast there
    # beyond the sweep, or among another number of ranks, the line
    assert link.measured_time(4 << 20, 2) is None and link.measured_time(582312, 4) is None
    assert best_allreduce(582312, Topology(4, 1, link, link), ("ring",))[1] == "ring"
    # the sweep goes through a calibration file and back
    cal = Calibration("x", "here", links=(measured,))
    again = Calibration.from_mapping(yaml.safe_load(cal.to_yaml()), "file")
    assert again.links[0].link().measured_time(582312, 2) == pytest.approx(expected)
    assert MeasuredLink("gloo", "inter-node", 2, 500.0, 0.1).link().measured == ()

"""The planner, read as the centres' published launch lines and as its refusals."""

from __future__ import annotations

import json

import pytest

from hpcdl.errors import HpcdlError
from hpcdl.plan import JobRequest, Plan, make_plan
from hpcdl.plan.model import PathValue
from hpcdl.sites import load_site


def plan_for(site: str, **request) -> Plan:
    return make_plan(load_site(site), JobRequest(**request))


def nic_socket(site: str, kind: str, port: str) -> int:
    node = load_site(site).node_kinds[kind]
    return next(n.socket for n in node.nics if f"{n.device}:{n.port}" == port)


# --- OLCF Summit ---------------------------------------------------------------------------

@pytest.mark.parametrize("nodes", [1, 2, 64])
def test_summit_is_one_resource_set_per_node_jsrun_nN_a6_c42_g6_r1_bpacked7(nodes):
    # OLCF's DL guidance and the Gordon Bell scripts: every rank sees all six GPUs (CUDA IPC over NVLink)
    plan = plan_for("summit", nodes=nodes)
    assert list(plan.launcher_argv) == ["jsrun", f"-n{nodes}", "-a6", "-c42", "-g6", "-r1", "-bpacked:7"]
    assert len(plan.ranks) == 6 * nodes


def test_summit_puts_one_rank_per_gpu_and_the_nearest_ib_port():
    plan = plan_for("summit", nodes=2)
    local = plan.local_ranks()
    assert [r.socket for r in local] == [0, 0, 0, 1, 1, 1]
    assert [r.gpus for r in local] == [(0,), (1,), (2,), (3,), (4,), (5,)]
    # 7 packed cores each; core 21 and core 43 (the last of each socket) stay with the system
    assert [r.cores for r in local] == [tuple(range(s, s + 7)) for s in (0, 7, 14, 22, 29, 36)]
    # SMT4 core-major: rank 0 owns hardware threads 0-27, rank 3 88-115 (Gordon Bell run script)
    assert local[0].cpus == tuple(range(0, 28)) and local[3].cpus == tuple(range(88, 116))
    for r in local:
        assert nic_socket("summit", "ac922", r.nic) == r.socket
        assert r.env["NCCL_IB_HCA"] == f"={r.nic}" and r.env["UCX_NET_DEVICES"] == r.nic
        # every rank sees the node's GPUs and drives its own (no CUDA_VISIBLE_DEVICES cut)
        assert r.env["HPCDL_GPU"] == str(r.gpus[0]) and "CUDA_VISIBLE_DEVICES" not in r.env
    # the two ports of a socket are shared out as the Gordon Bell script does:
    # mlx5_0, mlx5_1, mlx5_0 | mlx5_3, mlx5_2, mlx5_3
    assert [r.nic for r in local] == ["mlx5_0:1", "mlx5_1:1", "mlx5_0:1", "mlx5_3:1", "mlx5_2:1", "mlx5_3:1"]
    assert all(r.omp_num_threads == 7 for r in plan.ranks)


def test_summit_hybrid_per_nic_mode_runs_4_ranks_2_per_socket_each_on_its_own_port():
    plan = plan_for("summit", nodes=2, mode="per-nic")
    local = plan.local_ranks()
    assert plan.ranks_per_node == 4
    assert [r.socket for r in local] == [0, 0, 1, 1]
    assert [r.nic for r in local] == ["mlx5_0:1", "mlx5_1:1", "mlx5_3:1", "mlx5_2:1"]
    # every GPU is driven, by a rank on its own socket, and by one rank only
    assert sorted(g for r in local for g in r.gpus) == [0, 1, 2, 3, 4, 5]
    node = load_site("summit").node_kinds["ac922"]
    assert all(node.gpus[g].socket == r.socket for r in local for g in r.gpus)
    # the ranks' 40 cores are not all 42: the resource set holds every core (LBANN: --cpu_per_rs ALL_CPUS)
    assert list(plan.launcher_argv) == ["jsrun", "-n2", "-a4", "-cALL_CPUS", "-g6", "-r1", "-bpacked:10"]


def test_summit_with_horovod_uses_hierarchical_allreduce_and_spectrum_mpi_device_per_rank():
    plan = plan_for("summit", nodes=4, distributed="horovod")
    assert plan.env["HOROVOD_HIERARCHICAL_ALLREDUCE"] == "1"
    assert plan.env["PAMI_ENABLE_STRIPING"] == "0"
    assert [r.env["PAMI_IBV_DEVICE_NAME"] for r in plan.local_ranks()][:3] == ["mlx5_0:1", "mlx5_1:1", "mlx5_0:1"]


# --- TACC Stampede2 and NERSC Cori (KNL) ---------------------------------------------------

def test_stampede2_knl_runs_two_ranks_per_node_by_default():
    # TACC TR-16-03: "A minimum of 2 MPI tasks per KNL helps achieve OPA bandwidth saturation"
    plan = plan_for("stampede2-knl", nodes=4)
    assert plan.ranks_per_node == 2 and [r.cores for r in plan.local_ranks()] == [tuple(range(32)), tuple(range(32, 64))]
    assert plan.env["OMP_NUM_THREADS"] == "32"


def test_stampede2_knl_gives_64_openmp_threads_to_one_rank_per_node_when_asked():
    plan = plan_for("stampede2-knl", nodes=4, ranks_per_node=1)
    assert plan.ranks_per_node == 1 and len(plan.ranks) == 4
    rank = plan.ranks[0]
    assert rank.omp_num_threads == 64 and rank.cores == tuple(range(64))
    assert plan.env["OMP_NUM_THREADS"] == "64"
    assert plan.env["KMP_AFFINITY"] == "granularity=fine,compact,1,0" and plan.env["KMP_BLOCKTIME"] == "1"
    assert plan.env["OMP_PLACES"] == "cores" and plan.env["OMP_PROC_BIND"] == "close"
    # Omni-Path: PSM2, and the HFI named for each rank
    assert plan.env["FI_PROVIDER"] == "psm2" and plan.env["PSM2_SHAREDCONTEXTS"] == "1"
    assert rank.env["HFI_UNIT"] == "0"
    assert plan.launcher_argv == ("ibrun",)


def test_stampede2_knl_two_ranks_per_node_share_the_64_cores():
    plan = plan_for("stampede2-knl", ranks_per_node=2, framework="tensorflow")
    assert [r.cores for r in plan.ranks] == [tuple(range(32)), tuple(range(32, 64))]
    assert plan.env["TF_NUM_INTRAOP_THREADS"] == "32" and plan.env["TF_NUM_INTEROP_THREADS"] == "1"
    assert plan.env["I_MPI_PIN_DOMAIN"] == "omp"


def test_intel_mpi_ranks_away_from_consecutive_blocks_get_their_own_domain_masks():
    # Intel MPI's `omp` domains are blocks of OMP_NUM_THREADS CPUs from CPU 0, local rank i in block i.
    # 3 GPUs, one on socket 0 and two on socket 1 (TACC Lonestar6's A100 nodes), one rank per GPU:
    # rank 1 sits on socket 1, where `omp` would have put it on socket 0, so each rank's domain is
    # its own mask (Intel MPI reference: I_MPI_PIN_DOMAIN=[m1,...,mn])
    from hpcdl.sites.schema import Site

    kind = {"sockets": 2, "cores_per_socket": 8, "threads_per_core": 1, "memory_gb": 64,
            "gpus": [{"model": "A100", "socket": 0}, {"model": "A100", "socket": 1}, {"model": "A100", "socket": 1}]}
    site = Site.model_validate({"name": "impi-test", "scheduler": "slurm", "launcher": "ibrun", "mpi": "intel-mpi",
                                "node_kinds": {"gpu": kind}})
    plan = make_plan(site, JobRequest(nodes=1))
    assert [r.cores for r in plan.ranks] == [tuple(range(4)), tuple(range(8, 12)), tuple(range(12, 16))]
    assert plan.env["I_MPI_PIN_DOMAIN"] == "[f,f00,f000]"


def test_intel_mpi_pin_domain_keeps_omp_for_consecutive_blocks_and_masks_the_hardware_threads_otherwise():
    from hpcdl.plan.env import intel_mpi_pin_domain

    blocks = [(0, 1), (2, 3)]
    assert intel_mpi_pin_domain("omp", blocks, blocks) == "omp"
    assert intel_mpi_pin_domain("socket", [(2, 3), (0, 1)], [(2, 3), (0, 1)]) == "socket"  # the site's own word
    # ranks in the other order; 2 hardware threads per core (core k's CPUs are k and k + 4): each
    # mask holds all of a rank's CPUs, in local-rank order
    assert intel_mpi_pin_domain("omp", [(2, 3), (0, 1)], [(2, 6, 3, 7), (0, 4, 1, 5)]) == "[cc,33]"


def test_stampede2_skx_runs_one_rank_per_socket_with_24_threads():
    plan = plan_for("stampede2-skx", nodes=2)
    assert [(r.socket, r.omp_num_threads) for r in plan.local_ranks()] == [(0, 24), (1, 24)]


def test_cori_knl_is_srun_with_66_cores_bound_and_cray_mpich_thread_multiple_for_horovod():
    # NERSC's Gordon Bell Cori script: -S 2 keeps two cores, srun -c 264 on the other 66 (4 threads each)
    plan = plan_for("cori-knl", nodes=8, distributed="horovod")
    assert list(plan.launcher_argv) == [
        "srun", "--nodes=8", "--ntasks=8", "--ntasks-per-node=1", "--cpus-per-task=264", "--cpu-bind=cores"]
    assert plan.env["MPICH_MAX_THREAD_SAFETY"] == "multiple"
    assert plan.env["HDF5_USE_FILE_LOCKING"] == "FALSE"


# --- modern GPU nodes ----------------------------------------------------------------------

def test_perlmutter_binds_each_gpu_rank_to_the_numa_domain_nearest_its_a100():
    plan = plan_for("perlmutter", nodes=2)
    local = plan.local_ranks()
    # GPU 0 is nearest NUMA domain 3 (cores 48-63), GPU 3 nearest domain 0 (cores 0-15); NERSC staff number
    # the ranks by their cores (launch.rank_order: cores), so local rank 0 is on cores 0-15 with GPU 3
    assert [(r.gpus, r.cores[0], r.cores[-1]) for r in local] == [
        ((3,), 0, 15), ((2,), 16, 31), ((1,), 32, 47), ((0,), 48, 63)]
    assert "--cpu-bind=cores" in plan.launcher_argv
    # no per-task GPU binding (it broke CUDA IPC there, E3SM issue 4834): each rank picks its own
    assert "--gpu-bind=none" in plan.launcher_argv and "--gpus-per-node=4" in plan.launcher_argv
    assert [r.env["HPCDL_GPU"] for r in local] == ["3", "2", "1", "0"]
    assert plan.env["FI_PROVIDER"] == "cxi" and plan.env["MPICH_GPU_SUPPORT_ENABLED"] == "1"
    assert plan.modules == ("craype-accel-nvidia80",)  # the GTL goes with MPICH_GPU_SUPPORT_ENABLED
    assert plan.env["NCCL_SOCKET_IFNAME"] == "hsn"  # NERSC's prefix form, from the profile's env
    # numbered by GPU instead, the same pairs: GPU 0 on cores 48-63
    by_gpu = load_site("perlmutter")
    by_gpu = by_gpu.model_copy(update={"launch": by_gpu.launch.model_copy(update={"rank_order": "devices"})})
    local = make_plan(by_gpu, JobRequest(nodes=2)).local_ranks()
    assert [(r.gpus, r.cores[0]) for r in local] == [((0,), 48), ((1,), 32), ((2,), 16), ((3,), 0)]


def test_frontier_style_node_matches_the_published_map_cpu_49_57_17_25_1_9_33_41():
    plan = plan_for("frontier")
    local = plan.local_ranks()
    assert [r.cores[0] for r in local] == [49, 57, 17, 25, 1, 9, 33, 41]
    assert all(len(r.cores) == 7 for r in local)  # 7 cores per GCD, the L3's first core left out
    assert [r.env["ROCR_VISIBLE_DEVICES"] for r in local] == [str(i) for i in range(8)]
    assert "--gpu-bind=map_gpu:0,1,2,3,4,5,6,7" in plan.launcher_argv
    node = load_site("frontier").node_kinds["mi250x"]
    for r in local:  # each GCD's NIC is the one on its own MI250X
        nic = next(n for n in node.nics if f"{n.device}:{n.port}" == r.nic)
        assert nic.domain == node.gpus[r.gpus[0]].domain


def test_frontier_plans_in_physical_cores_the_unit_its_slurm_counts():
    # OLCF Frontier user guide: --threads-per-core=1 is the default, so "-c" counts physical
    # cores; 8 x 7 = 56 cores, what low-noise mode leaves of 64 (8 x 14 would never be allocated)
    plan = plan_for("frontier", nodes=2)
    assert "--cpus-per-task=7" in plan.launcher_argv
    node = load_site("frontier").node_kinds["mi250x"]
    for r in plan.local_ranks():  # one hardware thread per core, the one Slurm hands out
        assert r.cpus == tuple(node.cpus_of_core(c)[0] for c in r.cores)
    assert plan.ranks_per_node * 7 == node.cores - len(node.reserved_cores)
    # more threads than the hardware threads Slurm gives a rank is refused there
    with pytest.raises(HpcdlError, match=r"threads_per_rank: 14 threads but each rank has 7 cores x 1 hardware"):
        plan_for("frontier", threads_per_rank=14)


def _with_node(site_name: str, kind: str, **fields):
    site = load_site(site_name)
    node = site.node_kinds[kind].model_copy(update=fields)
    return site.model_copy(update={"node_kinds": {**site.node_kinds, kind: node}})


def test_a_slurm_that_counts_hardware_threads_gets_cores_times_threads_per_task():
    # Slurm's default: every hardware thread is a CPU (NERSC Perlmutter: -c 32 for 16 cores)
    plan = plan_for("perlmutter")
    assert "--cpus-per-task=32" in plan.launcher_argv
    assert all(len(r.cpus) == 2 * len(r.cores) for r in plan.ranks)
    # the same node where the site counts cores: -c 16, one thread per core
    site = _with_node("perlmutter", "gpu", scheduler_cpus_per_core=1)
    plan = make_plan(site, JobRequest())
    assert "--cpus-per-task=16" in plan.launcher_argv
    assert all(len(r.cpus) == len(r.cores) for r in plan.ranks)


def test_more_cpus_per_core_than_hardware_threads_is_refused():
    from hpcdl.sites.schema import NodeKind

    with pytest.raises(ValueError, match="scheduler_cpus_per_core: 4 but a core has 2 hardware thread"):
        NodeKind(sockets=1, cores_per_socket=4, threads_per_core=2, scheduler_cpus_per_core=4, memory_gb=8)


def test_generic_volta_cluster_gives_each_socket_its_own_hca():
    plan = plan_for("volta-x86")
    assert [(r.socket, r.gpus, r.nic) for r in plan.local_ranks()] == [
        (0, (0,), "mlx5_0:1"), (0, (1,), "mlx5_0:1"), (1, (2,), "mlx5_1:1"), (1, (3,), "mlx5_1:1")]


# --- refusals: why, and what would work ----------------------------------------------------

def test_more_ranks_than_gpus_in_per_gpu_mode_is_refused():
    with pytest.raises(HpcdlError, match=r"ranks_per_node: 7 ranks do not fit one rank per GPU .* 6 GPUs; "
                                         r"ask for at most 6 ranks per node, or --mode per-socket"):
        plan_for("summit", ranks_per_node=7)


def test_more_threads_than_the_cores_can_run_is_refused():
    with pytest.raises(HpcdlError, match=r"threads_per_rank: 300 threads but each rank has 64 cores x 4 "
                                         r"hardware threads = 256; ask for at most 64"):
        plan_for("stampede2-knl", threads_per_rank=300, ranks_per_node=1)


def test_more_ranks_than_cores_is_refused():
    with pytest.raises(HpcdlError, match="ranks_per_node: 65 ranks need a core each .* 64 usable cores"):
        plan_for("stampede2-knl", ranks_per_node=65)


def test_more_ranks_than_cores_on_smt_says_the_threads_go_to_each_rank():
    # A CPU centre may tell its users to run a task per hardware thread (LRZ SuperMUC-NG: "With hyperthreading, you
    # have to increase the number of MPI tasks per node from 48 to 96"); hpcdl gives each rank whole cores, and the
    # refusal says where the node's second threads go instead: into each rank, as its threads
    with pytest.raises(HpcdlError, match=r"ranks_per_node: 96 ranks need a core each but .* has 48 usable cores; "
                                         r"ask for at most 48 \(hpcdl gives a rank whole cores, never one hardware "
                                         r"thread of a core: the node's 96 hardware threads are 48 cores x 2; a rank "
                                         r"may run up to 2 threads a core, --threads-per-rank\)"):
        plan_for("stampede2-skx", ranks_per_node=96)


def test_a_gpu_request_on_a_cpu_only_site_is_refused():
    with pytest.raises(HpcdlError, match=r"GPUs requested but node kind 'knl' of site 'stampede2-knl' has none; "
                                         r"pick a site with GPUs, or run on CPUs with --mode per-socket"):
        plan_for("stampede2-knl", use_gpus=True)
    with pytest.raises(HpcdlError, match="has none"):
        plan_for("cori-knl", mode="per-gpu")


def test_a_gpu_request_on_perlmutter_cpu_nodes_points_at_its_gpu_nodes():
    with pytest.raises(HpcdlError, match="use --node-kind gpu"):
        plan_for("perlmutter", node_kind="cpu", use_gpus=True)


def test_an_unknown_node_kind_names_the_ones_there_are():
    with pytest.raises(HpcdlError, match=r"node kind 'knl' is not in site 'summit'; it has: ac922"):
        plan_for("summit", node_kind="knl")


def test_an_unknown_site_is_refused():
    with pytest.raises(HpcdlError, match="unknown site 'titan'; known sites:"):
        plan_for("titan")


def test_more_nodes_than_the_site_allows_is_refused():
    with pytest.raises(HpcdlError, match="nodes: 300 is more than site 'stampede2-knl' allows"):
        plan_for("stampede2-knl", nodes=300)


def test_more_ranks_than_nic_ports_in_per_nic_mode_is_refused():
    with pytest.raises(HpcdlError, match="ranks_per_node: 5 ranks do not fit one rank per NIC"):
        plan_for("summit", mode="per-nic", ranks_per_node=5)


# --- the plan as data ----------------------------------------------------------------------

def test_plan_round_trips_through_its_json_shape():
    plan = plan_for("summit", nodes=2)
    data = plan.to_dict()
    assert data["world_size"] == 12
    assert set(data["ranks"][0]) >= {"rank", "node", "local_rank", "socket", "cores", "gpus", "nic",
                                     "omp_num_threads", "env"}
    assert Plan.from_dict(data) == plan


def test_a_value_the_job_shell_builds_keeps_its_shape_in_plan_json():
    # Polaris prepends ALCF's aws-ofi-nccl folder to LD_LIBRARY_PATH: plan.json names the folders, not a
    # joined string, and reads back as the same value
    plan = plan_for("polaris", nodes=2)
    value = plan.env_paths["LD_LIBRARY_PATH"]
    assert value == PathValue(prepend=("/soft/libraries/aws-ofi-nccl/v1.9.1-aws/lib",))
    data = json.loads(json.dumps(plan.to_dict()))
    assert data["env_paths"] == {"LD_LIBRARY_PATH": {"prepend": ["/soft/libraries/aws-ofi-nccl/v1.9.1-aws/lib"],
                                                     "append": []}}
    assert Plan.from_dict(data) == plan
    assert value.shown("LD_LIBRARY_PATH") == "/soft/libraries/aws-ofi-nccl/v1.9.1-aws/lib:$LD_LIBRARY_PATH"
    whole = PathValue(path="$SCRATCH/.cache/huggingface")
    assert whole.to_dict() == {"path": "$SCRATCH/.cache/huggingface"} and PathValue.from_dict(whole.to_dict()) == whole
    assert whole.shown("HF_HOME") == "$SCRATCH/.cache/huggingface"


def test_the_same_request_gives_the_same_plan():
    assert plan_for("frontier", nodes=3) == plan_for("frontier", nodes=3)


def test_ranks_that_see_the_whole_nodes_gpus_drive_distinct_ones_the_step_holds_on_a_partial_node():
    """gpu_visibility node: the step asks as many GPUs as the node's ranks hold (--gres=gpu:N, jsrun -gN)
    and sees them numbered 0..N-1, so each rank's HPCDL_GPU is its GPU's place among those held. Two
    ranks of a half Jean Zay node sit on GPUs 0 and 2 (one per socket): they drive visible 0 and 1;
    numbered by the node they drove 0 and 2, and the trainer's index modulo 2 put both on GPU 0."""
    from hpcdl.sites.registry import list_sites

    checked = 0
    for name in sorted(list_sites()):
        if name == "local":
            continue
        site = load_site(name)
        if site.launch.gpu_visibility != "node":
            continue
        for kind, node in site.node_kinds.items():
            for ranks in range(1, len(node.gpus) + 1):
                try:
                    plan = make_plan(site, JobRequest(nodes=1, node_kind=kind, ranks_per_node=ranks))
                except HpcdlError:
                    continue  # a layout the site refuses (a default binding that cannot give it)
                local = plan.local_ranks()
                held = len({g for r in local for g in r.gpus})
                if not held:
                    continue
                drives = [int(i) for r in local for i in r.env["HPCDL_GPU"].split(",")]
                assert sorted(drives) == list(range(held)), (name, kind, ranks, drives)
                counted = [w for w in plan.launcher_argv if w.endswith((f"gpu:{held}", f":{held}", f"={held}"))
                           or w == f"-g{held}"]
                # srun's and jsrun's steps ask the GPUs themselves (elsewhere the batch request does: LSF's rusage), but a
                # bare srun under the header (launch.srun_layout: header) has the job's: "By default, a job step is
                # allocated all of the generic resources that have been requested by the job" (srun(1))
                bare = plan.launcher == "srun" and site.launch.srun_layout == "header"
                assert counted or bare or plan.launcher not in ("srun", "jsrun"), (name, kind, ranks, plan.launcher_argv)
                checked += 1
    assert checked >= 10


def test_a_rank_keeps_to_its_gpus_numa_domain_whatever_part_of_the_node_it_runs_on():
    # IT4I Karolina's GPUs sit on NUMA domains 2,3,0,1,6,7,4,5 (ESPRESO's ESPRESO_RANK_TO_GPU_MAP): a one-GPU job on
    # a node it shares took GPU 0 with cores 0-15, domain 0's, where GPU 0's own are 32-47. Every shipped kind
    # whose GPUs name their domain, at every count of GPUs: each rank's cores are its GPU's domain, part of it,
    # or the whole of it and more (JSC's 12 cores a GPU over 6-core domains)
    from hpcdl.sites.registry import list_sites

    checked = 0
    for name in sorted(list_sites()):
        site = load_site(name)
        for kind, node in site.node_kinds.items():
            if not node.gpus or any(gpu.domain is None for gpu in node.gpus):
                continue
            for rpn in range(1, len(node.gpus) + 1):
                try:
                    plan = make_plan(site, JobRequest(nodes=1, ranks_per_node=rpn, node_kind=kind))
                except HpcdlError:
                    continue  # a layout the site refuses
                for rank in plan.ranks:
                    if len(rank.gpus) != 1:
                        continue
                    domain = set(node.usable_cores_of_domain(node.gpus[rank.gpus[0]].domain))
                    block = set(rank.cores)
                    if node.shared_domain_cores == "spill":
                        # the ranks of GPUs that share a domain hold it together (NHR@FAU Alex), one on it
                        mates = [r for r in plan.ranks if r.node == rank.node and len(r.gpus) == 1
                                 and node.gpus[r.gpus[0]].domain == node.gpus[rank.gpus[0]].domain]
                        block = {c for r in mates for c in r.cores} if len(mates) > 1 else block
                    assert domain <= block or block <= domain, (name, kind, rpn, rank.local_rank, rank.gpus, rank.cores)
                    checked += 1
    assert checked > 100


def test_a_shared_node_where_slurm_binds_by_cores_hands_out_the_gpus_beside_the_first_cores():
    """ASU Sol's A100 node (NPS4): GPU 0 beside cores 18-23, GPU 1 beside 6-11. Its Slurm binds a task itself
    (task/affinity, block distribution: launch.cpu_bind_default auto, rank_order cores), so a job on part of the
    node gets the first cores; its ranks drive the GPUs beside them, not GPU 0 on cores Slurm does not give it."""
    one = plan_for("sol-gpu", nodes=1, ranks_per_node=1)
    assert [(list(r.cores), list(r.gpus)) for r in one.local_ranks()] == [(list(range(0, 12)), [1])]
    three = plan_for("sol-gpu", nodes=1, ranks_per_node=3)
    assert [(r.cores[0], list(r.gpus)) for r in three.local_ranks()] == [(0, [1]), (12, [0]), (24, [3])]

"""The TensorFlow backend: cluster specs from the launcher, thread pools from the plan, real training."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from conftest import RECIPES, hpcdl
from framework_tools import final_record

from hpcdl.errors import HpcdlError
from hpcdl.train.backends.tensorflow.trainer import expand_nodelist, expand_tasks_per_node, tf_config, thread_counts
from hpcdl.train.ranks import RankInfo

ACCURACY = 0.85


def test_slurm_node_lists_expand_in_order_keeping_zero_padding():
    assert expand_nodelist("nid[001-003,010],login1") == ["nid001", "nid002", "nid003", "nid010", "login1"]
    assert expand_nodelist("c1") == ["c1"]
    assert expand_tasks_per_node("2(x3),1") == [2, 2, 2, 1]


def test_slurm_node_lists_with_a_suffix_or_two_ranges_expand_as_slurm_does():
    # what `scontrol show hostnames` prints for the same lists
    assert expand_nodelist("n[1-2]-ib") == ["n1-ib", "n2-ib"]
    assert expand_nodelist("rack[1-2]-node[01-02]") == ["rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"]
    assert expand_nodelist("gpu-a[01-02],cpu7") == ["gpu-a01", "gpu-a02", "cpu7"]


def test_tf_config_under_srun_puts_worker_i_on_the_node_that_runs_rank_i():
    env = {"SLURM_STEP_NODELIST": "node[07-08]", "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_JOB_ID": "1201"}
    cfg = tf_config(env, RankInfo(rank=3, world_size=4, local_rank=1, launcher="srun"))
    # 20000 + 10 * (1201 mod 1200): two jobs on one node get different ports
    assert cfg["cluster"]["worker"] == ["node07:20010", "node07:20011", "node08:20010", "node08:20011"]
    assert cfg["task"] == {"type": "worker", "index": 3}


def test_tf_config_under_hpcdl_launch_uses_ports_after_master_port():
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "LOCAL_WORLD_SIZE": "2"}
    cfg = tf_config(env, RankInfo(1, 2, 1, "torchrun"))
    assert cfg == {"cluster": {"worker": ["127.0.0.1:29501", "127.0.0.1:29502"]}, "task": {"type": "worker", "index": 1}}


def test_tf_config_under_mpi_numbers_ports_per_host():
    env = {"OMPI_COMM_WORLD_LOCAL_SIZE": "2", "MASTER_ADDR": "a"}
    cfg = tf_config(env, RankInfo(2, 3, 0, "openmpi"), mpi_hosts=["a", "a", "b"])
    assert cfg["cluster"]["worker"] == ["a:20000", "a:20001", "b:20000"]


def test_tf_config_under_mpirun_on_one_node_needs_no_host_exchange():
    env = {"OMPI_COMM_WORLD_LOCAL_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "4000"}
    cfg = tf_config(env, RankInfo(0, 2, 0, "openmpi"))
    assert cfg["cluster"]["worker"] == ["127.0.0.1:4001", "127.0.0.1:4002"]


def test_an_explicit_tf_config_wins_and_a_multi_node_master_addr_alone_is_refused():
    given = {"cluster": {"worker": ["x:1", "y:2"]}, "task": {"type": "worker", "index": 0}}
    assert tf_config({"TF_CONFIG": json.dumps(given)}, RankInfo(0, 2, 0, "srun")) == given
    with pytest.raises(HpcdlError, match="several nodes"):
        tf_config({"MASTER_ADDR": "n1", "LOCAL_WORLD_SIZE": "2"}, RankInfo(0, 4, 0, "torchrun"))
    with pytest.raises(HpcdlError, match="several nodes"):
        tf_config({"OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, RankInfo(0, 4, 0, "openmpi"))  # no host list given


def test_thread_pools_follow_the_plans_intra_and_inter_op_counts():
    assert thread_counts({"HPCDL_INTRA_OP_THREADS": "16", "HPCDL_INTER_OP_THREADS": "2", "OMP_NUM_THREADS": "4"}) == (16, 2)
    assert thread_counts({"OMP_NUM_THREADS": "4"}) == (4, 0)


@pytest.mark.slow
def test_hpcdl_run_trains_cifar10_quick_with_tensorflow_on_two_workers_with_the_plans_threads(tmp_path, isolated_jobs):
    """The whole path: plan (framework tensorflow) -> job script -> hpcdl launch -> TF_CONFIG -> training."""
    recipe = tmp_path / "quick.yaml"
    recipe.write_text(re.sub(r"(?m)^max_iter: .*$", "max_iter: 200", (RECIPES / "digits-quick.yaml").read_text()))
    run_dir = tmp_path / "run"
    proc = hpcdl("run", "--site", "local", "--framework", "tensorflow", recipe, "--out", run_dir, cwd=tmp_path,
                 env={"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    plan = json.loads((run_dir / "plan.json").read_text())
    final = final_record(run_dir / "results.jsonl")
    assert final["framework"] == "tensorflow" and final["ranks"] == 2 == plan["world_size"]
    assert final["accuracy"] >= ACCURACY
    assert final["weights_equal"], final["weights_digest_by_rank"]
    assert final["images_per_sec_total"] > 0
    # TensorFlow's pools were sized by the plan before its runtime started
    assert final["intra_op_threads"] == int(plan["env"]["HPCDL_INTRA_OP_THREADS"])
    assert final["inter_op_threads"] == int(plan["env"]["HPCDL_INTER_OP_THREADS"])


@pytest.mark.slow
def test_tensorflow_resume_from_a_snapshot_continues_as_the_uninterrupted_run(tmp_path):
    """In this process (one TensorFlow start instead of three): stop at 10, resume to 20."""
    from hpcdl.train.main import run_training

    recipe = tmp_path / "r.yaml"
    recipe.write_text((RECIPES / "digits-quick.yaml").read_text() + f"snapshot: 10\nsnapshot_prefix: {tmp_path}/snap/quick\n")
    whole = tmp_path / "whole.yaml"
    whole.write_text(recipe.read_text().replace(f"{tmp_path}/snap/", f"{tmp_path}/whole/"))
    resumed = tmp_path / "resumed.jsonl"
    run_training(str(whole), None, None, {"max_iter": 20}, framework="tensorflow")
    run_training(str(recipe), None, None, {"max_iter": 10}, framework="tensorflow")  # stops after the snapshot at 10
    run_training(str(recipe), None, str(resumed), {"max_iter": 20}, framework="tensorflow")  # ... and picks up there
    assert json.loads(resumed.read_text().splitlines()[0])["resumed_from"] == 10
    with np.load(tmp_path / "whole/quick_tensorflow_iter_20.npz") as a, np.load(tmp_path / "snap/quick_tensorflow_iter_20.npz") as b:
        assert a.files == b.files
        for key in a.files:
            np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-6, err_msg=key)


def test_a_recipe_rule_the_backend_lacks_is_refused_naming_the_field():
    """A rule a backend lacks is refused by name, never skipped quietly.

    LARS, LARC, the other optimizer rules and GoogLeNet's auxiliary heads are shared
    (tests/test_framework_optim.py, tests/test_caffe_semantics.py); Horovod still refuses LARS."""
    from types import SimpleNamespace

    from hpcdl.train.framework_loop import refuse_unsupported

    refuse_unsupported(SimpleNamespace(name="plain"), "tensorflow")  # a recipe without those fields
    refuse_unsupported(SimpleNamespace(name="lars", type="LARS", label_smoothing=0.1), "tensorflow")
    refuse_unsupported(SimpleNamespace(name="aux", aux_heads=True), "tensorflow")
    with pytest.raises(HpcdlError, match="gradient_lag: True.*tensorflow"):
        refuse_unsupported(SimpleNamespace(name="lag", gradient_lag=True), "tensorflow")
    with pytest.raises(HpcdlError, match="type: 'LARS'.*horovod"):
        refuse_unsupported(SimpleNamespace(name="lars", type="LARS"), "pytorch with horovod")


class _Config:
    """tf.config's two device calls over a list of GPU names (no GPU exists on the CI machine)."""

    def __init__(self, gpus):
        self.gpus = [type("PhysicalDevice", (), {"name": g})() for g in gpus]
        self.visible = list(self.gpus)

    def list_physical_devices(self, kind):
        return list(self.gpus) if kind == "GPU" else []

    def set_visible_devices(self, devices, kind):
        self.visible = devices if isinstance(devices, list) else [devices]


@pytest.mark.parametrize("env,device,gpus,chosen,visible", [
    ({"HPCDL_GPU": "2"}, "auto", 4, "/physical_device:GPU:2", 1),   # every rank sees the node's GPUs: the plan's
    ({}, "auto", 4, "/physical_device:GPU:1", 1),                   # else the local rank's
    ({}, "auto", 1, "/physical_device:GPU:0", 1),                   # the launcher left one visible
    ({}, "cpu", 2, "cpu", 0),                                       # device: cpu hides them
    ({}, "auto", 0, "cpu", 0),
])
def test_a_tensorflow_rank_sees_one_gpu_the_plans_or_its_local_ranks(monkeypatch, env, device, gpus, chosen, visible):
    from hpcdl.train.backends.tensorflow.trainer import select_device
    from hpcdl.train.recipe import recipe_from_dict

    for key in ("HPCDL_GPU",):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    config = _Config([f"/physical_device:GPU:{i}" for i in range(gpus)])
    tf = type("tf", (), {"config": config})
    recipe = recipe_from_dict({"name": "r", "net": "cifar10_quick", "batch_size": 4, "base_lr": 0.1, "max_iter": 1,
                               "device": device}, "r")
    assert select_device(tf, recipe, RankInfo(5, 8, 1, "srun")) == chosen
    assert len(config.visible) == visible


def test_a_tensorflow_rank_asked_for_cuda_without_a_gpu_is_refused():
    from hpcdl.train.backends.tensorflow.trainer import select_device
    from hpcdl.train.recipe import recipe_from_dict

    recipe = recipe_from_dict({"name": "r", "net": "cifar10_quick", "batch_size": 4, "base_lr": 0.1, "max_iter": 1,
                               "device": "cuda"}, "r")
    with pytest.raises(HpcdlError, match="^device: cuda asked for, but TensorFlow sees no GPU here$"):
        select_device(type("tf", (), {"config": _Config([])}), recipe, RankInfo(0, 1, 0, "none"))

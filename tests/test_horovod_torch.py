"""PyTorch + Horovod (`--dist horovod`) on 2 ranks, over Gloo and over MPI, trains and stays in step.

Horovod 0.28.1 is a legacy path (no release since June 2023); `make horovod` builds it for
PyTorch with the C++17 fix. These tests need that build, as CI has it after make setup.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from conftest import RECIPES, hpcdl, require_tool
from framework_tools import final_record, records, require_horovod, run

# 2 ranks x batch 32: 200 iterations are about 9 epochs of the 1,437 training digits
ITERS = "200"
ACCURACY = 0.90


@pytest.mark.slow
def test_horovod_over_gloo_trains_two_ranks_with_the_plans_fusion_settings_and_equal_weights(tmp_path):
    require_horovod()
    plan = tmp_path / "plan.json"
    plan.write_text(hpcdl("plan", "--site", "local", "--dist", "horovod", "--json", check=True).stdout)
    results = tmp_path / "results.jsonl"
    horovodrun = shutil.which("horovodrun", path=str(__import__("pathlib").Path(sys.executable).parent))
    assert horovodrun, "horovodrun comes with the Horovod wheel"
    run([horovodrun, "-np", "2", "--gloo", "-H", "localhost:2", sys.executable, "-m", "hpcdl.train",
         RECIPES / "digits-quick.yaml", "--dist", "horovod", "--plan", plan, "--max-iter", ITERS, "--results", results])
    final = final_record(results)
    assert final["ranks"] == 2 and final["distributed"] == "horovod"
    assert final["horovod_controller"] == "gloo"
    assert final["accuracy"] >= ACCURACY
    assert final["weights_equal"], final["weights_digest_by_rank"]
    # the planner's Tensor Fusion settings reached Horovod's core (128 MiB buffer, 1 ms cycle)
    assert final["horovod_env"]["HOROVOD_FUSION_THRESHOLD"] == str(128 * 1024 * 1024)
    assert final["horovod_env"]["HOROVOD_CYCLE_TIME"] == "1"


@pytest.mark.slow
def test_horovod_over_mpi_with_fp16_compression_trains_two_ranks_with_equal_weights(tmp_path):
    require_horovod()
    mpirun = require_tool("mpirun")
    results = tmp_path / "results.jsonl"
    # Open MPI refuses root unless told twice; CI containers run as root
    env = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "HPCDL_FP16_ALLREDUCE": "1"}
    run([mpirun, "-np", "2", "--bind-to", "none", "-x", "OMP_NUM_THREADS", "-x", "HPCDL_INTRA_OP_THREADS",
         "-x", "HPCDL_FP16_ALLREDUCE", "-x", "PATH", sys.executable, "-m", "hpcdl.train", RECIPES / "digits-quick.yaml",
         "--dist", "horovod", "--max-iter", ITERS, "--results", results], env=env)
    final = final_record(results)
    assert final["ranks"] == 2
    assert final["horovod_controller"] == "mpi" and final["fp16_allreduce"] is True
    assert final["accuracy"] >= ACCURACY
    assert final["weights_equal"], final["weights_digest_by_rank"]


@pytest.mark.parametrize("precision,channels_last", [("bf16", True), ("fp16", False)])
def test_horovod_trains_in_the_recipes_precision_and_memory_format_on_the_ranks_device(tmp_path, precision,
                                                                                      channels_last):
    """device, precision (fp16 with loss scaling) and channels_last reach the Horovod path as the torch.distributed
    one (they were ignored: a GPU site's --dist horovod job trained fp32 on the CPU); one rank, 3 steps."""
    import yaml

    require_horovod()
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({
        "name": "hvd", "net": "cifar10_quick", "batch_size": 8, "base_lr": 0.01, "max_iter": 3, "display": 1,
        "precision": precision, "channels_last": channels_last,
        "data": {"source": "synthetic", "synthetic_samples": 64, "image_size": 32, "num_classes": 10}}))
    results = tmp_path / "r.jsonl"
    run([sys.executable, "-m", "hpcdl.train", recipe, "--dist", "horovod", "--results", results])
    start = next(r for r in records(results) if r["event"] == "start")
    assert (start["device"], start["precision"], start["channels_last"]) == ("cpu", precision, channels_last)
    steps = [r for r in records(results) if r["event"] == "step"]
    assert len(steps) == 3 and all(r["loss"] == r["loss"] for r in steps)  # not NaN


def test_horovod_with_tensorflow_is_refused_naming_the_upstream_problem(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "hpcdl.train", str(RECIPES / "digits-quick.yaml"), "--framework", "tensorflow",
         "--dist", "horovod"], capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "horovod#4290" in lines[0] and "Keras 3" in lines[0]


def test_horovod_build_has_pytorch_gloo_and_mpi_but_not_tensorflow():
    hvd = require_horovod()
    assert hvd.gloo_built() and hvd.mpi_built()
    import horovod

    assert horovod.__version__ == "0.28.1"
    with pytest.raises(ImportError):
        import horovod.tensorflow  # noqa: F401  (built HOROVOD_WITHOUT_TENSORFLOW)

"""The MXNet backend (Gluon) in its own venv: one process with a local kvstore, and a
dist_sync parameter-server job (scheduler, server and 2 workers) on this node."""

from __future__ import annotations

import pytest
from conftest import RECIPES
from framework_tools import final_record, mxnet_python, run

ACCURACY = 0.85


@pytest.mark.slow
def test_mxnet_trains_cifar10_quick_on_digits_in_one_process(tmp_path):
    python = mxnet_python()
    results = tmp_path / "results.jsonl"
    run([python, "-m", "hpcdl.train", RECIPES / "digits-quick.yaml", "--framework", "mxnet", "--max-iter", "200",
         "--results", results])
    final = final_record(results)
    assert final["framework"] == "mxnet" and final["distributed"] == "kvstore:local"
    assert final["accuracy"] >= ACCURACY


@pytest.mark.slow
def test_mxnet_dist_sync_kvstore_trains_two_workers_with_equal_weights(tmp_path):
    python = mxnet_python()
    results = tmp_path / "results.jsonl"
    run([python, "-m", "hpcdl.train.backends.mxnet.kvstore", "--workers", "2", "--servers", "1", "--",
         python, "-m", "hpcdl.train", RECIPES / "digits-quick.yaml", "--framework", "mxnet", "--max-iter", "200",
         "--results", results])
    final = final_record(results)
    assert final["distributed"] == "kvstore:dist_sync" and final["ranks"] == 2
    assert final["accuracy"] >= ACCURACY
    assert final["weights_equal"], final["weights_digest_by_rank"]


@pytest.mark.slow
def test_mxnet_resume_from_a_snapshot_continues_as_the_uninterrupted_run(tmp_path):
    import json

    import numpy as np

    python = mxnet_python()
    base = (RECIPES / "digits-quick.yaml").read_text() + "snapshot: 10\n"
    parts, whole = tmp_path / "parts.yaml", tmp_path / "whole.yaml"
    parts.write_text(base + f"snapshot_prefix: {tmp_path}/parts/quick\n")
    whole.write_text(base + f"snapshot_prefix: {tmp_path}/whole/quick\n")
    train = [python, "-m", "hpcdl.train", "--framework", "mxnet"]
    run([*train, whole, "--max-iter", "20"])
    run([*train, parts, "--max-iter", "10"])
    resumed = tmp_path / "resumed.jsonl"
    run([*train, parts, "--max-iter", "20", "--results", resumed])
    assert json.loads(resumed.read_text().splitlines()[0])["resumed_from"] == 10
    with np.load(tmp_path / "whole/quick_mxnet_iter_20.npz") as a, np.load(tmp_path / "parts/quick_mxnet_iter_20.npz") as b:
        assert a.files == b.files and any(k.startswith("m:") for k in a.files)  # momentum is saved too
        for key in a.files:
            np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-6, err_msg=key)


def test_mxnet_refuses_several_ranks_without_the_parameter_server_roles():
    from hpcdl.errors import HpcdlError
    from hpcdl.train.backends.mxnet.trainer import kvstore_kind

    assert kvstore_kind({}, 1) == "local"
    assert kvstore_kind({"DMLC_ROLE": "worker", "DMLC_NUM_WORKER": "2"}, 2) == "dist_sync"
    with pytest.raises(HpcdlError, match=r"hpcdl\.train\.backends\.mxnet\.kvstore"):
        kvstore_kind({}, 2)

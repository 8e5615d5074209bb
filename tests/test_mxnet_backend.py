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
    run([python, "-m", "hpcdl.train", RECIPES / "cifar10-quick.yaml", "--framework", "mxnet", "--max-iter", "200",
         "--results", results])
    final = final_record(results)
    assert final["framework"] == "mxnet" and final["distributed"] == "kvstore:local"
    assert final["accuracy"] >= ACCURACY


@pytest.mark.slow
def test_mxnet_dist_sync_kvstore_trains_two_workers_with_equal_weights(tmp_path):
    python = mxnet_python()
    results = tmp_path / "results.jsonl"
    run([python, "-m", "hpcdl.train.mxnet_kvstore", "--workers", "2", "--servers", "1", "--",
         python, "-m", "hpcdl.train", RECIPES / "cifar10-quick.yaml", "--framework", "mxnet", "--max-iter", "200",
         "--results", results])
    final = final_record(results)
    assert final["distributed"] == "kvstore:dist_sync" and final["ranks"] == 2
    assert final["accuracy"] >= ACCURACY
    assert final["weights_equal"], final["weights_digest_by_rank"]


def test_mxnet_refuses_several_ranks_without_the_parameter_server_roles():
    from hpcdl.errors import HpcdlError
    from hpcdl.train.mxnet_backend import kvstore_kind

    assert kvstore_kind({}, 1) == "local"
    assert kvstore_kind({"DMLC_ROLE": "worker", "DMLC_NUM_WORKER": "2"}, 2) == "dist_sync"
    with pytest.raises(HpcdlError, match="mxnet_kvstore"):
        kvstore_kind({}, 2)

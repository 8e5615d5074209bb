"""`compile:` in a recipe: the PyTorch trainer's step under torch.compile (inductor's C++ backend here).

The compiled step must train as the eager one does: the same loss records to float tolerance
(inductor fuses and reorders float sums, so not to the bit), and a compiled run resumed from its
snapshot takes the uninterrupted compiled run's steps exactly, since the same generated kernels
run in both. Compiling costs tens of seconds of C++ builds on this machine: one short run each.
"""

from __future__ import annotations

import pytest
import torch
from test_train import final_weights, records, train_here, write_recipe

from hpcdl.errors import HpcdlError
from hpcdl.train import checkpoint
from hpcdl.train.recipe import recipe_from_dict

pytestmark = pytest.mark.slow

ITERS = 4


def losses(path) -> list[float]:
    return [r["loss"] for r in records(path) if r["event"] == "step"]


@pytest.fixture(scope="module")
def compiled_run(tmp_path_factory):
    """One compiled run with a snapshot half way; its records and snapshot folder."""
    tmp = tmp_path_factory.mktemp("compiled")
    recipe = write_recipe(tmp, "c", max_iter=ITERS, compile="default", snapshot=ITERS // 2,
                          snapshot_prefix=str(tmp / "snap" / "c"))
    from torch._dynamo.utils import counters

    counters.clear()
    summary = train_here(recipe, tmp / "c.jsonl")
    # what TorchDynamo turned into graphs in this process: none if the step ran eagerly
    graphs = counters["stats"]["unique_graphs"]
    return tmp, summary, graphs


def test_the_compiled_step_trains_as_the_eager_one(compiled_run, tmp_path):
    tmp, summary, graphs = compiled_run
    assert graphs >= 1, "the compiled run traced no graph: its step ran eagerly"
    eager = write_recipe(tmp_path, "e", max_iter=ITERS)
    train_here(eager, tmp_path / "e.jsonl")
    start = next(r for r in records(tmp / "c.jsonl") if r["event"] == "start")
    assert start["compile"] == "default"
    compiled_losses, eager_losses = losses(tmp / "c.jsonl"), losses(tmp_path / "e.jsonl")
    assert len(compiled_losses) == len(eager_losses) == ITERS
    assert compiled_losses == pytest.approx(eager_losses, rel=1e-4)
    # and the step did change the weights: a compiled module that never updated would keep them
    first, last = compiled_losses[0], compiled_losses[-1]
    assert first != last


def test_a_compiled_run_resumed_from_its_snapshot_takes_the_same_steps(compiled_run, tmp_path):
    tmp, _, _ = compiled_run
    whole = final_weights(tmp / "snap" / "c")
    # resume from the half-way snapshot alone: the newest one is set aside
    half = checkpoint.snapshot_path(str(tmp / "snap" / "c"), ITERS // 2)
    resumed_prefix = tmp_path / "snap" / "c"
    resumed_prefix.parent.mkdir()
    target = checkpoint.snapshot_path(str(resumed_prefix), ITERS // 2)
    target.write_bytes(half.read_bytes())
    recipe = write_recipe(tmp_path, "c", max_iter=ITERS, compile="default", snapshot=ITERS // 2,
                          snapshot_prefix=str(resumed_prefix))
    train_here(recipe, tmp_path / "resumed.jsonl")
    resumed = final_weights(resumed_prefix)
    assert whole.keys() == resumed.keys()
    for key in whole:
        assert torch.equal(whole[key], resumed[key]), key
    assert losses(tmp_path / "resumed.jsonl") == losses(tmp / "c.jsonl")[ITERS // 2:]


@pytest.mark.parametrize("fields, says", [
    ({"framework": "tensorflow"}, "compile: default is torch.compile, for the PyTorch backend"),
    ({"distributed": "horovod"}, "compile: default is torch.compile, for the PyTorch backend"),
    ({"spatial": {"ways": 2, "split": "rows"}}, "compile: the spatial and per-pixel loop"),
])
def test_compile_is_refused_where_no_compiled_step_runs(fields, says):
    base = {"name": "r", "net": "cifar10_quick", "batch_size": 2, "base_lr": 0.1, "max_iter": 1, "compile": "default"}
    with pytest.raises(HpcdlError, match=says):
        recipe_from_dict({**base, **fields}, "r.yaml")

"""The spatial trainer as a specification: the same losses on 1 rank and on a 2-way spatial
group, and a sample too large for a rank's memory budget with sample parallelism that trains
when 4 ranks share it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

THREADS = {"OMP_NUM_THREADS": "1", "HPCDL_PROGRESS": "plain"}
PLATFORM = str(Path(__file__).parent.parent / "platform")


def mesh_recipe(folder: Path, name: str, **fields) -> Path:
    base = {"name": name, "net": "mesh", "batch_size": 2, "base_lr": 0.01, "momentum": 0.9, "max_iter": 3,
            "display": 1, "class_weighting": "inverse_frequency",
            "data": {"source": "mesh", "image_size": 24, "synthetic_samples": 10, "holdout_fraction": 0.2}}
    base.update(fields)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(base))
    return path


def train(ranks: int, recipe: Path, results: Path) -> subprocess.CompletedProcess:
    trainer = [sys.executable, "-m", "hpcdl.train", str(recipe), "--results", str(results)]
    argv = trainer if ranks == 1 else [sys.executable, "-m", "hpcdl", "launch", "-n", str(ranks), "--oversubscribe", "--", *trainer]
    env = {**os.environ, **THREADS, "PYTHONPATH": PLATFORM}
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)


def records(path: Path, event: str) -> list[dict]:
    return [r for r in map(json.loads, path.read_text().splitlines()) if r["event"] == event]


def test_a_two_way_spatial_group_trains_with_the_losses_of_one_rank(tmp_path):
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    assert train(1, mesh_recipe(tmp_path, "one"), one).returncode == 0
    done = train(2, mesh_recipe(tmp_path, "two", spatial={"ways": 2, "split": "rows"}), two)
    assert done.returncode == 0, done.stderr[-2000:]
    start = records(two, "start")[0]
    assert (start["spatial_ways"], start["data_parallel_groups"], start["global_batch"]) == (2, 1, 2)
    a, b = records(one, "step"), records(two, "step")
    assert [r["iter"] for r in a] == [r["iter"] for r in b] == [1, 2, 3]
    for x, y in zip(a, b):  # three updates: the weights stay the same on both
        assert y["loss"] == pytest.approx(x["loss"], rel=1e-5)
    assert records(two, "test")[-1]["accuracy"] == pytest.approx(records(one, "test")[-1]["accuracy"], abs=1e-6)


def test_a_sample_over_the_memory_budget_fails_with_sample_parallelism_and_trains_four_way(tmp_path):
    # mesh net at 128 x 128, 2 samples: about 49 MiB of activations on one rank, about 14 MiB on
    # each of 4 (a quarter plus the halo rows); the budget sits between them
    budget = {"image_size": 128, "activation_budget_mib": 24}
    fields = {"data": {"source": "mesh", "image_size": budget["image_size"], "synthetic_samples": 4,
                       "holdout_fraction": 0.25}, "max_iter": 1, "activation_budget_mib": budget["activation_budget_mib"]}
    whole = train(1, mesh_recipe(tmp_path, "whole", **fields), tmp_path / "whole.jsonl")
    assert whole.returncode != 0
    assert "activation_budget_mib" in whole.stderr and "spatial.ways" in whole.stderr
    split = train(4, mesh_recipe(tmp_path, "split", spatial={"ways": 4}, **fields), tmp_path / "split.jsonl")
    assert split.returncode == 0, split.stderr[-2000:]
    final = records(tmp_path / "split.jsonl", "final")[0]
    assert final["activation_mib_per_rank"] < budget["activation_budget_mib"]


def test_spatial_ways_that_do_not_divide_the_ranks_are_refused_naming_the_field(tmp_path):
    done = train(2, mesh_recipe(tmp_path, "odd", spatial={"ways": 3}), tmp_path / "odd.jsonl")
    assert done.returncode != 0
    assert "spatial.ways" in done.stderr

"""hpcdl recipes (issue 16): the example recipes ship inside the package, listed and copied out."""

from __future__ import annotations

import json
import zipfile

import pytest

from conftest import RECIPES, ROOT, hpcdl


def test_recipes_lists_every_shipped_recipe():
    rows = {r["name"]: r for r in json.loads(hpcdl("recipes", "--json", check=True).stdout)}
    assert set(rows) == {p.stem for p in RECIPES.glob("*.yaml")}
    assert rows["cifar10-quick"]["net"] == "cifar10_quick"
    out = hpcdl("recipes", check=True).stdout
    assert "cifar10-quick" in out and max(len(line) for line in out.splitlines()) <= 120


def test_a_copied_recipe_renders_and_is_never_overwritten_silently(tmp_path):
    hpcdl("recipes", "copy", "cifar10-quick", cwd=tmp_path, check=True)
    copy = tmp_path / "cifar10-quick.yaml"
    assert copy.read_text() == (RECIPES / "cifar10-quick.yaml").read_text()
    assert hpcdl("render", "-s", "local", copy, check=True).stdout.startswith("#!/bin/bash")
    proc = hpcdl("recipes", "copy", "cifar10-quick", tmp_path)
    assert proc.returncode == 2 and "--force" in proc.stderr
    hpcdl("recipes", "copy", "cifar10-quick", tmp_path, "--force", check=True)
    proc = hpcdl("recipes", "copy", "no-such-recipe", tmp_path)
    assert proc.returncode == 2 and "cifar10-quick" in proc.stderr


@pytest.mark.slow
def test_a_built_wheel_carries_the_recipes(tmp_path):
    """What `pip install .` installs: the recipes are package data, not files beside a checkout."""
    import subprocess
    import sys

    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q", str(ROOT),
                    "-w", str(tmp_path)], check=True, capture_output=True, timeout=600, cwd=tmp_path)
    wheel = next(tmp_path.glob("hpcdl-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for recipe in RECIPES.glob("*.yaml"):
        assert f"hpcdl/recipes/{recipe.name}" in names

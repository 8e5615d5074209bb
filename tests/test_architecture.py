"""The architecture as a contract: import-linter holds the package to the layers in pyproject.toml.

A layer imports only the layers below it, the framework backends do not import each other,
and no two modules (or folders) of a package import each other in a circle; an import made for
annotations only (under `if TYPE_CHECKING:`) counts as any other. The same layers
are drawn in docs/architecture.md, and a test keeps the drawing equal to the contract.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from conftest import ROOT

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(package_parent: Path, config: Path = ROOT / "pyproject.toml") -> subprocess.CompletedProcess:
    if not LINT_IMPORTS.exists():
        pytest.fail("lint-imports is missing: `make test` installs import-linter with the test extras")
    return subprocess.run([str(LINT_IMPORTS), str(config), "--no-cache"], capture_output=True, text=True,
                          cwd=package_parent, timeout=300,
                          env={"PYTHONPATH": str(package_parent), "PATH": "/usr/bin:/bin", "COLUMNS": "300"})


def contract_layers() -> list[str]:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    return next(c for c in contracts if c["id"] == "layers")["layers"]


def test_the_package_keeps_its_import_contract():
    proc = lint_imports(ROOT / "platform")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


@pytest.fixture
def package_copy(tmp_path):
    copy = tmp_path / "hpcdl"
    shutil.copytree(ROOT / "platform" / "hpcdl", copy, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_an_import_from_a_lower_layer_up_breaks_the_contract(package_copy):
    registry = package_copy / "hpcdl" / "sites" / "registry.py"
    registry.write_text(registry.read_text() + "\nfrom hpcdl.cli.output import console  # noqa: E402\n")
    proc = lint_imports(package_copy)
    assert proc.returncode != 0
    assert "hpcdl.sites is not allowed to import hpcdl.cli" in proc.stdout
    assert "hpcdl.sites.registry -> hpcdl.cli.output" in proc.stdout


def test_a_circle_between_two_modules_of_a_package_breaks_the_contract(package_copy):
    # cli.jobs already asks cli.predict for its table; the other way round closes a circle
    predict = package_copy / "hpcdl" / "cli" / "predict.py"
    predict.write_text(predict.read_text() + "\nfrom hpcdl.cli.jobs import NodesOpt  # noqa: E402,F401\n")
    proc = lint_imports(package_copy)
    assert proc.returncode != 0
    assert "No cycles are allowed in hpcdl.cli" in proc.stdout


def test_an_import_for_annotations_only_breaks_the_contract_too(package_copy):
    # the launchers once imported the plan's type under TYPE_CHECKING, which closed the circle
    # plan -> images.compat -> launchers -> plan while the contract looked away
    mpi = package_copy / "hpcdl" / "launchers" / "mpi.py"
    mpi.write_text(mpi.read_text() + "\nfrom typing import TYPE_CHECKING  # noqa: E402\n\n"
                   "if TYPE_CHECKING:\n    from hpcdl.plan.model import Plan  # noqa: F401\n")
    proc = lint_imports(package_copy)
    assert proc.returncode != 0
    assert "hpcdl.launchers is not allowed to import hpcdl.plan" in proc.stdout
    assert "hpcdl.launchers.mpi -> hpcdl.plan.model" in proc.stdout
    assert "No cycles are allowed in hpcdl.\n" in proc.stdout


def test_one_backend_importing_another_breaks_the_contract(package_copy):
    trainer = package_copy / "hpcdl" / "train" / "backends" / "mxnet" / "trainer.py"
    trainer.write_text(trainer.read_text() + "\nfrom hpcdl.train.backends.pytorch.optim import CaffeSGD  # noqa\n")
    proc = lint_imports(package_copy)
    assert proc.returncode != 0
    assert "hpcdl.train.backends.mxnet is not allowed to import hpcdl.train.backends.pytorch" in proc.stdout


def test_every_module_of_the_package_has_its_layer():
    """A new top-level module or folder joins a layer of the contract: one outside every layer could
    import anything, and nothing would say so."""
    layered = {name.strip() for line in contract_layers() for name in line.split("|")}
    package = ROOT / "platform" / "hpcdl"
    found = {f"hpcdl.{p.stem if p.is_file() else p.name}" for p in package.iterdir()
             if (p.suffix == ".py" and p.stem not in ("__init__", "__main__")) or (p / "__init__.py").is_file()}
    assert found - layered == set(), "not in any layer of pyproject.toml's contract"


def test_the_architecture_page_draws_the_contract_layers():
    page = (ROOT / "docs" / "architecture.md").read_text()
    drawing = re.search(r"<!-- layers: the contract in pyproject.toml -->\n```\n(.*?)```", page, re.S)
    assert drawing, "docs/architecture.md has no layer drawing"
    drawn = [re.sub(r"\s{2,}.*$", "", line).strip() for line in drawing.group(1).splitlines() if line.strip()]
    drawn = [line for line in drawn if not set(line) <= set("|v^ ")]
    assert drawn == contract_layers()

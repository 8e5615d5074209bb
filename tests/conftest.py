"""Shared test helpers. Real tools, never mocks: a missing tool fails in CI, never skips quietly."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RECIPES = ROOT / "recipes"


def require_tool(name: str) -> str:
    """Path of a tool the test needs. Missing: a failure in CI (CI=true), a skip elsewhere."""
    path = shutil.which(name)
    if path:
        return path
    message = f"{name} is not installed (make test installs it: tools/ensure-apt.sh)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def require_slurm_daemons() -> None:
    """Slurm's and munge's daemons, and root to start them: missing, a failure in CI, a skip elsewhere."""
    for tool in ("slurmctld", "slurmd", "sbatch", "munged"):
        if not (shutil.which(tool) or Path("/usr/sbin", tool).exists()):
            require_tool(tool)
    if os.geteuid() != 0:
        message = "starting slurmctld/slurmd/munged needs root"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def hpcdl(*args: str, check: bool = False, env: dict | None = None, cwd=None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run the real command line in a fresh process, its output a pipe's.

    The terminal's size is not passed on: pytest-xdist's workers set $COLUMNS to their own
    terminal's, which would narrow the tables a pipe gets (hpcdl.cli.output)."""
    inherited = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.run(
        [sys.executable, "-m", "hpcdl", *map(str, args)], capture_output=True, text=True,
        env={**inherited, **(env or {})}, cwd=cwd, timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"hpcdl {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def shellcheck(path: Path) -> None:
    exe = require_tool("shellcheck")
    proc = subprocess.run([exe, "-s", "bash", "-S", "style", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, f"shellcheck {path}:\n{proc.stdout}{proc.stderr}"
    proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, f"bash -n {path}:\n{proc.stderr}"


def pytest_configure(config):
    """Validation runs in tests keep their history in a folder of their own, not in ~/.local/share."""
    import tempfile

    os.environ.setdefault("HPCDL_HISTORY", tempfile.mkdtemp(prefix="hpcdl-test-history-"))


@pytest.fixture
def isolated_jobs(tmp_path, monkeypatch):
    """Local executor state and user site folder inside the test's own tmp folder."""
    monkeypatch.setenv("HPCDL_LOCAL_JOBS", str(tmp_path / "local-jobs"))
    return tmp_path


FIXTURE_SITES = ROOT / "tests" / "fixtures" / "sites"


@pytest.fixture
def fixture_sites(monkeypatch):
    """The test site profiles (tests/fixtures/sites) on HPCDL_SITE_PATH, shipped ones still found."""
    monkeypatch.setenv("HPCDL_SITE_PATH", str(FIXTURE_SITES))
    return FIXTURE_SITES


@pytest.fixture(scope="session")
def local_quick_validation(tmp_path_factory):
    """One run of `hpcdl validate --site local --suite quick` (what `make run` does), shared by the tests
    of the suite (test_validate_run) and of its predictions beside the measured scaling (test_predict_validation).

    A history of its own: the first run on a fresh machine, whatever other tests validated before.
    Returns (process, out folder, results records, the profile the thread sweep was written into)."""
    import json

    tmp = tmp_path_factory.mktemp("quick")
    out = tmp / "out"
    profile = tmp / "local.yaml"
    proc = hpcdl("validate", "--site", "local", "--suite", "quick", "-o", out, "--write-profile", profile,
                 env={"HPCDL_LOCAL_JOBS": str(tmp / "local-jobs"), "HPCDL_HISTORY": str(tmp / "history")},
                 cwd=tmp, timeout=1500)
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()] if out.exists() else []
    return proc, out, records, profile


@pytest.fixture(scope="session")
def local_image():
    """The local CPU image (local-cpu), built with Charliecloud or found in the image cache
    ($HPCDL_IMAGE_CACHE): shared by the tests that run inside it (test_images_build,
    test_validate_slurm's quick suite). Returns (hpcdl.images.build.Built, the build's log lines)."""
    for tool in ("ch-image", "ch-run", "mksquashfs", "squashfuse", "mmdebstrap"):
        require_tool(tool)
    from hpcdl.images.build import build
    from hpcdl.images.spec import load_image

    lines: list[str] = []
    built = build(load_image("local-cpu"), "charliecloud", log=lines.append)
    return built, "\n".join(lines)


@pytest.fixture(scope="session")
def slurm_clusters(tmp_path_factory):
    """The real Slurm the tests start here (tests/slurm_cluster.py); torn down at the end, whatever happened.

    Ask it for a shape: `slurm_clusters.ensure(1)` (one node) or `.ensure(2)` (pretend nodes n1, n2),
    or `.ensure(2, NodeShape.from_site(site))`: two pretend nodes posing as the site's node kind.
    """
    require_slurm_daemons()
    from slurm_cluster import SlurmClusters

    clusters = SlurmClusters(tmp_path_factory.mktemp("slurm"))
    try:
        yield clusters
    finally:
        clusters.down()


def pytest_runtest_setup(item):
    """Tests marked `gpu` run where CUDA sees a GPU; elsewhere they are skipped and say so.

    A GPU node's CI sets HPCDL_REQUIRE_GPU=1, so a GPU that went missing fails there instead.
    """
    if item.get_closest_marker("gpu") is None:
        return
    import torch

    if torch.cuda.is_available():
        return
    if os.environ.get("HPCDL_REQUIRE_GPU"):
        pytest.fail("HPCDL_REQUIRE_GPU is set but PyTorch sees no CUDA GPU")
    pytest.skip("no CUDA GPU on this machine (test marked gpu; run it on a GPU node)")

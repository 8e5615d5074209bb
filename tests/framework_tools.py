"""Helpers for tests that run the other framework environments (MXNet's venv, Horovod)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MXNET_PYTHON = ROOT / ".venv-mxnet" / "bin" / "python"


def missing(message: str) -> None:
    """A missing set-up step: a failure in CI (CI=true), a skip elsewhere (as conftest.require_tool)."""
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def mxnet_python() -> str:
    if not MXNET_PYTHON.exists():
        missing("the MXNet venv is missing (make mxnet creates .venv-mxnet)")
    return str(MXNET_PYTHON)


def require_horovod():
    try:
        import horovod.torch as hvd
    except ImportError:
        missing("Horovod is not installed (make horovod builds and installs it)")
    return hvd


def in_mxnet(code: str, payload: dict, timeout: float = 300) -> dict:
    """Run `code` in MXNet's venv with `payload` as the dict PAYLOAD; it prints one JSON line last."""
    proc = subprocess.run(
        [mxnet_python(), "-c", code], input=json.dumps(payload), capture_output=True, text=True, timeout=timeout,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def final_record(path: Path) -> dict:
    recs = records(path)
    assert recs and recs[-1]["event"] == "final", recs[-1:]
    return recs[-1]


# One thread per rank: the ranks of a test share this machine's cores.
ONE_THREAD = {"OMP_NUM_THREADS": "1", "HPCDL_INTRA_OP_THREADS": "1", "HPCDL_INTER_OP_THREADS": "1",
              "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONWARNINGS": "ignore"}


def run(argv: list[str], timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, **ONE_THREAD, **(env or {})})
    assert proc.returncode == 0, f"{argv} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc

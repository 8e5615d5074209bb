"""The start-up line of an image, as NGC images print one: hpcdl, framework, MPI and CUDA versions.

The build writes it once to /opt/hpcdl/banner from what is really installed (package metadata,
`mpirun --version`, torch's CUDA build), so printing it at start-up costs nothing:

    python -m hpcdl.images.banner [--image NAME]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
from importlib import metadata

from hpcdl import __version__

FRAMEWORKS = (("torch", "PyTorch"), ("tensorflow", "TensorFlow"), ("tensorflow-cpu", "TensorFlow"),
              ("mxnet", "MXNet"), ("horovod", "Horovod"))


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def mpi_version() -> str:
    mpirun = shutil.which("mpirun") or shutil.which("mpiexec")
    if not mpirun:
        return "no MPI"
    try:
        out = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "MPI (version unknown)"
    found = re.search(r"\(Open MPI\)\s*([0-9][0-9.]*)", out)
    if found:
        return f"Open MPI {found.group(1)}"
    found = re.search(r"Version:\s*([0-9][0-9.a-z]*)", out)
    return f"MPICH {found.group(1)}" if found and "HYDRA" in out else "MPI (version unknown)"


def cuda_version() -> str:
    """torch's CUDA build without importing torch (its version file is plain Python)."""
    if _version("torch") is None:
        return "CUDA none"
    try:
        from torch import version as tv  # torch/version.py imports nothing heavy

        if getattr(tv, "hip", None):
            return f"ROCm (HIP {tv.hip})"
        return f"CUDA {tv.cuda}" if tv.cuda else "CUDA none (CPU build)"
    except Exception:
        return "CUDA unknown"


def banner(image: str | None = None) -> str:
    parts = [f"hpcdl {__version__}"]
    if image:
        parts.append(f"image {image}")
    for dist, name in FRAMEWORKS:
        found = _version(dist)
        if found:
            parts.append(f"{name} {found}")
    parts += [mpi_version(), cuda_version()]
    return " | ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hpcdl.images.banner", description=__doc__.split("\n\n")[0])
    parser.add_argument("--image", default=None)
    args = parser.parse_args(argv)
    print(banner(args.image))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

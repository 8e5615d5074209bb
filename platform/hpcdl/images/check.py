"""The image check: what %test runs inside an image, and CI runs in the test environment.

It reports, one line each: the pinned frameworks import at their versions; oneDNN is built in
(CPU) or CUDA, cuDNN and NCCL are (GPU); 2 MPI ranks allreduce through mpi4py and mpirun.
Every result is passed, failed, not-installed or not-applicable; a CUDA check on a CPU node
or a CPU build is "not applicable", never "passed".

Modes: `image` (inside an image: a framework the spec pins for this environment that is
missing or at another version fails) and `host` (any other machine: frameworks are reported
as found, "not installed" when absent; torch must import because hpcdl's trainer needs it).

    python -m hpcdl.images.check [--image NAME --environment ENV] [--mode image|host]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

PASSED, FAILED, NOT_INSTALLED, NOT_APPLICABLE = "passed", "failed", "not installed", "not applicable"

#: import name of each framework the check knows; the pip names map onto these
FRAMEWORKS = {
    "torch": "torch",
    "tensorflow": "tensorflow",
    "tensorflow-cpu": "tensorflow",
    "mxnet": "mxnet",
    "intel-extension-for-pytorch": "intel_extension_for_pytorch",
    "horovod": "horovod",
    "mpi4py": "mpi4py",
}


@dataclass(frozen=True)
class Result:
    check: str
    status: str
    detail: str = ""


def _version_matches(found: str, pinned: str) -> bool:
    """'2.8.0+cpu' satisfies a pin of 2.8.0: local build tags do not change the release."""
    return found.split("+")[0] == pinned.split("+")[0]


def _import(module: str):
    try:
        return importlib.import_module(module), None
    except ImportError as exc:
        return None, str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    except Exception as exc:  # a framework that is installed but broken is a failure, reported as such
        return None, f"{type(exc).__name__}: {exc}".splitlines()[0]


def framework_results(pins: dict[str, str], mode: str) -> list[Result]:
    """Import each framework; in image mode a pinned one must be there at its pinned version."""
    wanted = dict.fromkeys(("torch", "tensorflow", "mxnet"))
    for name, version in pins.items():
        if name in FRAMEWORKS:
            wanted[FRAMEWORKS[name]] = version
    results = []
    for module, pinned in wanted.items():
        mod, error = _import(module)
        if mod is None:
            missing = error and ("No module named" in error)
            if pinned and mode == "image":
                results.append(Result(module, FAILED, f"pinned {pinned} but cannot import: {error}"))
            elif module == "torch" and mode == "host":
                results.append(Result(module, FAILED, f"hpcdl's trainer needs torch: {error}"))
            elif missing:
                results.append(Result(module, NOT_INSTALLED, ""))
            else:
                results.append(Result(module, FAILED, f"installed but import fails: {error}"))
            continue
        found = str(getattr(mod, "__version__", "?"))
        if pinned and not _version_matches(found, pinned):
            status = FAILED if mode == "image" else PASSED
            results.append(Result(module, status, f"{found} (spec pins {pinned})"))
        else:
            results.append(Result(module, PASSED, found))
    return results


def onednn_results(gpu: bool) -> list[Result]:
    """oneDNN (MKL-DNN) is the CPU path the KNL/Xeon images exist for."""
    results = []
    torch, _ = _import("torch") if _installed("torch") else (None, None)
    if torch is not None:
        on = bool(torch.backends.mkldnn.is_available())
        results.append(Result("torch oneDNN", PASSED if on else FAILED,
                              "torch.backends.mkldnn is available" if on else "torch built without oneDNN"))
    tf, _ = _import("tensorflow") if _installed("tensorflow") else (None, None)
    if tf is not None:
        # TF >= 2.9 enables oneDNN on x86 Linux by default; TF_ENABLE_ONEDNN_OPTS=0 turns it off
        flag = os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1")
        if gpu:
            results.append(Result("tensorflow oneDNN", NOT_APPLICABLE, "GPU image: TF runs on CUDA"))
        else:
            results.append(Result("tensorflow oneDNN", PASSED if flag != "0" else FAILED,
                                  f"TF_ENABLE_ONEDNN_OPTS={flag}{_tf_mkl_note()}"))
    mx, _ = _import("mxnet") if _installed("mxnet") else (None, None)
    if mx is not None:
        on = mx.runtime.Features().is_enabled("MKLDNN")
        results.append(Result("mxnet oneDNN", PASSED if on else FAILED, "MKLDNN feature" + ("" if on else " off")))
    return results


def _tf_mkl_note() -> str:
    """What TF's own build flag says, as information: its meaning has shifted across releases."""
    try:
        from tensorflow.python.util import _pywrap_util_port

        return f", IsMklEnabled()={_pywrap_util_port.IsMklEnabled()}"
    except Exception:
        return ""


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _gpu_present() -> bool:
    return Path("/dev/nvidia0").exists() or Path("/dev/nvidiactl").exists()


def cuda_results(spec) -> list[Result]:
    """CUDA, cuDNN and NCCL built into torch for the spec's GPUs; runtime use only on a GPU node."""
    cuda = spec.cuda if spec is not None else None
    if not _installed("torch"):
        return [Result("cuda", NOT_APPLICABLE, "torch is not in this environment")]
    import torch

    built = torch.version.cuda
    if cuda is None or built is None:
        why = "CPU build of torch" if built is None else "the image spec asks for no CUDA"
        return [Result(name, NOT_APPLICABLE, why) for name in ("cuda", "cudnn", "nccl", "gpu")]
    results = []
    want = cuda.version
    same = built.split(".")[:2] == want.split(".")[:2]
    results.append(Result("cuda", PASSED if same else FAILED, f"torch built for CUDA {built} (spec {want})"))
    flags = torch._C._cuda_getArchFlags() if hasattr(torch._C, "_cuda_getArchFlags") else ""
    missing = [a for a in cuda.gpu_archs if a not in str(flags).split()]
    results.append(Result("cuda archs", FAILED if missing else PASSED,
                          f"built for {flags}" + (f"; missing {', '.join(missing)}" if missing else "")))
    try:
        cudnn, why = torch.backends.cudnn.version(), "torch finds no cuDNN"
    except Exception as exc:
        cudnn, why = None, str(exc).splitlines()[0]
    if cudnn is None:
        results.append(Result("cudnn", FAILED, why))
    else:
        ok = True
        if cuda.cudnn:
            major, minor = (int(x) for x in cuda.cudnn.split(".")[:2])
            ok = cudnn // 10000 == major and (cudnn // 100) % 100 == minor
        results.append(Result("cudnn", PASSED if ok else FAILED, f"{cudnn} (spec {cuda.cudnn or 'any'})"))
    try:
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
        results.append(Result("nccl", PASSED, f"torch's NCCL {nccl}"))
    except Exception as exc:
        results.append(Result("nccl", FAILED, str(exc).splitlines()[0]))
    results.append(_gpu_row(torch, _gpu_present(), "no NVIDIA GPU on this node (run the image with --nv on one)",
                            "a GPU is present but torch cannot use it (driver too old? --nv?)"))
    return results


def rocm_results(spec) -> list[Result]:
    """torch built for the spec's ROCm; a GCD works if the node has one."""
    if not _installed("torch"):
        return [Result("rocm", NOT_APPLICABLE, "torch is not in this environment")]
    import torch

    hip = getattr(torch.version, "hip", None)
    if not hip:
        return [Result("rocm", FAILED, f"torch is not a ROCm build (CUDA {torch.version.cuda or 'none'})")]
    same = hip.split(".")[:2] == spec.rocm.version.split(".")[:2]
    results = [Result("rocm", PASSED if same else FAILED, f"torch built for HIP {hip} (spec ROCm {spec.rocm.version})")]
    results.append(_gpu_row(torch, Path("/dev/kfd").exists(), "no AMD GPU on this node (run the image with --rocm on one)",
                            "/dev/kfd is present but torch cannot use a GPU"))
    return results


def _gpu_row(torch, present: bool, absent: str, unusable: str) -> Result:
    """The node's first GPU as torch sees it (torch.cuda serves CUDA and ROCm builds alike)."""
    if not present:
        return Result("gpu", NOT_APPLICABLE, absent)
    if torch.cuda.is_available():
        return Result("gpu", PASSED, torch.cuda.get_device_name(0))
    return Result("gpu", FAILED, unusable)


def net_plugin_result(spec) -> Result | None:
    """The libfabric NCCL/RCCL plugin the plan's NCCL_NET_PLUGIN names: present, or absent (failed)
    where the spec builds it. Not applicable in an image without one: the site's own (a host module,
    podman-hpc --nccl) or TCP sockets serve there."""
    if spec is None or not spec.gpu:
        return None
    library = spec.net_plugin_library
    if library is None:
        return Result("nccl net plugin", NOT_APPLICABLE, "the image carries none (the site's own, or TCP sockets)")
    if Path(library).is_file():
        return Result("nccl net plugin", PASSED, f"present: {library} (aws-ofi-nccl {spec.net_plugin.version})")
    return Result("nccl net plugin", FAILED, f"absent: {library} (the spec builds aws-ofi-nccl {spec.net_plugin.version})")


# every rank's result is gathered to rank 0, which prints one line: ranks printing on their
# own share one pipe and their lines can run together under load
ALLREDUCE = (
    "from mpi4py import MPI; c = MPI.COMM_WORLD; "
    "s = c.allreduce(c.Get_rank() + 1, op=MPI.SUM); "
    "sums = c.gather(s, root=0); "
    "c.Get_rank() == 0 and print(f'allreduce on {c.Get_size()} ranks:', *sums, flush=True)"
)


def mpi_result(ranks: int = 2, timeout: float = 120) -> Result:
    """2 ranks sum rank+1 with MPI_Allreduce: each must print 3 (1 + 2)."""
    if not _installed("mpi4py"):
        return Result("mpi allreduce", FAILED, "mpi4py is not installed")
    mpirun = shutil.which("mpirun") or shutil.which("mpiexec")
    if not mpirun:
        return Result("mpi allreduce", FAILED, "no mpirun or mpiexec on PATH")
    argv = [mpirun, "-n", str(ranks)]
    env = dict(os.environ)
    if _is_open_mpi(mpirun):
        # a build host or CI runner may have fewer cores than ranks, and builds run as root
        argv += ["--oversubscribe"]
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   OMPI_MCA_rmaps_base_oversubscribe="1")
    argv += [sys.executable, "-c", ALLREDUCE]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return Result("mpi allreduce", FAILED, f"{ranks} ranks did not finish in {timeout:.0f} s")
    lines = [line for line in proc.stdout.splitlines() if line.startswith(f"allreduce on {ranks} ranks:")]
    expect = ranks * (ranks + 1) // 2
    good = proc.returncode == 0 and len(lines) == 1 and lines[0].split(":")[1].split() == [str(expect)] * ranks
    if good:
        return Result("mpi allreduce", PASSED, f"{ranks} ranks via {Path(mpirun).name}, sum {expect}")
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
    return Result("mpi allreduce", FAILED, f"exit {proc.returncode}: {tail[0]}")


def _is_open_mpi(mpirun: str) -> bool:
    try:
        out = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "Open MPI" in out or "OpenRTE" in out


LABELS_JSON = Path("/.singularity.d/labels.json")
#: the OCI keys every hpcdl image carries (generate.labels, generate.build_arg_labels)
OCI_KEYS = ("version", "created", "revision", "source")


def labels_result(spec, path: Path = LABELS_JSON) -> Result:
    """The image's labels (Apptainer's %labels, or the Dockerfile's labels step) name this image
    and carry the OCI version, created, revision and source."""
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return Result("labels", FAILED, f"cannot read {path}: {exc}")
    missing = [k for k in OCI_KEYS if not found.get(f"org.opencontainers.image.{k}")]
    if found.get("org.hpcdl.image") != spec.name or missing:
        return Result("labels", FAILED, f"{path}: org.hpcdl.image={found.get('org.hpcdl.image')!r}"
                      + (f", no org.opencontainers.image.{'/'.join(missing)}" if missing else ""))
    oci = {k: found[f"org.opencontainers.image.{k}"] for k in OCI_KEYS}
    return Result("labels", PASSED, f"{len(found)} labels; hpcdl {oci['version']}, revision {oci['revision']}, "
                                    f"created {oci['created']}, source {oci['source']}")


def run_checks(spec=None, environment: str = "main", mode: str = "host") -> list[Result]:
    pins = dict(spec.environments[environment].packages) if spec is not None else {}
    if spec is not None and spec.horovod and spec.horovod.environment == environment:
        pins["horovod"] = spec.horovod.version
    results = framework_results(pins, mode)
    if "horovod" in pins:
        hvd, error = _import("horovod.torch")
        if hvd is None:
            results.append(Result("horovod", FAILED, f"cannot import horovod.torch: {error}"))
        else:
            built = "MPI" if hvd.mpi_built() else "no MPI"
            ok = hvd.mpi_built() and (not spec.horovod.nccl or hvd.nccl_built())
            results.append(Result("horovod build", PASSED if ok else FAILED,
                                  built + (", NCCL" if hvd.nccl_built() else "")))
    gpu = spec is not None and spec.gpu
    if not gpu:
        results += onednn_results(gpu=False)
    if spec is not None and spec.rocm is not None:
        results += rocm_results(spec)
    else:
        results += cuda_results(spec)
    plugin = net_plugin_result(spec)
    if plugin is not None:
        results.append(plugin)
    results.append(mpi_result())
    if spec is not None and mode == "image":
        results.append(labels_result(spec))
    return results


def main(argv: list[str] | None = None, prog: str = "python -m hpcdl.images.check") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--image", default=os.environ.get("HPCDL_IMAGE"), help="image spec name")
    parser.add_argument("--images-yaml", default=os.environ.get("HPCDL_IMAGES_YAML"))
    parser.add_argument("--environment", default=os.environ.get("HPCDL_IMAGE_ENV", "main"))
    parser.add_argument("--mode", choices=("image", "host"), default=None,
                        help="image: pinned frameworks must be present (default when --image is given)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from hpcdl.errors import HpcdlError

    try:
        spec = None
        if args.image:
            from hpcdl.images.spec import IMAGES_YAML, load_image

            spec = load_image(args.image, args.images_yaml or IMAGES_YAML)
            if args.environment not in spec.environments:
                raise HpcdlError(f"--environment {args.environment!r} is not in image {spec.name}: "
                                 f"{', '.join(spec.environments)}")
        mode = args.mode or ("image" if spec else "host")
        results = run_checks(spec, args.environment, mode)
    except HpcdlError as exc:
        print(f"hpcdl: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=2))
    else:
        title = f"image check: {spec.name if spec else 'this environment'} [{args.environment}, {mode} mode]"
        print(title)
        for r in results:
            print(f"  {r.check:<20} {r.status:<15} {r.detail}")
    return 1 if any(r.status == FAILED for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())

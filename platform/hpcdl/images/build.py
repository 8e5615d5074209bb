"""Build an image with the best tool on this machine, cached by a hash of its recipe and inputs.

Builders, best first:
  apptainer, singularity  build the generated definition (NAME.def) into NAME.sif; the build
                          runs %test (hpcdl's image check) last.
  charliecloud            `ch-image build` from the generated Dockerfile (the same generator,
                          the same building blocks), then mksquashfs (zstd) to a SquashFS image
                          that `ch-run` runs through squashfuse; the image check then runs
                          inside it. On request (--sif) siftool wraps that in a SIF file.
A base that needs no registry (the spec's `bootstrap`, e.g. mmdebstrap's Debian 12) is made
first and imported under the spec's base_image name.

Cache: one file per image and key in $HPCDL_IMAGE_CACHE (default /var/cache/hpcdl/images),
outside any checkout, so CI on one machine rebuilds only when the key changes. The key hashes
the rendered recipe, every file the build copies in (hpcdl's source), the local wheels the
build may install, the bootstrap settings and the builder. Charliecloud's own per-instruction
cache lives there too, so a change to hpcdl's source rebuilds only the steps after its copy:
the heavy steps (base, Python, torch, MPI, hpcdl's requirements) are cached by their own
instructions and inputs, and hpcdl's own step resolves and downloads nothing.
"""

from __future__ import annotations

import configparser
import contextlib
import fcntl
import getpass
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from hpcdl.errors import HpcdlError
from hpcdl.images.spec import ImageSpec

ROOT = Path(__file__).resolve().parents[3]
DEFAULT_CACHE = Path("/var/cache/hpcdl/images")
DEFAULT_KEEP = 3  # builds of one image kept in the cache (HPCDL_IMAGE_KEEP)
BUILDERS = ("apptainer", "singularity", "charliecloud")
#: the tools each builder needs, and the Debian package that has each
TOOLS = {
    "apptainer": {"apptainer": "apptainer (https://apptainer.org/docs/admin/latest/installation.html)"},
    "singularity": {"singularity": "singularity-ce"},
    "charliecloud": {"ch-image": "charliecloud-builders",
                     "ch-run": "charliecloud-runtime", "mksquashfs": "squashfs-tools", "squashfuse": "squashfuse"},
}
BOOTSTRAP_TOOLS = {"mmdebstrap": "mmdebstrap"}
# ch-image is a Python program that needs Debian's python3 and its modules (lark): a venv's or
# pyenv's python3 first on PATH breaks it
SYSTEM_PATH = "/usr/local/sbin:/usr/sbin:/sbin:/usr/bin:/bin"
# The build machine's own CAs (Debian's place for local ones): bound at the same path during the
# build, so the image's ca-certificates trusts them too and pip reaches PyPI through a TLS proxy
LOCAL_CAS = Path("/usr/local/share/ca-certificates")
# ch-convert packs SquashFS with mksquashfs's default, gzip at level 9: 76 s for torch's 754 MB
# on this 2-core machine, where zstd at level 3 takes 5.5 s for the same size (measured). The
# image runs through squashfuse (Debian 12's links libzstd), Apptainer and the kernel (zstd since 4.14).
SQUASH_COMPRESSION = ("-comp", "zstd", "-Xcompression-level", "3")
BUILD_STEPS = "ch-image build, mksquashfs"  # part of the key: how the file is made


class BuilderMissing(HpcdlError):
    """No builder, or one of its tools, is installed: exit 2 with one line naming what to install."""

    exit_code = 2


def cache_dir() -> Path:
    return Path(os.environ.get("HPCDL_IMAGE_CACHE") or DEFAULT_CACHE)


def _which(tool: str) -> str | None:
    return shutil.which(tool) or shutil.which(tool, path=SYSTEM_PATH)


def pick_builder(wanted: str | None = None) -> str:
    """The named builder, or the best one installed; BuilderMissing naming the packages if none."""
    for name in ([wanted] if wanted and wanted != "auto" else list(BUILDERS)):
        if name not in TOOLS:
            raise HpcdlError(f"--builder {name!r}: one of auto, {', '.join(BUILDERS)}")
        missing = [pkg for tool, pkg in TOOLS[name].items() if not _which(tool)]
        if not missing:
            return name
        if wanted and wanted != "auto":
            raise BuilderMissing(f"builder {name}: install {', '.join(dict.fromkeys(missing))}")
    raise BuilderMissing("no image builder: install apptainer (or singularity-ce), or Charliecloud "
                         "(Debian: charliecloud-builders charliecloud-runtime squashfs-tools squashfuse mmdebstrap)")


# ---- inputs


def pip_find_links() -> list[Path]:
    """The machine's local wheel folders, as pip finds them: $PIP_FIND_LINKS, then pip's config
    files ($PIP_CONFIG_FILE, /etc/pip.conf, /etc/xdg/pip/pip.conf, $XDG_CONFIG_HOME/pip/pip.conf,
    ~/.pip/pip.conf; [global] or [install] find-links). URLs are skipped, folders kept."""
    values = [os.environ.get("PIP_FIND_LINKS", "")]
    home = Path.home()
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    files = [os.environ.get("PIP_CONFIG_FILE"), "/etc/pip.conf", "/etc/xdg/pip/pip.conf",
             config_home / "pip/pip.conf", home / ".pip/pip.conf"]
    for file in files:
        if not file or not Path(file).is_file():
            continue
        parser = configparser.ConfigParser(interpolation=None, strict=False)
        try:
            parser.read(file)
        except configparser.Error:
            continue
        for section in ("global", "install"):
            if parser.has_option(section, "find-links"):
                values.append(parser.get(section, "find-links"))
    found: list[Path] = []
    for value in values:
        for item in value.split():
            path = Path(item[len("file://"):] if item.startswith("file://") else item)
            if "://" not in item[:12] or item.startswith("file://"):
                if path.is_dir() and path not in found:
                    found.append(path)
    return found


def local_wheels(spec: ImageSpec) -> Path | None:
    """The wheel folder bound into the build, where an environment asks for local wheels and one
    holds a wheel of a pinned package (torch 2.13.0+cpu lies in /opt/wheels here)."""
    if not any(env.local_wheels for env in spec.environments.values()):
        return None
    pinned = {name.replace("-", "_").lower() for env in spec.environments.values() for name in env.packages}
    for folder in pip_find_links():
        if any(w.name.split("-")[0].lower() in pinned for w in folder.glob("*.whl")):
            return folder
    raise HpcdlError(f"image {spec.name}: local_wheels is set but no folder in pip's find-links "
                     "($PIP_FIND_LINKS, /etc/pip.conf) holds a wheel of a pinned package")


def horovod_wheels(spec: ImageSpec) -> Path | None:
    """The folder of hpcdl's own Horovod wheel for this image, bound into the build at
    HOROVOD_WHEELS: what `make horovod` (tools/build-horovod.sh) caches in
    $HPCDL_WHEEL_CACHE (default ~/.cache/hpcdl/wheels) as horovod-VERSION-torch-TORCH/. It fits a
    CPU image whose Horovod is for PyTorch alone, built against the same torch release (the
    image's pin) and CPython and the same Open MPI; the recipe installs it only where pip takes
    it, else builds Horovod from source."""
    hvd = spec.horovod
    if hvd is None or spec.gpu or hvd.nccl or tuple(hvd.frameworks) != ("pytorch",):
        return None
    torch = spec.environments[hvd.environment].packages.get("torch")
    if not torch:
        return None
    root = Path(os.environ.get("HPCDL_WHEEL_CACHE")
                or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hpcdl" / "wheels")
    folder = root / f"horovod-{hvd.version}-torch-{torch.split('+')[0]}"
    return folder if any(folder.glob(f"horovod-{hvd.version}-*.whl")) else None


def stage_context(dest: Path) -> None:
    """What the recipe copies in (hpcdl's source and package data), without caches or builds."""
    if not (ROOT / "pyproject.toml").is_file():
        raise HpcdlError(f"hpcdl images build copies hpcdl's source into the image: run it from a checkout "
                         f"(no pyproject.toml beside {ROOT / 'platform'})")
    dest.mkdir(parents=True, exist_ok=True)
    for item in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / item, dest / item)
    shutil.copytree(ROOT / "platform", dest / "platform", symlinks=False,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".pytest_cache"))


def _hash_tree(digest, folder: Path) -> None:
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())


def local_cas() -> Path | None:
    return LOCAL_CAS if LOCAL_CAS.is_dir() and any(LOCAL_CAS.rglob("*.crt")) else None


def _tool_version(argv: list[str]) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=_env())
        return (proc.stdout + proc.stderr).strip().splitlines()[0] if (proc.stdout + proc.stderr).strip() else "?"
    except (OSError, subprocess.TimeoutExpired):
        return "?"


def bootstrap_key(spec: ImageSpec) -> str | None:
    if spec.bootstrap is None:
        return None
    return hashlib.sha256(json.dumps(spec.bootstrap.model_dump(), sort_keys=True).encode()).hexdigest()[:16]


def inputs_key(spec: ImageSpec, builder: str, recipe: str, context: Path, wheels: Path | None) -> str:
    digest = hashlib.sha256()
    digest.update(f"builder={builder}\0{_builder_version(builder)}\0".encode())
    digest.update(f"bootstrap={bootstrap_key(spec)}\0".encode())
    digest.update(("steps=" + BUILD_STEPS + "; squash=" + " ".join(SQUASH_COMPRESSION) + "\0").encode())
    digest.update(recipe.encode() + b"\0")
    _hash_tree(digest, context / "platform")
    for item in ("pyproject.toml", "README.md"):
        digest.update(hashlib.sha256((context / item).read_bytes()).digest())
    for folder in (wheels, horovod_wheels(spec)):
        for wheel in sorted(folder.glob("*.whl")) if folder is not None else ():
            # a wheel's name and size say which build it is
            digest.update(f"{wheel.name}\0{wheel.stat().st_size}\0".encode())
    if local_cas() is not None:
        _hash_tree(digest, LOCAL_CAS)
    return digest.hexdigest()[:16]


def _builder_version(builder: str) -> str:
    if builder == "charliecloud":
        return _tool_version([_which("ch-image") or "ch-image", "--version"])
    return _tool_version([_which(builder) or builder, "--version"])


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The builders' environment: Debian's tools first on PATH, and $USER (ch-run insists)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PIP_", "CONDA"))}
    env["PATH"] = SYSTEM_PATH
    env.setdefault("USER", getpass.getuser())
    env.update(extra or {})
    return env


def _build_args(spec: ImageSpec) -> dict[str, str]:
    created = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    revision, source = "unknown", "unknown"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        proc = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30)
        if proc.returncode == 0:
            revision = proc.stdout.strip()
            dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=60).stdout.strip()
            revision += "-dirty" if dirty else ""
        proc = subprocess.run(["git", "-C", str(ROOT), "remote", "get-url", "origin"], capture_output=True,
                              text=True, timeout=30)
        source = proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else f"file://{ROOT}"
    return {"HPCDL_CREATED": created, "HPCDL_REVISION": revision, "HPCDL_SOURCE": source}


# ---- building


@dataclass
class Built:
    image: str
    builder: str
    key: str
    path: str
    cached: bool
    seconds: float
    record: str


@contextlib.contextmanager
def _lock(folder: Path):
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _kept_tree_update_failed(message: str) -> bool:
    """ch-image stopped on the kept tree itself, not on an instruction: it could not bring the tree to
    the cached state ("updating existing image ..." then an error) or create a path the tree already
    has ("error: can't mkdir: opt: File exists", with the typographic apostrophe ch-image writes)."""
    lines = [line.strip() for line in message.splitlines() if line.strip() and not line.startswith("full log:")]
    if not lines:
        return False
    last = lines[-1].replace("\u2019", "'")
    return (len(lines) >= 2 and lines[-2].startswith("updating existing image") and last.startswith("error:")) \
        or (last.startswith("error: can't ") and last.endswith("File exists"))


def _run(argv: list[str], log: Callable[[str], None], cwd: Path | None = None, env=None, logfile: Path | None = None):
    log("$ " + " ".join(argv))
    with open(logfile, "a") if logfile else contextlib.nullcontext() as out:
        proc = subprocess.run(argv, cwd=cwd, env=env or _env(), stdout=out or subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        tail = ""
        if logfile:
            tail = "\n".join(logfile.read_text(errors="replace").splitlines()[-30:])
        elif proc.stdout:
            tail = "\n".join(proc.stdout.splitlines()[-30:])
        raise HpcdlError(f"{Path(argv[0]).name} failed (exit {proc.returncode}); last lines:\n{tail}"
                         + (f"\nfull log: {logfile}" if logfile else ""))
    return proc


def build(spec: ImageSpec, builder: str | None = None, cache: Path | None = None,
          log: Callable[[str], None] = print, check: bool = True) -> Built:
    """Build `spec` (or find it in the cache); the path of the SquashFS/SIF image and its record."""
    from hpcdl.images.generate import render

    builder = pick_builder(builder)
    if spec.bootstrap is not None and builder == "charliecloud":
        missing = [pkg for tool, pkg in BOOTSTRAP_TOOLS.items() if not _which(tool)]
        if missing:
            raise BuilderMissing(f"image {spec.name}: its base is made by {spec.bootstrap.tool}: install {', '.join(missing)}")
    cache = Path(cache or cache_dir())
    fmt = "docker" if builder == "charliecloud" else "singularity"
    recipe = render(spec, fmt)
    wheels = local_wheels(spec)
    suffix = ".sqfs" if builder == "charliecloud" else ".sif"
    with _lock(cache):
        work = cache / "work" / spec.name
        shutil.rmtree(work, ignore_errors=True)
        context = work / "context"
        stage_context(context)
        key = inputs_key(spec, builder, recipe, context, wheels)
        out = cache / f"{spec.name}-{key}{suffix}"
        record = cache / f"{spec.name}-{key}.json"
        if out.exists() and record.exists():
            shutil.rmtree(work, ignore_errors=True)
            log(f"{spec.name}: cached {out} (key {key})")
            return Built(spec.name, builder, key, str(out), True, 0.0, str(record))
        start = time.monotonic()
        recipe_file = context / ("Dockerfile" if fmt == "docker" else f"{spec.name}.def")
        recipe_file.write_text(recipe)
        args = _build_args(spec)
        logfile = work / "build.log"
        log(f"{spec.name}: building with {builder} (key {key}); log {logfile}")
        partial = out.with_suffix(suffix + ".partial")
        partial.unlink(missing_ok=True)
        steps: dict[str, float] = {}
        if builder == "charliecloud":
            _build_charliecloud(spec, cache, context, recipe_file, wheels, args, key, partial, log, logfile, steps)
            if check:
                t = time.monotonic()
                proc = run_check(partial, spec, log)
                steps["image check"] = round(time.monotonic() - t, 1)
                (work / "check.log").write_text(proc.stdout)
        else:
            argv = [_which(builder), "build", "--force"]
            if os.geteuid() != 0:
                argv.append("--fakeroot")
            for bind in _build_binds(spec, wheels):
                argv += ["--bind", bind]
            for name, value in args.items():
                argv += ["--build-arg", f"{name}={value}"]
            if not check:
                argv.append("--notest")
            t = time.monotonic()
            _run([*argv, str(partial), recipe_file.name], log, cwd=context, logfile=logfile)
            steps["build"] = round(time.monotonic() - t, 1)
        partial.rename(out)
        seconds = round(time.monotonic() - start, 1)
        record.write_text(json.dumps({"image": spec.name, "builder": builder, "key": key, "path": str(out),
                                      "seconds": seconds, "steps": steps, **args}, indent=2) + "\n")
        shutil.copy2(logfile, cache / f"{spec.name}-{key}.log")
        shutil.rmtree(work, ignore_errors=True)
        log(f"{spec.name}: built {out} in {seconds:.0f} s")
        for gone in prune(cache, spec.name):
            log(f"{spec.name}: removed the older build {gone}")
        return Built(spec.name, builder, key, str(out), False, seconds, str(record))


def keep_count() -> int:
    """How many builds of one image the cache keeps: $HPCDL_IMAGE_KEEP, at least 1 (default 3)."""
    value = os.environ.get("HPCDL_IMAGE_KEEP") or str(DEFAULT_KEEP)
    if not value.isdigit() or int(value) < 1:
        raise HpcdlError(f"HPCDL_IMAGE_KEEP: {value!r} is not a whole number of at least 1")
    return int(value)


def prune(cache: Path, name: str, keep: int | None = None) -> list[str]:
    """Remove all but the newest `keep` builds of image `name` (its .sqfs/.sif, record and log),
    so that a cache that CI fills with one build per hpcdl change does not fill the disk."""
    keep = keep_count() if keep is None else keep
    pattern = re.compile(rf"{re.escape(name)}-([0-9a-f]{{16}})\.json")
    records = sorted((p for p in Path(cache).iterdir() if pattern.fullmatch(p.name)),
                     key=lambda p: p.stat().st_mtime, reverse=True)
    gone = []
    for record in records[keep:]:
        stem = record.name[:-len(".json")]
        for suffix in (".sqfs", ".sif", ".log", ".json"):
            (Path(cache) / f"{stem}{suffix}").unlink(missing_ok=True)
        gone.append(stem)
    return gone


def _build_binds(spec: ImageSpec, wheels: Path | None) -> list[str]:
    """SOURCE:TARGET folders of this host a build reads (either builder): the local wheel folder,
    the Horovod wheel `make horovod` cached, the local CAs."""
    from hpcdl.images.generate import HOROVOD_WHEELS, WHEELS

    binds = []
    if wheels is not None:
        binds.append(f"{wheels}:{WHEELS}")
    horovod = horovod_wheels(spec)
    if horovod is not None:
        binds.append(f"{horovod}:{HOROVOD_WHEELS}")
    if local_cas() is not None:
        binds.append(f"{LOCAL_CAS}:{LOCAL_CAS}")
    return binds


def _build_charliecloud(spec, cache, context, dockerfile, wheels, args, key, out, log, logfile, steps) -> None:
    env = _env({"CH_IMAGE_STORAGE": str(cache / "ch-image")})
    ch_image = _which("ch-image")
    if spec.bootstrap is not None:
        bkey = bootstrap_key(spec)
        tarball = cache / f"base-{spec.bootstrap.suite}-{bkey}.tar"
        if not tarball.exists():
            t = time.monotonic()
            partial = tarball.with_suffix(".partial.tar")
            partial.unlink(missing_ok=True)
            b = spec.bootstrap
            _run([_which("mmdebstrap"), f"--variant={b.variant}", b.suite, str(partial), b.mirror],
                 log, env=env, logfile=logfile)
            partial.rename(tarball)
            steps["bootstrap"] = round(time.monotonic() - t, 1)
        # imported under base_image, so the Dockerfile's FROM finds it with no registry;
        # re-imported when the bootstrap changed (the marker, beside the storage, which refuses
        # foreign files, names the tarball it came from)
        marker = cache / f"ch-image-base-{spec.base_image.replace('/', '_').replace(':', '_')}"
        # `ch-image list NAME` also asks the registry about NAME and exits 1 where none answers,
        # so its "in local storage: yes" line is what says the base is there
        listed = subprocess.run([ch_image, "list", spec.base_image], capture_output=True, text=True, env=env)
        stored = any(line.split(":", 1)[0].strip() == "in local storage" and line.split(":", 1)[1].strip().startswith("yes")
                     for line in listed.stdout.splitlines() if ":" in line)
        if not stored or not marker.exists() or marker.read_text() != tarball.name:
            t = time.monotonic()
            _run([ch_image, "import", str(tarball), spec.base_image], log, env=env, logfile=logfile)
            marker.write_text(tarball.name)
            steps["import base"] = round(time.monotonic() - t, 1)
    # One tag per image, kept in the storage between builds: ch-image then brings the existing
    # tree to the cached state with a git checkout of what differs, where a new tag copies the
    # whole tree out of the cache (80,000 files) and deleting it afterwards took 157 s here
    tag = f"hpcdl-{spec.name}:build"
    argv = [ch_image, "build", "--force", "-t", tag, "-f", str(dockerfile)]
    for bind in _build_binds(spec, wheels):
        argv += ["-b", bind]
    for name, value in args.items():
        argv += ["--build-arg", f"{name}={value}"]
    t = time.monotonic()
    try:
        _run([*argv, str(context)], log, env=env, logfile=logfile)
    except HpcdlError as err:
        # The kept tree can disagree with the cache's record of it (seen here after builds of another
        # revision: "error: can't mkdir: opt: File exists" as ch-image checked out a cached state to
        # run the first changed instruction in). Without the tag it copies the tree out of the cache
        # afresh, and the cached steps stay cached.
        if not _kept_tree_update_failed(str(err)):
            raise
        log(f"{tag}: ch-image could not update the kept tree; deleting the tag and building again")
        _run([ch_image, "delete", tag], log, env=env, logfile=logfile)
        _run([*argv, str(context)], log, env=env, logfile=logfile)
    steps["ch-image build"] = round(time.monotonic() - t, 1)
    t = time.monotonic()
    _squash(Path(env["CH_IMAGE_STORAGE"]) / "img" / tag.replace(":", "+").replace("/", "%"), out, log, logfile)
    steps["mksquashfs"] = round(time.monotonic() - t, 1)


def _squash(tree: Path, out: Path, log, logfile: Path) -> None:
    """`ch-convert -o squash` with the compression named: ch-convert 0.31 runs mksquashfs with
    its default gzip and no way to pass options (it puts its own folder first on PATH). The same
    call otherwise: 64 KiB blocks, every file root's, the build cache's metadata left out. The
    mount points ch-run needs exist already (ch-image makes them when it unpacks an image)."""
    if not tree.is_dir():
        raise HpcdlError(f"ch-image built no image folder {tree}")
    for needed in ("bin", "dev", "etc", "mnt", "proc", "usr", "etc/hosts", "etc/resolv.conf"):
        if not os.path.lexists(tree / needed):
            raise HpcdlError(f"{tree} has no /{needed}, which ch-run binds over")
    _run([_which("mksquashfs"), str(tree), str(out), "-b", "65536", "-noappend", "-all-root", *SQUASH_COMPRESSION,
          "-e", str(tree / ".git"), "-e", str(tree / ".gitignore"), "-e", str(tree / "ch" / "git.pickle")],
         log, logfile=logfile)


#: siftool's --partarch numbers (sif.HdrArch*): the CPU family of the image's root file system
SIF_ARCH = {"x86_64": 2, "ppc64le": 6, "aarch64": 4}


def write_sif(squashfs: Path | str, spec: ImageSpec, out: Path | str, log: Callable[[str], None] = print) -> Path:
    """A SIF file around the SquashFS image, as `apptainer build` lays one out: the definition it
    was made from (descriptor type Deffile) and the root file system as the primary system
    partition (SquashFS, the image's CPU family), both in object group 1. The tree holds what
    Apptainer reads at run time: /.singularity.d/labels.json, env/90-environment.sh (PATH to
    the main environment, so `apptainer exec IMAGE hpcdl` finds hpcdl) and runscript (the
    Dockerfile's steps). Apptainer's action scripts (/.singularity.d/actions) are not written,
    and no Apptainer here has run such a file. The result is checked against the SIF layout
    (hpcdl.images.sif) before it is kept."""
    from hpcdl.images.generate import render

    siftool = _which("siftool")
    if siftool is None:
        raise BuilderMissing("a SIF needs siftool (Debian: siftool)")
    out = Path(out)
    partial = out.with_name(out.name + ".partial")
    partial.unlink(missing_ok=True)
    deffile = out.with_name(out.name + ".def")
    deffile.write_text(render(spec, "singularity"))
    arch = SIF_ARCH[spec.arch]
    try:
        _run([siftool, "new", str(partial)], log)
        # `siftool new` leaves the launch script empty; apptainer build writes this one (sif's
        # OptCreateWithLaunchScript in Apptainer's SIF assembler), which makes the file runnable
        # by its #! line. The field is the header's first 32 bytes.
        from hpcdl.images.sif import LAUNCH

        with open(partial, "r+b") as f:
            f.write(LAUNCH.ljust(32, b"\0"))
        partial.chmod(0o755)
        # both objects in group 1, as apptainer build writes them (sif's default group): apptainer
        # sign and verify work per object group and find nothing in a SIF without one
        _run([siftool, "add", str(partial), str(deffile), "--datatype", "1", "--groupid", "1",
              "--filename", f"{spec.name}.def"], log)
        _run([siftool, "add", str(partial), str(squashfs), "--datatype", "4", "--parttype", "2", "--partfs", "1",
              "--partarch", str(arch), "--groupid", "1"], log)
        from hpcdl.images.sif import read_sif, sif_problems

        problems = sif_problems(read_sif(partial), spec.arch)
        if problems:
            raise HpcdlError(f"{out}: not laid out as apptainer build writes a SIF: {'; '.join(problems)}")
    finally:
        deffile.unlink(missing_ok=True)
    partial.rename(out)
    return out


def ch_run_argv(image: Path | str, *, binds: tuple[str, ...] = (), cd: str | None = None) -> list[str]:
    """ch-run with the image's own environment (its ENV lines, /ch/environment) on top of the host's.

    Charliecloud keeps the host's environment by default; --set-env adds the image's (PATH to
    its main environment, HPCDL_IMAGE, tuned defaults), and the host's Python settings are dropped.
    """
    argv = [_which("ch-run") or "ch-run", "--set-env", "--unset-env=PYTHONPATH", "--unset-env=VIRTUAL_ENV",
            "--unset-env=PYTHONHOME"]
    for bind in binds:
        argv += ["-b", bind]
    if cd:
        argv += ["--cd", cd]
    return [*argv, str(image), "--"]


def run_check(image: Path | str, spec: ImageSpec, log: Callable[[str], None] = print) -> subprocess.CompletedProcess:
    """The image's %test (hpcdl's image check in every environment), run inside it with ch-run."""
    from hpcdl.images.generate import ENVS

    script = "; ".join(
        f'"{ENVS}/{env}/bin/python" -m hpcdl.images.check --image {spec.name} --environment {env} --mode image'
        " || status=1" for env in spec.environments)
    argv = [*ch_run_argv(image), "/bin/sh", "-c", f"status=0; {script}; exit $status"]
    log("$ " + " ".join(argv))
    env = _env()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)
    log(proc.stdout.rstrip())
    if proc.returncode != 0:
        raise HpcdlError(f"image check failed inside {image} (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return proc


def built_as_dict(built: Built) -> dict:
    return asdict(built)

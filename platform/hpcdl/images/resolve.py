"""Resolve what each image's definition installs, for the image's architecture and Python, without
building it.

For each environment of an image, every requirement its definition's `pip install` lines name
(read back from the rendered definition, so what is resolved is what a build would run) goes to
pip's own resolver with the image's target named instead of this machine's:

    pip install --dry-run --report FILE --ignore-installed --only-binary=:all:
        --platform manylinux_2_X_ARCH ... --python-version PY --implementation cp REQS

pip 26 does not widen one `--platform manylinux_2_35_x86_64` to the older manylinux levels, so
every level the base image's glibc runs is named. Only PyPI is asked: indexes other than PyPI
(PyTorch's cpu/cu126/cu130/rocm wheels) cannot be reached from where this runs, so a package an
image takes from such an index is resolved as PyPI's build of the same version, and the
result says so per package. The machine's own pip configuration (find-links folders,
constraints files) is kept out (PIP_CONFIG_FILE=/dev/null), so the pins resolved are the
spec's own. Successful resolutions are cached by a hash of the command, outside any checkout.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hpcdl.errors import HpcdlError
from hpcdl.images.spec import ImageSpec, version_tuple

PYPI = "https://pypi.org/simple"
#: the projects PyTorch's own indexes serve that an image pins (the rest come from PyPI there too)
PYTORCH_INDEX_PROJECTS = {"torch", "torchvision", "torchaudio", "triton", "pytorch-triton-rocm"}


def manylinux_platforms(arch: str, glibc: str) -> list[str]:
    """Every manylinux tag a system with this glibc runs, newest first (PEP 600 and the legacy aliases)."""
    major, minor = version_tuple(glibc)[:2]
    tags = [f"manylinux_{major}_{m}_{arch}" for m in range(minor, 4, -1)]
    legacy = {"x86_64": ["manylinux2014", "manylinux2010", "manylinux1"], "aarch64": ["manylinux2014"],
              "ppc64le": ["manylinux2014"]}[arch]
    return tags + [f"{name}_{arch}" for name in legacy]


@dataclass
class Resolution:
    image: str
    environment: str
    requirements: list[str]
    argv: list[str]
    notes: list[str] = field(default_factory=list)
    packages: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    cached: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None


def environment_requirements(spec: ImageSpec) -> dict[str, tuple[list[str], list[str]]]:
    """environment -> (requirements, notes): every requirement the rendered definition's
    `pip install` lines give that environment, adjusted to what PyPI can answer, with a note for
    each adjustment."""
    from packaging.requirements import Requirement

    from hpcdl.images.generate import render
    from hpcdl.images.pipline import pip_installs

    out: dict[str, tuple[list[str], list[str]]] = {}
    for cmd in pip_installs(render(spec, "singularity")):
        env = cmd.environment
        if env is None or env not in spec.environments:
            continue
        reqs, notes = out.setdefault(env, ([], []))
        indexes = [u for u in cmd.option("--extra-index-url") + cmd.option("--index-url") if not u.startswith(PYPI)]
        for text in cmd.requirements:
            req = Requirement(text)
            pins = [s for s in req.specifier if s.operator == "=="]
            if pins and "+" in pins[0].version:
                # a local version (2.13.0+cpu) is one no public index's metadata has under that name on PyPI
                public = pins[0].version.split("+", 1)[0]
                where = " or ".join(indexes) or "the build machine's wheel folder (find-links)"
                notes.append(f"{req.name}=={pins[0].version}: comes from {where}, which is not asked here; "
                             f"PyPI's {req.name} {public} resolved instead")
                req = Requirement(f"{req.name}{'[' + ','.join(sorted(req.extras)) + ']' if req.extras else ''}=={public}")
            elif indexes and req.name.lower() in PYTORCH_INDEX_PROJECTS:
                notes.append(f"{text}: from {', '.join(indexes)}, which cannot be reached here; "
                             f"PyPI's build of that version resolved instead (the index's own build is not checked)")
            if str(req) not in reqs:
                reqs.append(str(req))
        notes[:] = list(dict.fromkeys(notes))
        if "--no-binary" in cmd.options:
            for name in cmd.option("--no-binary"):
                note = f"{name}: built from source in the image (--no-binary); its version resolved from PyPI's wheels"
                if note not in notes and any(r.startswith(name) for r in reqs):
                    notes.append(note)
    return out


def pip_argv(spec: ImageSpec, requirements: list[str], report: str) -> list[str]:
    if spec.python is None:
        raise HpcdlError(f"image {spec.name}: cannot tell the Python of base image {spec.base_image} "
                         "(a known distribution: ubuntu22.04, ubuntu24.04, debian12, rockylinux9)")
    python, glibc = spec.python
    argv = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--report", report,
            "--ignore-installed", "--only-binary=:all:", "--index-url", PYPI + "/"]
    for tag in manylinux_platforms(spec.arch, glibc):
        argv += ["--platform", tag]
    argv += ["--python-version", python, "--implementation", "cp", *requirements]
    return argv


def cache_folder() -> Path:
    base = os.environ.get("HPCDL_RESOLVE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "hpcdl", "resolve")
    return Path(base)


def _pip_env() -> dict[str, str]:
    # this machine's pip settings (a find-links folder, a constraints file capping torch) are not the image's
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k in ("PIP_CERT", "PIP_DEFAULT_TIMEOUT")}
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _name(requirement: str) -> str:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    return canonicalize_name(Requirement(requirement).name)


def _no_distribution(error: str | None) -> str | None:
    """The project pip found no file at all for ("from versions: none"), canonicalised."""
    import re

    from packaging.utils import canonicalize_name

    m = re.search(r"requirement ([A-Za-z0-9._-]+)[^ ]* \(from versions: none\)", error or "")
    return canonicalize_name(m.group(1)) if m else None


def _dry_run(argv: list[str]) -> tuple[str | None, dict[str, str]]:
    """(pip's error lines or None, {package: version} it would install)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        proc = subprocess.run([a.replace("{report}", report) for a in argv], capture_output=True, text=True,
                              env=_pip_env(), timeout=900)
        if proc.returncode != 0:
            errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR")]
            return " ".join(errors or proc.stderr.splitlines()[-3:]), {}
        doc = json.loads(Path(report).read_text())
        return None, {i["metadata"]["name"]: i["metadata"]["version"] for i in doc["install"]}


def resolve(spec: ImageSpec, use_cache: bool = True) -> list[Resolution]:
    """One Resolution per environment of the image; `error` holds pip's own words where it fails."""
    results = []
    for env, (reqs, notes) in environment_requirements(spec).items():
        argv_key = pip_argv(spec, reqs, "{report}")[3:]  # the interpreter's path is not part of the key
        key = hashlib.sha256(json.dumps(argv_key).encode()).hexdigest()[:20]
        # keyed by the command alone: images whose environments install the same requirements for
        # the same Python and architecture share one resolution
        cached = cache_folder() / f"{key}.json"
        res = Resolution(image=spec.name, environment=env, requirements=reqs, argv=argv_key, notes=notes)
        if use_cache and cached.is_file():
            doc = json.loads(cached.read_text())
            res.packages, res.notes = doc["packages"], doc.get("notes", notes)
            res.cached = True
            results.append(res)
            continue
        wanted = list(reqs)
        for _ in range(5):  # each round may set aside one requirement PyPI has only as a source archive
            res.error, res.packages = _dry_run(pip_argv(spec, wanted, "{report}"))
            missing = _no_distribution(res.error)
            if not missing or not any(_name(r) == missing for r in wanted):
                break
            # pip's --platform takes wheels only; a project PyPI holds only as a source archive
            # (python-hostlist) is built in the image. Its version is checked on its own.
            sdist_error, _ = _dry_run([sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--no-deps",
                                       "--ignore-installed", "--report", "{report}", "--index-url", PYPI + "/",
                                       *[r for r in wanted if _name(r) == missing]])
            if sdist_error:
                res.error = sdist_error
                break
            wanted = [r for r in wanted if _name(r) != missing]
            res.notes.append(f"{missing}: PyPI has it only as a source archive, built in the image; "
                             "its version checked, its own requirements not resolved for the target")
        if res.ok:
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp_file = cached.with_suffix(".tmp")
            tmp_file.write_text(json.dumps({"argv": argv_key, "packages": res.packages, "notes": res.notes},
                                           indent=1, sort_keys=True))
            tmp_file.replace(cached)
        results.append(res)
    return results

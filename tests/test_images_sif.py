"""The SIF hpcdl writes, read back against the SIF layout Apptainer publishes (apptainer/sif:
pkg/sif/sif.go's header, pkg/sif/descriptor.go's rawDescriptor) and against siftool; the files
Apptainer reads at run time in the image; `hpcdl images install` putting a build where the
modules look."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess

import pytest

from conftest import hpcdl, require_tool
from hpcdl.images.build import write_sif
from hpcdl.images.generate import APPTAINER_ENV, APPTAINER_RUNSCRIPT, apptainer_files_step, output_paths
from hpcdl.images.sif import read_sif, sif_problems
from hpcdl.images.spec import load_images

SPECS = load_images()


def _tree(tmp_path, spec):
    """An image tree holding what the Dockerfile's step writes, by running that very step."""
    root = tmp_path / "root"
    (root / "opt/envs/main/bin").mkdir(parents=True)
    (root / "opt/envs/main/bin/hpcdl").write_text("#!/bin/sh\necho hpcdl \"$@\"\n")
    words = shlex.split(apptainer_files_step(spec)[len("RUN "):])
    assert words[:2] == ["python3", "-c"]
    subprocess.run([*words, str(root)], check=True)
    return root


def _sif(tmp_path, spec):
    root = _tree(tmp_path, spec)
    sqfs = tmp_path / "img.sqfs"
    subprocess.run([require_tool("mksquashfs"), str(root), str(sqfs), "-noappend", "-all-root", "-quiet"],
                   check=True, capture_output=True)
    return write_sif(sqfs, spec, tmp_path / f"{spec.name}-0123456789abcdef.sif", log=lambda line: None)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_dockerfile_writes_apptainers_environment_and_runscript(name):
    text = output_paths(name)["docker"].read_text()
    assert apptainer_files_step(SPECS[name]) in text.splitlines()


def test_the_environment_puts_hpcdl_on_path_and_the_runscript_trains(tmp_path):
    spec = SPECS["local-cpu"]
    root = _tree(tmp_path, spec)
    env, runscript = root / APPTAINER_ENV.lstrip("/"), root / APPTAINER_RUNSCRIPT.lstrip("/")
    assert env.stat().st_mode & 0o777 == 0o755 and runscript.stat().st_mode & 0o777 == 0o755
    out = subprocess.run(["sh", "-c", f'. "{env}"; echo "$PATH"; echo "$HPCDL_IMAGE"'], capture_output=True,
                         text=True, env={"PATH": "/usr/bin:/bin"}, check=True).stdout.split()
    assert out == ["/opt/envs/main/bin:/usr/bin:/bin", "local-cpu"]
    assert subprocess.run(["sh", "-n", str(runscript)]).returncode == 0
    assert '/bin/hpcdl" train "$@"' in runscript.read_text()


def test_the_sif_is_laid_out_as_apptainer_writes_one(tmp_path):
    spec = SPECS["local-cpu"]
    sif = _sif(tmp_path, spec)
    got = read_sif(sif)
    assert sif_problems(got, "x86_64") == []
    assert got.launch == b"#!/usr/bin/env run-singularity\n" and got.version == "01" and got.arch == "02"
    assert [(d.datatype, d.group) for d in got.descriptors] == [("Def.FILE", 1), ("FS", 1)]
    assert got.primary.fstype == "Squashfs" and got.primary.parttype == "PrimSys"
    # siftool, Apptainer's own tool, reads the same
    listing = subprocess.run([require_tool("siftool"), "list", str(sif)], capture_output=True, text=True,
                             check=True).stdout
    rows = [line.split("|") for line in listing.splitlines() if line[:1].isdigit()]
    assert [(r[1].strip(), r[4].strip()) for r in rows] == [("1", "Def.FILE"), ("1", "FS (Squashfs/*System/amd64)")]
    # the partition is the tree, Apptainer's files in it
    part = tmp_path / "part.sqfs"
    with open(sif, "rb") as f, open(part, "wb") as out:
        f.seek(got.primary.offset)
        out.write(f.read(got.primary.size))
    listing = subprocess.run([require_tool("unsquashfs"), "-l", str(part)], capture_output=True, text=True,
                             check=True).stdout
    assert "squashfs-root/.singularity.d/env/90-environment.sh" in listing
    assert "squashfs-root/.singularity.d/runscript" in listing


def test_a_sif_without_object_groups_or_launch_script_is_found_out(tmp_path):
    """What `images build --sif` wrote before: siftool's defaults (group NONE, no launch line)."""
    siftool = require_tool("siftool")
    root = _tree(tmp_path, SPECS["local-cpu"])
    sqfs = tmp_path / "img.sqfs"
    subprocess.run([require_tool("mksquashfs"), str(root), str(sqfs), "-noappend", "-quiet"], check=True,
                   capture_output=True)
    old = tmp_path / "old.sif"
    (tmp_path / "x.def").write_text("Bootstrap: docker\nFrom: debian:12\n")
    subprocess.run([siftool, "new", str(old)], check=True)
    subprocess.run([siftool, "add", str(old), str(tmp_path / "x.def"), "--datatype", "1"], check=True)
    subprocess.run([siftool, "add", str(old), str(sqfs), "--datatype", "4", "--parttype", "2", "--partfs", "1",
                    "--partarch", "2"], check=True)
    problems = sif_problems(read_sif(old), "x86_64")
    assert any("no object group" in p for p in problems) and any("launch script" in p for p in problems)
    assert any("architecture" in p for p in sif_problems(read_sif(old), "aarch64"))


def test_install_puts_the_build_where_the_modules_look_versioned_by_digest(tmp_path):
    spec = SPECS["local-cpu"]
    cache = tmp_path / "cache"
    cache.mkdir()
    sif = _sif(cache, spec)
    (cache / f"{spec.name}-0123456789abcdef.json").write_text(json.dumps(
        {"image": spec.name, "key": "0123456789abcdef", "path": str(sif)}))
    prefix = tmp_path / "prefix"
    proc = hpcdl("images", "install", prefix, spec.name, "--cache", cache, check=True)
    digest = hashlib.sha256(sif.read_bytes()).hexdigest()
    link = prefix / "images" / "local-cpu.sif"
    assert link.is_symlink() and os.readlink(link) == f"local-cpu-0.1.0-{digest[:12]}.sif"
    assert link.resolve().read_bytes() == sif.read_bytes()
    record = json.loads((prefix / "images" / f"local-cpu-0.1.0-{digest[:12]}.sif.json").read_text())
    assert record["digest"] == f"sha256:{digest}" and record["key"] == "0123456789abcdef"
    assert f"installed {link.resolve()}" in proc.stdout
    again = hpcdl("images", "install", prefix, spec.name, "--cache", cache, check=True)
    assert again.stdout.startswith("unchanged ")
    # a file a person put there is never replaced
    link.unlink()
    link.write_text("someone's image")
    proc = hpcdl("images", "install", prefix, spec.name, "--cache", cache)
    assert proc.returncode == 2 and "is a file, not a link" in proc.stderr and link.read_text() == "someone's image"


def test_install_refuses_a_sif_not_laid_out_as_apptainer_writes_it(tmp_path):
    spec = SPECS["local-cpu"]
    cache = tmp_path / "cache"
    cache.mkdir()
    bad = cache / f"{spec.name}-0123456789abcdef.sif"
    bad.write_bytes(b"#!/usr/bin/env run-singularity\n".ljust(32, b"\0") + b"NOT_MAGIC".ljust(4096, b"\0"))
    (cache / f"{spec.name}-0123456789abcdef.json").write_text(json.dumps({"image": spec.name, "path": str(bad)}))
    proc = hpcdl("images", "install", tmp_path / "prefix", spec.name, "--cache", cache)
    assert proc.returncode == 2 and "not a SIF" in proc.stderr
    assert not (tmp_path / "prefix" / "images" / "local-cpu.sif").exists()


def test_the_environment_file_keeps_spec_values_inert(tmp_path):
    from hpcdl.images.generate import apptainer_files

    marker = tmp_path / "ran"
    value = f'x"; touch {marker}; echo "$(touch {marker})`touch {marker}`'
    # a value ending in :$PATH keeps that expansion and nothing else
    path_like = f'/opt/x$(touch {marker})`touch {marker}`:$PATH'
    spec = SPECS["local-cpu"].model_copy(update={"env": {"HPCDL_TEST_VALUE": value, "HPCDL_TEST_PATH": path_like}})
    env = tmp_path / "env.sh"
    env.write_text(apptainer_files(spec)[APPTAINER_ENV])
    out = subprocess.run(["sh", "-c", f'. "{env}"; printf "%s\\n" "$HPCDL_TEST_VALUE" "$HPCDL_TEST_PATH"'],
                         capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}, check=True).stdout
    assert out.splitlines() == [value, path_like.replace("$PATH", "/opt/envs/main/bin:/usr/bin:/bin")] and not marker.exists()

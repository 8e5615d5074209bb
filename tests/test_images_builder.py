"""How `hpcdl images build` picks its builder, finds the local wheels and keys its cache (fast;
the real build and runs are in test_images_build.py)."""

from __future__ import annotations

import os

import pytest

from hpcdl.images import build
from hpcdl.images.spec import load_image


def _fake_tools(folder, *names):
    folder.mkdir(exist_ok=True)
    for name in names:
        tool = folder / name
        tool.write_text("#!/bin/sh\necho fake 1.0\n")
        tool.chmod(0o755)
    return folder


@pytest.fixture
def no_system_tools(monkeypatch):
    monkeypatch.setattr(build, "SYSTEM_PATH", "/nonexistent")


def test_apptainer_wins_over_charliecloud_and_charliecloud_needs_all_its_tools(tmp_path, monkeypatch, no_system_tools):
    bin_dir = _fake_tools(tmp_path / "bin", "ch-image", "ch-convert", "ch-run", "mksquashfs")
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(build.BuilderMissing, match="squashfuse"):
        build.pick_builder("charliecloud")
    _fake_tools(bin_dir, "squashfuse")
    assert build.pick_builder() == "charliecloud"
    _fake_tools(bin_dir, "apptainer")
    assert build.pick_builder() == "apptainer"
    assert build.pick_builder("charliecloud") == "charliecloud"
    with pytest.raises(build.BuilderMissing, match="install singularity-ce"):
        build.pick_builder("singularity")


def test_an_unknown_builder_is_named():
    with pytest.raises(build.HpcdlError, match="--builder 'docker'"):
        build.pick_builder("docker")


def test_the_wheel_folder_comes_from_pips_environment_or_its_config(tmp_path, monkeypatch):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"x")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", str(tmp_path / "none.conf"))
    monkeypatch.setenv("PIP_FIND_LINKS", f"https://example.org/wheels {wheels}")
    assert wheels in build.pip_find_links()
    monkeypatch.delenv("PIP_FIND_LINKS")
    conf = tmp_path / "home" / ".config" / "pip" / "pip.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text(f"[global]\nfind-links = file://{wheels}\n")
    assert wheels in build.pip_find_links()
    assert build.local_wheels(load_image("local-cpu")) == wheels
    assert build.local_wheels(load_image("knl-mkldnn")) is None


def test_local_wheels_without_a_folder_holding_a_pinned_wheel_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PIP_CONFIG_FILE", str(tmp_path / "none.conf"))
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    monkeypatch.setattr(build, "pip_find_links", lambda: [tmp_path])
    with pytest.raises(build.HpcdlError, match="local_wheels"):
        build.local_wheels(load_image("local-cpu"))


def test_the_cache_key_follows_the_recipe_and_the_source_but_not_byte_code(tmp_path, monkeypatch):
    monkeypatch.setattr(build, "_builder_version", lambda builder: "ch-image 0.31")
    monkeypatch.setattr(build, "local_cas", lambda: None)
    spec = load_image("local-cpu")
    context = tmp_path / "context"
    build.stage_context(context)
    assert not list(context.rglob("__pycache__")) and (context / "platform" / "hpcdl" / "images" / "images.yaml").exists()
    key = build.inputs_key(spec, "charliecloud", "FROM debian:12\n", context, None)
    assert key == build.inputs_key(spec, "charliecloud", "FROM debian:12\n", context, None)
    assert key != build.inputs_key(spec, "charliecloud", "FROM debian:13\n", context, None)
    assert key != build.inputs_key(spec, "apptainer", "FROM debian:12\n", context, None)
    (context / "platform" / "hpcdl" / "__init__.py").write_text("changed\n")
    assert key != build.inputs_key(spec, "charliecloud", "FROM debian:12\n", context, None)


def test_the_cache_lives_outside_the_checkout_and_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("HPCDL_IMAGE_CACHE", raising=False)
    assert build.cache_dir() == build.DEFAULT_CACHE
    assert not str(build.DEFAULT_CACHE).startswith(str(build.ROOT))
    monkeypatch.setenv("HPCDL_IMAGE_CACHE", str(tmp_path))
    assert build.cache_dir() == tmp_path


def test_a_cached_image_is_returned_without_building(tmp_path, monkeypatch):
    from hpcdl.images.generate import render

    spec = load_image("local-cpu")
    monkeypatch.setattr(build, "pick_builder", lambda wanted=None: "charliecloud")
    monkeypatch.setattr(build, "_which", lambda tool: f"/usr/bin/{tool}")
    monkeypatch.setattr(build, "local_wheels", lambda spec: None)
    monkeypatch.setattr(build, "local_cas", lambda: None)
    monkeypatch.setattr(build, "_builder_version", lambda builder: "ch-image 0.31")
    context = tmp_path / "ctx"
    build.stage_context(context)
    key = build.inputs_key(spec, "charliecloud", render(spec, "docker"), context, None)
    (tmp_path / f"local-cpu-{key}.sqfs").write_bytes(b"image")
    (tmp_path / f"local-cpu-{key}.json").write_text("{}")
    built = build.build(spec, cache=tmp_path, log=lambda _: None)
    assert built.cached and built.path == str(tmp_path / f"local-cpu-{key}.sqfs")
    assert not (tmp_path / "work" / "local-cpu").exists()


def test_the_cache_keeps_the_newest_builds_of_each_image_only(tmp_path, monkeypatch):
    def entry(name, key, age):
        for suffix in (".sqfs", ".json", ".log"):
            path = tmp_path / f"{name}-{key}{suffix}"
            path.write_text("x")
            os.utime(path, (1_000_000 - age, 1_000_000 - age))

    for age, key in enumerate(["a" * 16, "b" * 16, "c" * 16, "d" * 16]):
        entry("local-cpu", key, age)
    entry("local", "e" * 16, 10)  # another image whose name is a prefix: untouched
    (tmp_path / "base-bookworm-0123456789abcdef.tar").write_text("base")
    monkeypatch.setenv("HPCDL_IMAGE_KEEP", "2")
    assert build.prune(tmp_path, "local-cpu") == ["local-cpu-" + "c" * 16, "local-cpu-" + "d" * 16]
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted([*(f"local-cpu-{k * 16}{s}" for k in "ab" for s in (".sqfs", ".json", ".log")),
                           *(f"local-{'e' * 16}{s}" for s in (".sqfs", ".json", ".log")),
                           "base-bookworm-0123456789abcdef.tar"])
    monkeypatch.setenv("HPCDL_IMAGE_KEEP", "0")
    with pytest.raises(build.HpcdlError, match="HPCDL_IMAGE_KEEP"):
        build.prune(tmp_path, "local-cpu")


def test_hpcdl_images_build_names_the_missing_builder_in_one_line(tmp_path):
    from conftest import hpcdl

    if any(os.path.exists(f"{d}/apptainer") for d in build.SYSTEM_PATH.split(":")):
        pytest.skip("apptainer is installed here: nothing is missing")
    proc = hpcdl("images", "build", "--builder", "apptainer", "local-cpu",
                 env={"PATH": str(tmp_path), "HPCDL_IMAGE_CACHE": str(tmp_path / "cache")})
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hpcdl: error: builder apptainer: install apptainer")
    assert not (tmp_path / "cache").exists()


# ch-image's last lines when the tree it keeps under the image's tag disagreed with its build cache
# (Charliecloud 0.31 here, after builds of another revision), and when an instruction itself failed
KEPT_TREE = [
    " 56* RUN.F apt-get install -y openmpi-bin\n 62. RUN.F python3 -m venv /opt/envs/main\n"
    "error: can\u2019t mkdir: opt: File exists\nfull log: /cache/build.log",
    " 8  LABEL (unsupported)\nupdating existing image ...\nerror: can\u2019t mkdir: opt: File exists",
]
INSTRUCTION = [
    "updating existing image ...\n 62. RUN.F pip install torch==9\nERROR: No matching distribution found for torch==9\n"
    "error: build failed: RUN command exited with 1\nfull log: /cache/build.log",
    " 62. RUN.F mkdir /opt/x\nmkdir: cannot create directory '/opt/x': File exists\nerror: build failed: RUN command exited with 1",
]


@pytest.mark.parametrize("message", KEPT_TREE)
def test_a_kept_tree_that_disagrees_with_the_cache_is_rebuilt_from_the_cache(message):
    assert build._kept_tree_update_failed(f"ch-image failed (exit 1); last lines:\n{message}")


@pytest.mark.parametrize("message", INSTRUCTION)
def test_a_failing_instruction_is_not_retried(message):
    assert not build._kept_tree_update_failed(f"ch-image failed (exit 1); last lines:\n{message}")

"""A plain (non-editable) `pip install .` carries everything hpcdl reads at run time, and
`pip install .` or `pip install -e .` leaves the checkout as it found it.

The image specs (images.yaml), site profiles, templates and recipes must ship inside the
package: the command line of an installed hpcdl lists the images and renders the modulefiles
of a container site (stampede2-knl wraps the knl-mkldnn image) with no checkout in sight.
The wheel holds every file of platform/hpcdl that git does not ignore, the linked recipes/
folder's included. The install goes into a fresh venv in tmp with --no-deps from a copy of
this checkout's files (tracked and new, as git lists them) made into a git repository of its
own, whose `git status --porcelain --ignored` must read the same after the install (setuptools
wrote build/ and platform/hpcdl.egg-info/ there); hpcdl's requirements and its build backend
are taken from the test environment through a .pth line (appended after the venv's own
site-packages, so the installed hpcdl wins and nothing is downloaded).
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow


def _run(argv, cwd, env) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{' '.join(map(str, argv))} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


def _git(args, cwd) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    return _run(["git", *args], cwd=cwd, env=env).stdout


def checkout_copy(dest: Path) -> Path:
    """This checkout's files as git lists them (tracked and new, links kept), in a git repository of its own."""
    names = _git(["ls-files", "-z", "--cached", "--others", "--exclude-standard"], ROOT).split("\0")
    for name in filter(None, names):
        src, out = ROOT / name, dest / name
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the working tree, not yet in the index
        out.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            out.symlink_to(os.readlink(src))
        else:
            shutil.copy2(src, out)
    _git(["init", "-q"], dest)
    _git(["add", "-A"], dest)
    return dest


def git_state(repo: Path) -> str:
    return _git(["status", "--porcelain", "--ignored", "--untracked-files=all"], repo)


def package_files(repo: Path) -> set[str]:
    """What the wheel must hold: every file of platform/hpcdl git knows, a linked folder's files included."""
    out = set()
    for name in filter(None, _git(["ls-files", "-z", "platform/hpcdl"], repo).split("\0")):
        path = repo / name
        rel = Path(name).relative_to("platform")
        if path.is_dir():  # a link to a folder (hpcdl/recipes -> recipes/): the files in it
            target = path.resolve().relative_to(repo.resolve())
            out |= {(rel / Path(f).relative_to(target)).as_posix()
                    for f in filter(None, _git(["ls-files", "-z", str(target)], repo).split("\0"))}
        else:
            out.add(rel.as_posix())
    return out


def make_venv(where: Path) -> tuple[Path, dict]:
    # no pip of its own: the test environment's pip and build backend (hatchling) build it, offline
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=300)
    purelib = Path(subprocess.run([str(where / "bin" / "python"), "-c",
                                   "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    deps = [sysconfig.get_paths()["purelib"], *site.getsitepackages()]
    (purelib / "zz-test-deps.pth").write_text("\n".join(dict.fromkeys(deps)) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "HPCDL_"))}
    env["PIP_NO_INDEX"] = "1"
    return purelib, env


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pip-install")
    src = checkout_copy(tmp / "src")
    before = git_state(src)
    expected = package_files(src)
    venv = tmp / "venv"
    purelib, env = make_venv(venv)
    # --no-compile: the installed files (RECORD) are then the wheel's, without pip's own .pyc files
    _run([venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-compile",
          str(src)], cwd=tmp, env=env)
    after = git_state(src)
    # the copy is gone: only the installed package can answer
    shutil.rmtree(src)
    return venv, tmp, env, purelib, before, after, expected


def test_pip_install_leaves_the_checkout_as_it_found_it(installed):
    *_, before, after, _ = installed
    assert after == before, "pip install . wrote into the checkout:\n" + "\n".join(
        sorted(set(after.splitlines()) - set(before.splitlines())))


def test_the_wheel_holds_every_file_of_the_package_git_knows(installed):
    venv, tmp, env, purelib, *_, expected = installed
    record = next(purelib.glob("hpcdl-*.dist-info")) / "RECORD"
    shipped = {line.split(",")[0] for line in record.read_text().splitlines()}
    shipped = {name for name in shipped if name.startswith("hpcdl/")}
    assert not expected - shipped, f"not in the wheel: {sorted(expected - shipped)}"
    assert not shipped - expected, f"in the wheel but not in git: {sorted(shipped - expected)}"
    # the data a login node's CLI reads, named so a change to the list above cannot drop them quietly
    for name in ("hpcdl/images/images.yaml", "hpcdl/recipes/digits-quick.yaml", "hpcdl/nets/resnet50.yaml",
                 "hpcdl/sites/profiles/summit.yaml", "hpcdl/validate/recipes/convergence.yaml"):
        assert name in shipped, name


def test_an_editable_install_runs_the_checkouts_code_and_leaves_it_clean(tmp_path):
    src = checkout_copy(tmp_path / "src")
    before = git_state(src)
    venv = tmp_path / "venv"
    _, env = make_venv(venv)
    # the Makefile's setup line, offline: pip install -e '.[...]'
    _run([venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", str(src)],
         cwd=tmp_path, env=env)
    assert git_state(src) == before
    where = _run([venv / "bin" / "python", "-c", "import hpcdl; print(hpcdl.__file__)"],
                 cwd=tmp_path, env=env).stdout.strip()
    assert Path(where) == src / "platform" / "hpcdl" / "__init__.py"
    # the shipped recipes, read through the link platform/hpcdl/recipes -> recipes/
    out = _run([venv / "bin" / "hpcdl", "recipes"], cwd=tmp_path, env=env).stdout
    assert "digits-quick" in out


def test_the_installed_package_is_not_the_checkout(installed):
    venv, tmp, env, *_ = installed
    where = _run([venv / "bin" / "python", "-c", "import hpcdl, hpcdl.images.spec as s; print(hpcdl.__file__); "
                  "print(s.IMAGES_YAML)"], cwd=tmp, env=env).stdout.split()
    assert all(str(venv) in line for line in where), where
    assert where[1].endswith("hpcdl/images/images.yaml")


def test_hpcdl_images_list_works_from_a_plain_install(installed):
    venv, tmp, env, *_ = installed
    out = _run([venv / "bin" / "hpcdl", "images", "list"], cwd=tmp, env=env).stdout
    for name in ("knl-mkldnn", "volta-cuda", "hopper-cuda", "local-cpu"):
        assert name in out


def test_modulefiles_render_for_a_container_site_from_a_plain_install(installed):
    venv, tmp, env, *_ = installed
    out = tmp / "modules"
    _run([venv / "bin" / "hpcdl", "modulefiles", "render", "--site", "stampede2-knl", "-o", out], cwd=tmp, env=env)
    lua = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.lua"))
    assert any(p.startswith("stampede2-knl/pytorch/2.8.0") for p in lua), lua
    assert any(p.startswith("stampede2-knl/hpcdl/") for p in lua), lua


def test_an_install_renders_the_checked_in_definitions_byte_for_byte(installed):
    """From an install, hpcdl's requirements come from its metadata as the build backend wrote it
    (hatchling: `extra == 'digits'`, single quotes); the definitions must still be the checkout's."""
    venv, tmp, env, *_ = installed
    out = tmp / "defs"
    out.mkdir()
    _run([venv / "bin" / "hpcdl", "images", "render", "local-cpu", "volta-cuda", "-o", out], cwd=tmp, env=env)
    rendered = sorted(out.iterdir())
    assert len(rendered) == 4
    for path in rendered:
        assert path.read_text() == (ROOT / "containers" / path.name).read_text(), f"{path.name} differs"


def test_the_images_install_hpcdls_source_with_the_build_backend_pyproject_names():
    import tomllib

    from hpcdl.images import generate

    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"] == [generate.BUILD_BACKEND]

"""A plain (non-editable) `pip install .` carries everything hpcdl reads at run time.

The image specs (images.yaml), site profiles, templates and recipes must ship inside the
package: the command line of an installed hpcdl lists the images and renders the modulefiles
of a container site (stampede2-knl wraps the knl-mkldnn image) with no checkout in sight.
The install goes into a fresh venv in tmp with --no-deps; hpcdl's requirements are taken from
the test environment through a .pth line (appended after the venv's own site-packages, so the
installed hpcdl wins and nothing is downloaded).
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


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pip-install")
    src = tmp / "src"  # a copy, so the build's own folders (build/, *.egg-info) stay out of the checkout
    src.mkdir()
    for item in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / item, src / item)
    shutil.copytree(ROOT / "platform", src / "platform", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    venv = tmp / "venv"
    # no pip or setuptools of its own: the test environment's (new enough for pyproject's license) build it
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    purelib = Path(subprocess.run([str(venv / "bin" / "python"), "-c",
                                   "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    deps = [sysconfig.get_paths()["purelib"], *site.getsitepackages()]
    (purelib / "zz-test-deps.pth").write_text("\n".join(dict.fromkeys(deps)) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "HPCDL_"))}
    env["PIP_NO_INDEX"] = "1"
    _run([venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", str(src)],
         cwd=tmp, env=env)
    # the copy is gone: only the installed package can answer
    shutil.rmtree(src)
    return venv, tmp, env


def test_the_installed_package_is_not_the_checkout(installed):
    venv, tmp, env = installed
    where = _run([venv / "bin" / "python", "-c", "import hpcdl, hpcdl.images.spec as s; print(hpcdl.__file__); "
                  "print(s.IMAGES_YAML)"], cwd=tmp, env=env).stdout.split()
    assert all(str(venv) in line for line in where), where
    assert where[1].endswith("hpcdl/images/images.yaml")


def test_hpcdl_images_list_works_from_a_plain_install(installed):
    venv, tmp, env = installed
    out = _run([venv / "bin" / "hpcdl", "images", "list"], cwd=tmp, env=env).stdout
    for name in ("knl-mkldnn", "volta-cuda", "hopper-cuda", "local-cpu"):
        assert name in out


def test_modulefiles_render_for_a_container_site_from_a_plain_install(installed):
    venv, tmp, env = installed
    out = tmp / "modules"
    _run([venv / "bin" / "hpcdl", "modulefiles", "render", "--site", "stampede2-knl", "-o", out], cwd=tmp, env=env)
    lua = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.lua"))
    assert any(p.startswith("stampede2-knl/pytorch/2.8.0") for p in lua), lua
    assert any(p.startswith("stampede2-knl/hpcdl/") for p in lua), lua

"""The generated modules under the real Lmod (Debian's lmod), in a non-interactive bash, as a
user on a login node would use them: module use, load hpcdl, load pytorch, help, show, unload."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from hpcdl.modules import render_site, site_modules, write_tree
from hpcdl.sites import load_site

LMOD_INIT = "/usr/share/lmod/lmod/init/bash"
FIXTURE_SITES = ROOT / "tests" / "fixtures" / "sites"
# Lmod's own bookkeeping, not what a module says
LMOD_KEYS = ("_ModuleTable", "__LMOD_", "LMOD_", "_LMFILES_", "LOADEDMODULES", "MODULEPATH", "MODULESHOME", "BASH_FUNC_")

# Stands in for apptainer/singularity, which Debian does not ship (shared/research/local-stack.md
# section 5): it records the argv a wrapper executes, so the test sees the real command line.
ARGV_RECORDER = """#!/bin/bash
printf '%s\\0' "$(basename "$0")" "$@" > "$HPCDL_TEST_ARGV_LOG"
"""


@pytest.fixture(autouse=True)
def fixture_sites(monkeypatch):
    monkeypatch.setenv("HPCDL_SITE_PATH", str(FIXTURE_SITES))
    if not Path(LMOD_INIT).exists():
        message = "lmod is not installed (make test installs it: tools/ensure-apt.sh)"
        pytest.fail(message) if os.environ.get("CI") else pytest.skip(message)


def read_env(path: Path) -> dict[str, str]:
    items = [item.split("=", 1) for item in path.read_bytes().decode().split("\0") if "=" in item]
    return {k: v for k, v in items}


def without_lmod(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not k.startswith(LMOD_KEYS)}


def run_bash(script: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run(["bash", "-c", f"set -euo pipefail\nsource {LMOD_INIT}\n{script}"],
                          env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"bash failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


class LoginNode:
    """A rendered site tree, an install prefix, the site's runtime module and a clean environment."""

    def __init__(self, site_name: str, tmp: Path, site=None):
        self.site = site or load_site(site_name)
        # Stampede2 KNL's modules for the knl-mkldnn image, given to the generator as its input: the
        # runtime decision runs no hpcdl image there (the check refuses it under Intel MPI's ibrun)
        from hpcdl.images.frameworks import images_table

        images = images_table()["knl-mkldnn"] if site_name == "stampede2-knl" else None
        self.tmp = tmp
        native = self.site.runtime == "none"
        # native: the frameworks really are in this venv; containers: a prefix path is enough
        self.prefix = sys.prefix if native else str(tmp / "prefix")
        self.tree = tmp / "modulefiles" / site_name
        write_tree(render_site(self.site, self.prefix, images), self.tree)
        self.modules = site_modules(self.site, self.prefix, images)
        self.runtime_bin = tmp / "runtime-bin"
        self.runtime_bin.mkdir()
        if not native:
            for program in ("apptainer", "singularity"):
                (self.runtime_bin / program).write_text(ARGV_RECORDER)
                (self.runtime_bin / program).chmod(0o755)
        self.site_modules_dir = tmp / "site-modules"
        self.runtime_module = self.site.modules.runtime
        path = "/usr/bin:/bin"
        if self.runtime_module:  # the site's module that provides the container runtime
            (self.site_modules_dir / self.runtime_module).mkdir(parents=True)
            (self.site_modules_dir / self.runtime_module / "1.0.lua").write_text(
                f'prepend_path("PATH", "{self.runtime_bin}")\n'
            )
        elif not native:  # Summit: apptainer on the default PATH
            path = f"{self.runtime_bin}:{path}"
        (tmp / "scratch").mkdir()
        self.env = {
            "HOME": str(tmp), "USER": "ann", "PATH": path, "SCRATCH": str(tmp / "scratch"),
            # a user's own setting before loading: unload must give it back
            "OMP_NUM_THREADS": "7", "HPCDL_TEST_ARGV_LOG": str(tmp / "argv"),
        }

    def framework(self, name: str):
        return next(fm for fm in self.modules.frameworks if fm.module.name == name)

    def module_use(self) -> str:
        uses = f'module use "{self.tree}"\n'
        if self.runtime_module:
            uses = f'module use "{self.site_modules_dir}"\n' + uses
        return uses

    def recorded_argv(self) -> list[str]:
        return (self.tmp / "argv").read_bytes().decode().split("\0")[:-1]


SESSION = """
{uses}
env -0 > before.env
module load hpcdl
module load pytorch
env -0 > loaded.env
module -t list 2> list.txt
module help pytorch 2> help-pytorch.txt
module show pytorch 2> show-pytorch.txt
module help hpcdl 2> help-hpcdl.txt
command -v python > which-python.txt
{while_loaded}
module unload pytorch
module unload hpcdl
env -0 > after.env
module -t list 2> list-after.txt
"""


def login_session(node: LoginNode, while_loaded: str = "") -> dict:
    run_bash(SESSION.format(uses=node.module_use(), while_loaded=while_loaded), node.env, node.tmp)
    t = node.tmp
    return {
        "before": read_env(t / "before.env"), "loaded": read_env(t / "loaded.env"), "after": read_env(t / "after.env"),
        **{name: (t / f"{name}.txt").read_text() for name in
           ("list", "help-pytorch", "show-pytorch", "help-hpcdl", "which-python", "list-after")},
    }


@pytest.mark.parametrize("site", ["volta-x86", "stampede2-knl", "local"])
def test_module_load_sets_exactly_what_the_modules_say_and_unload_gives_it_all_back(site, tmp_path):
    node = LoginNode(site, tmp_path)
    s = login_session(node)
    hpcdl, pytorch = node.modules.hpcdl, node.framework("pytorch")
    before, loaded = without_lmod(s["before"]), without_lmod(s["loaded"])

    wrappers = node.tree / pytorch.wrappers_dir
    runtime = [str(node.runtime_bin)] if node.runtime_module else []
    assert loaded["PATH"].split(":") == [str(wrappers), *runtime, f"{node.prefix}/bin", *before["PATH"].split(":")]
    assert loaded["HPCDL_SITE_PATH"] == f"{node.prefix}/sites"
    for name, value in {**hpcdl.env, **pytorch.module.env}.items():
        assert loaded[name] == value, name
    changed = {k for k in set(before) | set(loaded) if before.get(k) != loaded.get(k)}
    assert changed == {"PATH", "HPCDL_SITE_PATH", *hpcdl.env, *pytorch.module.env}
    assert s["which-python"].strip() == str(wrappers / "python")
    assert s["loaded"]["HPCDL_SITE"] == site

    listed = s["list"].split()
    assert listed[:1] == ["hpcdl/0.1.0"] and f"pytorch/{pytorch.module.version}" in listed
    if node.runtime_module:
        assert any(m.startswith(f"{node.runtime_module}/") for m in listed), "the runtime module comes with pytorch"

    first_help_line = pytorch.module.help.splitlines()[0]
    assert first_help_line in s["help-pytorch"] and first_help_line in s["show-pytorch"]
    assert f"hpcdl plan --site {site}" in s["help-hpcdl"]

    assert without_lmod(s["after"]) == before, "unload gives back PATH and the user's OMP_NUM_THREADS=7"
    assert s["after"]["OMP_NUM_THREADS"] == "7"
    assert "No modules loaded" in s["list-after"], "the runtime module leaves with the framework that brought it"


def test_v100_python_runs_inside_the_volta_image_with_nv_and_only_the_binds_that_exist(tmp_path):
    node = LoginNode("volta-x86", tmp_path)
    login_session(node, while_loaded="python -c 'print(1)' 'two words'")
    image = node.framework("pytorch").image
    # no /scratch/ann on this machine (apptainer would refuse a missing bind source); /tmp exists
    assert node.recorded_argv() == ["apptainer", "exec", "--nv", "--bind", "/tmp", image, "python", "-c", "print(1)",
                                    "two words"]


def test_stampede2_torchrun_runs_inside_the_knl_image_binding_scratch_and_tmp(tmp_path):
    node = LoginNode("stampede2-knl", tmp_path)
    login_session(node, while_loaded='HPCDL_IMAGE=/elsewhere/my.sif torchrun --nproc-per-node 2 train.py')
    assert node.recorded_argv() == [
        "singularity", "exec", "--bind", str(tmp_path / "scratch"), "--bind", "/tmp",
        "/elsewhere/my.sif", "torchrun", "--nproc-per-node", "2", "train.py",
    ]


def test_local_wrapper_python_really_runs_and_imports_torch_with_the_module_threads(tmp_path):
    node = LoginNode("local", tmp_path)
    threads = node.framework("pytorch").module.env["OMP_NUM_THREADS"]
    login_session(node, while_loaded=(
        "python -c 'import os, sys, torch; print(torch.__version__, os.environ[\"OMP_NUM_THREADS\"], sys.prefix)' > torch.txt\n"
        "hpcdl --help > hpcdl-help.txt"
    ))
    version, omp, prefix = (tmp_path / "torch.txt").read_text().split()
    assert version.startswith("2.13.0") and omp == threads and prefix == sys.prefix
    assert "modulefiles" in (tmp_path / "hpcdl-help.txt").read_text()


def test_loading_tensorflow_swaps_out_pytorch_so_one_python_is_on_path(tmp_path):
    node = LoginNode("volta-x86", tmp_path)
    script = node.module_use() + "module load pytorch\nmodule load tensorflow\ncommand -v python\nmodule -t list 2> list.txt\n"
    proc = run_bash(script, node.env, tmp_path)
    assert proc.stdout.strip() == str(node.tree / node.framework("tensorflow").wrappers_dir / "python")
    assert 'replacing "pytorch/2.8.0" with "tensorflow/2.20.0"' in proc.stderr
    assert (tmp_path / "list.txt").read_text().split() == ["tensorflow/2.20.0"]


def test_two_hpcdl_versions_are_never_loaded_together(tmp_path):
    node = LoginNode("summit", tmp_path)
    newer = node.tree / "hpcdl" / "0.2.0.lua"
    newer.write_text((node.tree / "hpcdl" / "0.1.0.lua").read_text())
    run_bash(node.module_use() + "module load hpcdl/0.1.0\nmodule load hpcdl/0.2.0\nmodule -t list 2> list.txt\n", node.env, tmp_path)
    assert (tmp_path / "list.txt").read_text().split() == ["hpcdl/0.2.0"]


def test_a_framework_module_leaves_the_hosts_hpcdl_first_on_path(tmp_path):
    """submit, status and cancel need the login node's scheduler commands: never a wrapper into the image."""
    node = LoginNode("stampede2-knl", tmp_path)
    host_hpcdl = Path(node.prefix) / "bin" / "hpcdl"
    host_hpcdl.parent.mkdir(parents=True)
    host_hpcdl.write_text("#!/bin/sh\n")
    host_hpcdl.chmod(0o755)
    for order in ("hpcdl pytorch", "pytorch hpcdl"):
        proc = run_bash(node.module_use() + f"module load {order}\ncommand -v hpcdl\n", node.env, tmp_path)
        assert proc.stdout.strip() == str(host_hpcdl), order


def test_whatis_spider_extensions_and_keyword_find_the_framework_modules(tmp_path):
    node = LoginNode("volta-x86", tmp_path)
    script = node.module_use() + (
        "module whatis pytorch 2> whatis.txt\n"
        "module spider horovod 2> spider.txt\n"
        "module keyword keras 2> keyword.txt\n"
    )
    run_bash(script, node.env, tmp_path)
    whatis = (tmp_path / "whatis.txt").read_text()
    for field in ("Category: library, machine learning", "URL: https://pytorch.org", "Keywords: "):
        assert field in whatis, whatis
    spider = (tmp_path / "spider.txt").read_text()
    assert "pytorch/2.8.0" in spider and "Unable to find" not in spider, spider
    assert "tensorflow/" in (tmp_path / "keyword.txt").read_text()


def test_the_centres_own_framework_module_conflicts_with_hpcdls(tmp_path):
    """A centre's own module (Summit's open-ce) is in no hpcdl family, so family() cannot swap it out:
    conflict() refuses. The site names it in modules.frameworks."""
    site = load_site("volta-x86")
    site = site.model_copy(update={"modules": site.modules.model_copy(update={"frameworks": {"pytorch": "open-ce"}})})
    node = LoginNode("volta-x86", tmp_path, site)
    centre = tmp_path / "centre-modules" / "open-ce"
    centre.mkdir(parents=True)
    (centre / "1.10.0-py311-ibm.lua").write_text('setenv("OPEN_CE", "1")\n')
    script = node.module_use() + f'module use "{centre.parent}"\nmodule load open-ce\nmodule load pytorch\n'
    proc = subprocess.run(["bash", "-c", f"source {LMOD_INIT}\n{script}\nmodule -t list 2> list.txt"], env=node.env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert 'Cannot load module "pytorch/2.8.0"' in proc.stderr and "open-ce" in proc.stderr, proc.stderr
    assert (tmp_path / "list.txt").read_text().split() == ["open-ce/1.10.0-py311-ibm"]

"""Host library folders a profile puts on LD_LIBRARY_PATH reach ranks that run in a container.

ALCF's NCCL settings for Polaris prepend the aws-ofi-nccl plugin's folder to LD_LIBRARY_PATH on the
host; a rank in `apptainer exec` sees neither the folder (not bound) nor the path (Apptainer sets the
container's LD_LIBRARY_PATH to /.singularity.d/libs: Apptainer "Environment and Metadata"), and
ch-run's --set-env replaces it with the image's own. Each runtime binds the folders and puts them
before the container's own value. The last test runs a real ch-run (Charliecloud, from apt).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess

import pytest

from conftest import FIXTURE_SITES
from hpcdl.errors import HpcdlError
from hpcdl.plan import JobRequest, make_plan
from hpcdl.runtimes import runtime_for
from hpcdl.shell import join
from hpcdl.sites.registry import load_site_file
from hpcdl.sites.schema import EnvPath

PLUGIN = "/soft/libraries/aws-ofi-nccl/v1.9.1-aws/lib"


def _site(runtime: str, prepend=(PLUGIN,), append=(), node_local=None):
    site = load_site_file(FIXTURE_SITES / "ci-slurm.yaml")
    env = {**site.env, "LD_LIBRARY_PATH": EnvPath(prepend=tuple(prepend), append=tuple(append))}
    filesystems = site.filesystems.model_copy(update={"node_local": node_local, "scratch": None})
    return site.model_copy(update={"runtime": runtime, "env": env, "filesystems": filesystems})


def _line(runtime: str, **kw) -> list[str]:
    site = _site(runtime, **kw)
    plan = make_plan(site.model_copy(update={"runtime": "none"}), JobRequest(nodes=1, ranks_per_node=1))
    return shlex.split(join(runtime_for(runtime).command(plan, site, "/images/x.img")))


@pytest.mark.parametrize("runtime", ["apptainer", "singularity"])
def test_apptainer_binds_the_folder_and_sets_the_containers_library_path_from_its_own(runtime):
    argv = _line(runtime, append=("/opt/after",))
    assert argv[argv.index(PLUGIN) - 1] == "--bind" and argv[argv.index("/opt/after") - 1] == "--bind"
    assert argv[argv.index("--env") + 1] == f"LD_LIBRARY_PATH={PLUGIN}:$LD_LIBRARY_PATH:/opt/after"
    assert argv.index("--env") < argv.index("/images/x.img")


def test_apptainer_refuses_a_folder_its_bind_and_env_lists_would_split():
    with pytest.raises(HpcdlError, match=r"env\.LD_LIBRARY_PATH: '/opt/a,b'"):
        _line("apptainer", prepend=("/opt/a,b",))


def test_charliecloud_binds_the_folder_and_sets_the_path_after_the_images_environment():
    argv = _line("charliecloud")
    assert f"{PLUGIN}:{PLUGIN}" in argv and argv[argv.index(f"{PLUGIN}:{PLUGIN}") - 1] == "-b"
    assert argv[1:3] == ["--set-env", f"--set-env=LD_LIBRARY_PATH={PLUGIN}:$LD_LIBRARY_PATH"]


def test_podman_hpc_mounts_the_folder_and_passes_the_hosts_path():
    argv = _line("podman-hpc")
    assert argv[argv.index(f"{PLUGIN}:{PLUGIN}") - 1] == "--volume"
    assert "LD_LIBRARY_PATH" in argv  # --env LD_LIBRARY_PATH: the host's value, the folder prepended


def test_no_host_folders_no_library_path_setting():
    site = load_site_file(FIXTURE_SITES / "ci-slurm.yaml").model_copy(update={"runtime": "apptainer"})
    plan = make_plan(site.model_copy(update={"runtime": "none"}), JobRequest(nodes=1, ranks_per_node=1))
    assert "--env" not in runtime_for("apptainer").command(plan, site, "x.sif")


@pytest.mark.skipif(shutil.which("ch-run") is None, reason="needs Charliecloud's ch-run")
def test_a_folder_prepended_on_the_host_is_on_the_library_path_inside_a_real_ch_run(tmp_path):
    """A directory image whose ENV sets LD_LIBRARY_PATH (as an image built from a Dockerfile may),
    started by the very line the runtime renders: the host folder comes first, the image's after."""
    image = tmp_path / "image"
    for folder in ("usr", "etc", "dev", "proc", "sys", "tmp", "home", "mnt", "run", "var", "ch"):
        (image / folder).mkdir(parents=True)
    for link in ("bin", "lib", "lib64", "sbin"):
        (image / link).symlink_to(f"usr/{link}")
    for name in ("passwd", "group", "hosts", "resolv.conf"):
        (image / "etc" / name).touch()
    (image / "ch" / "environment").write_text("LD_LIBRARY_PATH=/image/lib\n")
    plugin = tmp_path / "host-plugin" / "lib"
    plugin.mkdir(parents=True)
    (plugin / "libnccl-net.so").write_text("plugin")
    job = tmp_path / "job"
    job.mkdir()
    site = _site("charliecloud", prepend=(str(plugin),))
    plan = make_plan(site.model_copy(update={"runtime": "none"}), JobRequest(nodes=1, ranks_per_node=1))
    argv = runtime_for("charliecloud").command(plan, site, str(image))
    # the image holds no /usr of its own: the host's is bound in read-only, so /bin/sh runs
    line = join(argv[:1] + ["-b", "/usr:/usr"] + argv[1:]) + " /bin/sh -c " + shlex.quote(
        f'echo "$LD_LIBRARY_PATH"; cat {plugin}/libnccl-net.so')
    env = {**os.environ, "USER": os.environ.get("USER", "root"), "HPCDL_JOB_DIR": str(job),
           "LD_LIBRARY_PATH": f"{plugin}:/host/only"}
    proc = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"{plugin}:/image/lib", "plugin"], proc.stdout

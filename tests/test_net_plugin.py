"""The Slingshot NCCL/RCCL plugin: the plan enables it, with its libfabric settings, only where
something brings it to the process that uses it (the image, the runtime's module, hook or bind, the
environment's own); a multi-node GPU job that nothing brings it to is refused in one line.

OLCF "PyTorch on Frontier": without the plugin RCCL "defaults to inter-node communication using
TCP/IP Sockets, which does not scale"; NCCL_NET_PLUGIN names it ("Without this the plugin will not be
used!"). NERSC podman-hpc's `nccl` module brings the host's plugin and sets its own NCCL_NET.
"""

from __future__ import annotations

import pytest

from hpcdl.errors import HpcdlError
from hpcdl.images.spec import load_images
from hpcdl.plan.planner import make_plan
from hpcdl.plan.request import JobRequest
from hpcdl.sites import load_site

PLUGIN_SETTINGS = ("NCCL_CROSS_NIC", "NCCL_NET_GDR_LEVEL", "FI_CXI_DISABLE_HOST_REGISTER", "FI_CXI_DEFAULT_CQ_SIZE",
                   "FI_MR_CACHE_MONITOR")


def _plan(site, nodes=2):
    return make_plan(site, JobRequest(nodes=nodes, framework="pytorch"))


def _with_image(site, image):
    return site.model_copy(update={"defaults": site.defaults.model_copy(update={"image": image})})


def test_frontier_runs_the_image_that_carries_the_rccl_plugin_and_names_it():
    plan = _plan(load_site("frontier"))
    spec = load_images()["mi250x-rocm"]
    assert plan.env["NCCL_NET_PLUGIN"] == spec.net_plugin_library == "/opt/aws-ofi-nccl/lib/librccl-net.so"
    for name in PLUGIN_SETTINGS:
        assert name in plan.env
    assert plan.runtime.net_plugin_from == "the mi250x-rocm image's own aws-ofi build"


def test_a_multi_node_gpu_job_nothing_brings_the_plugin_to_is_refused_in_one_line():
    site = _with_image(load_site("frontier"), "/sw/frontier/images/my-own.sif")
    with pytest.raises(HpcdlError) as err:
        _plan(site)
    message = str(err.value)
    assert message.startswith("net plugin:") and "\n" not in message and "--net-plugin" in message
    # one node needs no network: it runs, without the plugin's settings
    plan = _plan(site, nodes=1)
    assert "NCCL_NET_PLUGIN" not in plan.env and not set(PLUGIN_SETTINGS) & set(plan.env)
    assert plan.env["FI_PROVIDER"] == "cxi"  # MPI still runs over the cxi provider


def test_an_image_the_compat_check_refuses_is_refused_naming_why():
    plan = _plan(_with_image(load_site("frontier"), "volta-cuda"))
    assert plan.runtime.refusal and "volta-cuda" in plan.runtime.refusal and "AMD" in plan.runtime.refusal


def test_a_host_module_named_like_the_plugin_does_not_bring_it_into_the_container():
    site = _with_image(load_site("frontier"), "/sw/frontier/images/my-own.sif")
    site = site.model_copy(update={"modules": site.modules.model_copy(update={"load": ("aws-ofi-rccl", "ofi-nccl")})})
    with pytest.raises(HpcdlError, match="net plugin"):
        _plan(site)


def test_perlmutter_takes_the_plugin_from_podman_hpc_and_sets_its_values_not_a_path():
    site = load_site("perlmutter")
    plan = _plan(site)
    assert "NCCL_NET_PLUGIN" not in plan.env  # the nccl module sets NCCL_NET and LD_LIBRARY_PATH itself
    assert plan.env["NCCL_CROSS_NIC"] == "1" and plan.env["FI_CXI_DISABLE_HOST_REGISTER"] == "1"
    assert plan.runtime.net_plugin_from == "the podman-hpc nccl module"
    bare = site.model_copy(update={"container": site.container.model_copy(update={"gpu_modules": ("gpu",)})})
    # without podman-hpc's module, the plugin of Perlmutter's own image (ampere-cuda) serves
    plan = _plan(bare)
    assert plan.env["NCCL_NET_PLUGIN"] == load_images()["ampere-cuda"].net_plugin_library
    assert set(PLUGIN_SETTINGS) <= set(plan.env)
    # and with an image of the site's own, nothing brings it: refused
    with pytest.raises(HpcdlError, match="net plugin"):
        _plan(_with_image(bare, "registry.nersc.gov/m0000/my-torch:1.0"))


def test_the_container_engine_hook_brings_the_plugin_and_sets_its_settings_itself():
    """CSCS: the hook "sets environment variables to control the behavior of NCCL and the libfabric CXI
    provider"; its settings are exported by hand only with a uenv, so the job leaves them to the hook."""
    plan = _plan(load_site("alps-gh200"))
    assert plan.runtime.net_plugin_from.startswith("the container engine's aws_ofi_nccl hook")
    assert not set(PLUGIN_SETTINGS) & set(plan.env) and "NCCL_NET_PLUGIN" not in plan.env
    assert plan.env["FI_PROVIDER"] == "cxi" and plan.env["MPICH_GPU_SUPPORT_ENABLED"] == "0"


def test_a_profile_that_names_the_plugin_in_its_env_keeps_it_and_gets_the_settings():
    site = _with_image(load_site("perlmutter"), "registry.nersc.gov/m0000/my-torch:1.0")
    env = {**site.env, "NCCL_NET_PLUGIN": "/sw/aws-ofi-nccl/lib/libnccl-net.so"}
    site = site.model_copy(update={"env": env, "container": site.container.model_copy(update={"gpu_modules": ("gpu",)})})
    plan = _plan(site)
    assert plan.env["NCCL_NET_PLUGIN"] == "/sw/aws-ofi-nccl/lib/libnccl-net.so"
    assert plan.env["NCCL_CROSS_NIC"] == "1"


def test_cpu_jobs_and_non_slingshot_sites_get_no_plugin_settings():
    cpu = make_plan(load_site("perlmutter"), JobRequest(nodes=2, node_kind="cpu", mode="per-socket"))
    assert not set(PLUGIN_SETTINGS) & set(cpu.env) and "NCCL_NET_PLUGIN" not in cpu.env
    ib = _plan(load_site("volta-x86"))
    assert "NCCL_NET_PLUGIN" not in ib.env and "FI_CXI_DISABLE_HOST_REGISTER" not in ib.env


def _plan_image(site, image, net_plugin=None):
    return make_plan(site, JobRequest(nodes=2, framework="pytorch", image=image, net_plugin=net_plugin))


def test_an_image_named_for_the_job_brings_its_own_plugin_or_is_refused():
    site = load_site("frontier")  # its own image, mi250x-rocm, carries the RCCL plugin
    specs = load_images()
    # a known spec, by name, by registry tag or by the file hpcdl's build cache writes: its plugin
    for image in ("mi250x-rocm", "/sw/images/mi250x-rocm.sif", "/cache/mi250x-rocm-0123456789abcdef.sif",
                  "docker://hpcdl/mi250x-rocm:latest"):
        assert _plan_image(site, image).env["NCCL_NET_PLUGIN"] == specs["mi250x-rocm"].net_plugin_library, image
    # an image hpcdl does not know: no path that may not exist there, and the job is refused
    for image in ("/sw/frontier/my-own.sif", "/cache/mi250x-rocm-custom.sif"):
        with pytest.raises(HpcdlError, match="--net-plugin"):
            _plan_image(site, image)
    # the user says where the image's plugin is: it is named, with all of its settings
    plan = _plan_image(site, "/sw/frontier/my-own.sif", "/opt/ofi/lib/librccl-net.so")
    assert plan.env["NCCL_NET_PLUGIN"] == "/opt/ofi/lib/librccl-net.so" and set(PLUGIN_SETTINGS) <= set(plan.env)


def test_an_unknown_image_keeps_the_plugin_the_site_brings():
    site = load_site("perlmutter")  # podman-hpc's nccl module brings the host's plugin
    plan = _plan_image(site, "registry.nersc.gov/m0000/my-torch:1.0")
    assert set(PLUGIN_SETTINGS) <= set(plan.env) and "NCCL_NET_PLUGIN" not in plan.env


def test_render_with_image_gets_the_plan_of_that_image():
    from pathlib import Path

    from conftest import hpcdl

    recipe = Path(__file__).resolve().parents[1] / "platform/hpcdl/recipes/cifar10-quick.yaml"
    base = ["render", "-s", "frontier", "-N", "2", recipe]
    own = hpcdl(*base, check=True).stdout
    assert "export NCCL_NET_PLUGIN=" in own
    other = hpcdl(*base, "--image", "/sw/frontier/my-own.sif")
    assert other.returncode == 2 and "net plugin" in other.stderr and len(other.stderr.strip().splitlines()) == 1

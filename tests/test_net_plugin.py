"""The Slingshot NCCL/RCCL plugin: the plan enables it, with its libfabric settings, only where the
site's image or the centre brings it; both or neither, like the GTL pairing.

OLCF "PyTorch on Frontier": without the plugin RCCL "defaults to inter-node communication using
TCP/IP Sockets, which does not scale"; NCCL_NET_PLUGIN names it ("Without this the plugin will not be
used!"). NERSC podman-hpc's `nccl` module brings the host's plugin and sets its own NCCL_NET.
"""

from __future__ import annotations

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
    assert not any("TCP sockets" in n for n in plan.notes)


def test_an_image_without_the_plugin_gets_no_nccl_net_plugin_and_none_of_its_settings():
    for image in ("/sw/frontier/images/my-own.sif", "volta-cuda"):
        plan = _plan(_with_image(load_site("frontier"), image))
        assert "NCCL_NET_PLUGIN" not in plan.env
        for name in ("NCCL_CROSS_NIC", "NCCL_NET_GDR_LEVEL", "FI_CXI_DISABLE_HOST_REGISTER"):
            assert name not in plan.env, (image, name)
        assert any("TCP sockets" in n for n in plan.notes)
        # MPI still runs over the cxi provider
        assert plan.env["FI_PROVIDER"] == "cxi"


def test_perlmutter_takes_the_plugin_from_podman_hpc_and_sets_its_values_not_a_path():
    site = load_site("perlmutter")
    plan = _plan(site)
    assert "NCCL_NET_PLUGIN" not in plan.env  # the nccl module sets NCCL_NET and LD_LIBRARY_PATH itself
    assert plan.env["NCCL_CROSS_NIC"] == "1" and plan.env["FI_CXI_DISABLE_HOST_REGISTER"] == "1"
    bare = site.model_copy(update={"container": site.container.model_copy(update={"gpu_modules": ("gpu",)})})
    # without podman-hpc's module, the plugin of Perlmutter's own image (ampere-cuda) serves
    plan = _plan(bare)
    assert plan.env["NCCL_NET_PLUGIN"] == load_images()["ampere-cuda"].net_plugin_library
    assert set(PLUGIN_SETTINGS) <= set(plan.env)
    # and with an image of the site's own, nothing brings it: none of its settings, and a note
    plan = _plan(_with_image(bare, "registry.nersc.gov/m0000/my-torch:1.0"))
    assert not set(PLUGIN_SETTINGS) & set(plan.env) and "NCCL_NET_PLUGIN" not in plan.env
    assert any("TCP sockets" in n for n in plan.notes)


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

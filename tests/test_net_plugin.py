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


def _plan_image(site, image, net_plugin=None):
    return make_plan(site, JobRequest(nodes=2, framework="pytorch", image=image, net_plugin=net_plugin))


def test_an_image_named_for_the_job_brings_its_own_plugin_or_none():
    site = load_site("frontier")  # its own image, mi250x-rocm, carries the RCCL plugin
    specs = load_images()
    # a known spec, by name, by registry tag or by the file hpcdl's build cache writes: its plugin
    for image in ("mi250x-rocm", "/sw/images/mi250x-rocm.sif", "/cache/mi250x-rocm-0123456789abcdef.sif",
                  "docker://hpcdl/mi250x-rocm:latest"):
        assert _plan_image(site, image).env["NCCL_NET_PLUGIN"] == specs["mi250x-rocm"].net_plugin_library, image
    # a known spec without the plugin, or an image hpcdl does not know: no path that may not exist there
    for image in ("volta-cuda", "/sw/frontier/my-own.sif", "/cache/mi250x-rocm-custom.sif"):
        plan = _plan_image(site, image)
        assert "NCCL_NET_PLUGIN" not in plan.env and not set(PLUGIN_SETTINGS) & set(plan.env), image
        assert any("TCP sockets" in n for n in plan.notes)
    unknown = _plan_image(site, "/sw/frontier/my-own.sif")
    assert any("cannot be known" in n and "--net-plugin" in n for n in unknown.notes)
    # the user says where the image's plugin is: it is named, with all of its settings
    plan = _plan_image(site, "/sw/frontier/my-own.sif", "/opt/ofi/lib/librccl-net.so")
    assert plan.env["NCCL_NET_PLUGIN"] == "/opt/ofi/lib/librccl-net.so" and set(PLUGIN_SETTINGS) <= set(plan.env)


def test_an_unknown_image_keeps_the_plugin_the_site_brings():
    site = load_site("perlmutter")  # podman-hpc's nccl module brings the host's plugin
    plan = _plan_image(site, "registry.nersc.gov/m0000/my-torch:1.0")
    assert set(PLUGIN_SETTINGS) <= set(plan.env) and "NCCL_NET_PLUGIN" not in plan.env
    assert not any("cannot be known" in n for n in plan.notes)


def test_render_with_image_gets_the_plan_of_that_image():
    from pathlib import Path

    from conftest import hpcdl

    recipe = Path(__file__).resolve().parents[1] / "platform/hpcdl/recipes/cifar10-quick.yaml"
    base = ["render", "-s", "frontier", "-N", "2", recipe]
    own = hpcdl(*base, check=True).stdout
    assert "export NCCL_NET_PLUGIN=" in own
    other = hpcdl(*base, "--image", "/sw/frontier/my-own.sif", check=True).stdout
    assert "export NCCL_NET_PLUGIN=" not in other and "export FI_CXI_DISABLE_HOST_REGISTER=" not in other
    named = hpcdl(*base, "--image", "/sw/frontier/my-own.sif", "--net-plugin", "/opt/p/librccl-net.so", check=True).stdout
    assert "export NCCL_NET_PLUGIN=/opt/p/librccl-net.so" in named and "export FI_CXI_DISABLE_HOST_REGISTER=" in named
    bad = hpcdl(*base, "--net-plugin", "a\nb")
    assert bad.returncode != 0 and "net_plugin" in bad.stderr + bad.stdout and not bad.stdout.startswith("#!")

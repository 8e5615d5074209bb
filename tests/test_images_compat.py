"""The compatibility check refuses, one rule at a time, image specs that cannot work."""

from __future__ import annotations

import pytest

from conftest import hpcdl
from hpcdl.errors import HpcdlError
from hpcdl.images.compat import check_image, check_site, image_problems, site_problems
from hpcdl.images.generate import render
from hpcdl.images.spec import IMAGES_YAML, Environment, load_images
from hpcdl.sites import load_site
from hpcdl.sites.schema import NodeKind, Site

SPECS = load_images()


def _with(spec, **update):
    return spec.model_copy(update=update)


def _env(spec, name, **packages):
    envs = dict(spec.environments)
    envs[name] = Environment(packages={**spec.environments.get(name, Environment(packages={"x": "1"})).packages,
                                       **packages})
    return _with(spec, environments=envs)


def _site(launcher, mpi, runtime="apptainer", mpi_version=None, **node):
    kind = {"sockets": 1, "cores_per_socket": 4, "memory_gb": 8, "cpu_target": "knl", **node}
    return Site(name="testsite", scheduler="slurm", launcher=launcher, mpi=mpi, runtime=runtime,
                mpi_version=mpi_version, node_kinds={"cpu": NodeKind(**kind)})


V100 = {"cpu_target": "skylake_avx512", "gpus": [{"model": "Tesla V100-SXM2-16GB", "socket": 0}]}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_the_shipped_images_pass_the_check(name):
    assert image_problems(SPECS[name]) == []


def test_cuda_13_with_sm_70_is_refused_because_cuda_13_dropped_volta():
    volta = SPECS["volta-cuda"]
    bad = _with(volta, cuda=volta.cuda.model_copy(update={"version": "13.0"}))
    with pytest.raises(HpcdlError, match=r"cuda.version 13.0 cannot target sm_70: CUDA 13 removed"):
        check_image(bad)


def test_no_definition_is_rendered_for_a_refused_spec():
    volta = SPECS["volta-cuda"]
    bad = _with(volta, cuda=volta.cuda.model_copy(update={"version": "13.2"}))
    with pytest.raises(HpcdlError, match="Volta"):
        render(bad, "singularity")


def test_cudnn_9_11_with_sm_70_is_refused():
    volta = SPECS["volta-cuda"]
    bad = _with(volta, cuda=volta.cuda.model_copy(update={"cudnn": "9.11.0.98"}))
    with pytest.raises(HpcdlError, match=r"cuDNN 9.11 dropped Volta"):
        check_image(bad)


def test_horovod_0_28_1_for_tensorflow_2_16_or_newer_is_refused():
    knl = SPECS["knl-mkldnn"]
    bad = _with(knl, horovod=knl.horovod.model_copy(update={"frameworks": ("pytorch", "tensorflow")}))
    assert bad.environments["main"].version_of("tensorflow-cpu") == "2.20.0"
    with pytest.raises(HpcdlError, match=r"horovod 0.28.1 cannot be built for tensorflow 2.20.0.*TensorFlow < 2.16"):
        check_image(bad)
    ok = _env(bad, "main", **{"tensorflow-cpu": "2.15.1"})
    assert image_problems(ok) == []


def test_ipex_with_a_torch_it_does_not_accept_is_refused():
    bad = _env(SPECS["knl-mkldnn"], "main", torch="2.13.0")
    with pytest.raises(HpcdlError, match=r"intel-extension-for-pytorch 2.8.0 needs torch 2.8.\*.*torch 2.13.0"):
        check_image(bad)


def test_mxnet_1_9_beside_numpy_1_24_or_newer_is_refused():
    bad = _env(SPECS["knl-mkldnn"], "mxnet", numpy="1.26.4")
    with pytest.raises(HpcdlError, match=r"mxnet 1.9.1 needs numpy < 1.24.*numpy 1.26.4"):
        check_image(bad)


def test_mxnet_in_the_torch_environment_with_its_numpy_2_is_refused():
    bad = _env(SPECS["knl-mkldnn"], "main", mxnet="1.9.1")
    with pytest.raises(HpcdlError, match=r"environments.main: mxnet 1.9.1 needs numpy < 1.24"):
        check_image(bad)


def test_open_mpi_without_pmix_under_srun_mpi_pmix_is_refused():
    volta = SPECS["volta-cuda"]
    bad = _with(volta, mpi=volta.mpi.model_copy(update={"pmix": None}))
    problems = site_problems(bad, _site("srun", "openmpi", **V100))
    assert problems and "built without PMIX" in problems[0] and "srun --mpi=pmix" in problems[0]
    assert site_problems(volta, _site("srun", "openmpi", **V100)) == []


def test_open_mpi_image_on_a_cray_site_expecting_the_mpich_abi_is_refused():
    with pytest.raises(HpcdlError, match=r"openmpi ABI\) but site testsite runs ranks through Cray MPICH swapped "
                                         r"into the image at run time, which needs the mpich ABI"):
        check_site(SPECS["volta-cuda"], _site("srun", "cray-mpich", runtime="shifter", **V100))


def test_an_mpich_abi_image_runs_on_the_cray_site():
    knl = SPECS["knl-mkldnn"]
    mpich = _with(knl, mpi=knl.mpi.model_copy(update={"flavour": "mpich", "version": "4.2.3", "pmix": None}))
    assert site_problems(mpich, _site("srun", "cray-mpich")) == []
    assert "--with-device=ch4:ofi" in render(mpich, "singularity")


def test_open_mpi_5_with_slurm_pmi2_is_refused():
    hopper = SPECS["hopper-cuda"]
    bad = _with(hopper, mpi=hopper.mpi.model_copy(update={"pmi2": True}))
    with pytest.raises(HpcdlError, match=r"removed in Open MPI 5"):
        check_image(bad)


def test_compat_on_the_command_line_names_the_reason_in_one_line(tmp_path):
    specs = tmp_path / "images.yaml"
    specs.write_text(IMAGES_YAML.read_text().replace('version: "12.6"', 'version: "13.0"'))
    proc = hpcdl("images", "compat", "volta-cuda", "--specs", specs)
    assert proc.returncode == 1  # a refusal, not a usage error
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot target sm_70" in lines[0]


def test_a_typo_in_a_spec_names_the_field(tmp_path):
    bad = tmp_path / "images.yaml"
    bad.write_text(IMAGES_YAML.read_text().replace("cpu_target: knl", "cpu_traget: knl"))
    proc = hpcdl("images", "list", "--specs", bad)
    assert proc.returncode == 2 and "images.knl-mkldnn: cpu_traget: unknown field" in proc.stderr


def test_images_list_names_each_image_with_its_cuda_and_mpi():
    proc = hpcdl("images", "list", check=True)
    lines = {line.split()[0]: line for line in proc.stdout.splitlines()}
    assert "CUDA 12.6 sm_70" in lines["volta-cuda"] and "CUDA 13.0 sm_90" in lines["hopper-cuda"]
    assert "omnipath" in lines["knl-mkldnn"] and "mxnet 1.9.1" in lines["knl-mkldnn"]


# --- the image's architectures against the site's hardware ------------------------------------

def test_an_x86_64_image_is_refused_on_power9():
    # Summit and Lassen are ppc64le; every shipped image is x86_64 or aarch64
    for name in ("summit", "lassen"):
        for spec in SPECS.values():
            problems = site_problems(spec, load_site(name))
            assert any(f"built for {spec.arch}" in p and "ppc64le" in p for p in problems), (name, spec.name, problems)


def test_cuda_code_for_sm_90_is_refused_on_v100_and_sm_70_on_a100():
    v100 = _site("srun", "openmpi", cpu_target="skylake_avx512", gpus=[{"model": "Tesla V100-SXM2-16GB", "socket": 0}])
    a100 = _site("srun", "openmpi", cpu_target="zen3", gpus=[{"model": "NVIDIA A100-SXM4-40GB", "socket": 0}])
    assert any("sm_90" in p and "(sm_70)" in p for p in site_problems(SPECS["hopper-cuda"], v100))
    assert any("sm_70" in p and "(sm_80)" in p for p in site_problems(SPECS["volta-cuda"], a100))
    assert not [p for p in site_problems(SPECS["volta-cuda"], v100) if "sm_" in p]


def test_a_cuda_image_is_refused_on_amd_gpus_and_a_knl_image_off_knl():
    mi250x = _site("srun", "openmpi", cpu_target="zen3", gpus=[{"model": "AMD MI250X GCD", "vendor": "amd", "socket": 0}])
    assert any("CUDA" in p and "AMD" in p for p in site_problems(SPECS["volta-cuda"], mi250x))
    assert any("-march=knl" in p for p in site_problems(SPECS["knl-mkldnn"], mi250x))
    assert not [p for p in site_problems(SPECS["knl-mkldnn"], load_site("stampede2-knl")) if "march" in p]


def test_images_compat_for_summit_refuses_every_image():
    proc = hpcdl("images", "compat", "--site", "summit")
    assert proc.returncode == 1 and "ppc64le" in proc.stderr


def test_a_rocm_image_is_refused_on_nvidia_gpus_on_other_gfx_and_on_power9():
    rocm = SPECS["mi250x-rocm"]
    mi300 = _site("srun", "cray-mpich", cpu_target="zen4", gpus=[{"model": "AMD Instinct MI300A", "vendor": "amd", "socket": 0}])
    a100 = _site("srun", "cray-mpich", cpu_target="zen3", gpus=[{"model": "NVIDIA A100-SXM4-40GB", "socket": 0}])
    p9 = _site("srun", "cray-mpich", cpu_target="power9", gpus=[{"model": "AMD Instinct MI250X GCD", "vendor": "amd", "socket": 0}])
    assert any("gfx90a" in p and "(gfx942)" in p for p in site_problems(rocm, mi300))
    assert any("ROCm" in p and "NVIDIA" in p for p in site_problems(rocm, a100))
    assert any("built for x86_64" in p and "ppc64le" in p for p in site_problems(rocm, p9))
    assert site_problems(rocm, load_site("frontier")) == []


def test_images_compat_picks_out_the_one_image_frontier_can_run():
    proc = hpcdl("images", "compat", "mi250x-rocm", "--site", "frontier")
    assert proc.returncode == 0 and "mi250x-rocm: ok on frontier (mi250x)" in proc.stdout
    proc = hpcdl("images", "compat", "volta-cuda", "--site", "frontier")
    assert proc.returncode == 1 and "AMD" in proc.stderr


def test_a_net_plugin_needs_gpus_and_the_images_libfabric():
    rocm = SPECS["mi250x-rocm"]
    ib = _with(rocm, mpi=rocm.mpi.model_copy(update={"fabric": "infiniband", "ucx": "1.18.1"}))
    assert any("net_plugin" in p and "libfabric" in p for p in image_problems(ib))
    cpu = _with(rocm, rocm=None)
    assert any("net_plugin" in p and "cuda or rocm" in p for p in image_problems(cpu))
    both = _with(SPECS["volta-cuda"], rocm=rocm.rocm)
    assert any("not both" in p for p in image_problems(both))


def test_perlmutter_and_frontier_each_get_the_one_image_built_for_their_gpus_and_mpi():
    from hpcdl.modules.images import image_name_for_site

    assert image_name_for_site(load_site("perlmutter")) == "ampere-cuda"
    assert image_name_for_site(load_site("frontier")) == "mi250x-rocm"
    for site, name in (("perlmutter", "ampere-cuda"), ("frontier", "mi250x-rocm")):
        assert site_problems(SPECS[name], load_site(site)) == []
    # an A100 site whose launcher starts Open MPI ranks gets the Open MPI CUDA image, not an MPICH one
    a100 = _site("srun", "openmpi", cpu_target="zen3", gpus=[{"model": "NVIDIA A100-SXM4-40GB", "socket": 0}])
    assert image_name_for_site(a100) == "cuda12-openmpi"


def test_a_job_runs_the_image_of_the_node_kind_it_was_planned_for_not_the_default_kinds():
    """Perlmutter's default kind has A100s, its CPU kind none: a CPU job got the CUDA image (and a
    GPU job on a machine whose default kind is the CPU one, NCAR Derecho, got the CPU image, run
    with --nv, and no NCCL plugin). The image, and the plugin settings read from its spec, follow
    the plan's node kind."""
    from hpcdl.modules.images import image_name_for_site
    from hpcdl.plan.planner import make_plan
    from hpcdl.plan.request import JobRequest
    from hpcdl.render.jobscript import JobOptions, render_job_script

    site = load_site("perlmutter")
    assert image_name_for_site(site) == image_name_for_site(site, "gpu") == "ampere-cuda"
    # the CPU kind: the CPU image the check accepts there (Milan is x86-64-v3, Cray MPICH keeps the
    # MPICH ABI), never the GPU kind's CUDA image (knl-mkldnn, -march=knl with Open MPI, is refused)
    assert image_name_for_site(site, "cpu") == "cpu-x86-64-v3-mpich"
    plan = make_plan(site, JobRequest(nodes=1, framework="pytorch", node_kind="cpu", use_gpus=False))
    script = render_job_script(site, plan, {}, JobOptions(account="m0000"))
    assert "cpu-x86-64-v3-mpich" in script and "ampere-cuda" not in script
    # a framework that no image the check accepts holds, and no module of the centre's, is refused,
    # naming why: the CPU image holds PyTorch only, NERSC's module is pytorch
    plan = make_plan(site, JobRequest(nodes=1, framework="mxnet", node_kind="cpu", use_gpus=False))
    with pytest.raises(HpcdlError, match="^runtime: no hpcdl image runs mxnet on node kind cpu"):
        render_job_script(site, plan, {}, JobOptions(account="m0000"))
    plan = make_plan(site, JobRequest(nodes=1, framework="pytorch", node_kind="gpu"))
    assert "ampere-cuda" in render_job_script(site, plan, {}, JobOptions(account="m0000"))


# --- the gaps of issue 25: no GPUs, the driver, Open MPI's major version, the host's ABI ------------

def test_a_gpu_image_is_refused_on_a_node_kind_without_gpus():
    for site, kind in (("perlmutter", "cpu"), ("cori-knl", None), ("stampede2-skx", None)):
        for name in ("ampere-cuda", "mi250x-rocm", "volta-cuda"):
            problems = site_problems(SPECS[name], load_site(site), kind)
            assert any("GPUs but site" in p and "has none" in p for p in problems), (site, name, problems)
    # the same image on the same site's GPU kind is not refused for that reason
    assert site_problems(SPECS["ampere-cuda"], load_site("perlmutter"), "gpu") == []


def test_the_cuda_driver_floor_follows_nvidias_minor_version_compatibility_table():
    """CUDA 12.x needs R525 or newer, 13.x R580 (NVIDIA CUDA Compatibility, Minor Version
    Compatibility, Table 1): an H100 node on a 535 driver cannot run hopper-cuda's CUDA 13.0."""
    h100 = {"cpu_target": "sapphirerapids", "gpus": [{"model": "NVIDIA H100 SXM5", "socket": 0}]}
    old = _site("srun", "openmpi", gpu_driver="535.183.06", **h100)
    new = _site("srun", "openmpi", gpu_driver="580.65.06", **h100)
    unknown = _site("srun", "openmpi", **h100)
    refused = [p for p in site_problems(SPECS["hopper-cuda"], old) if "driver" in p]
    assert refused == ["the image's CUDA 13.0 needs an NVIDIA driver >= 580 (minor-version compatibility) but site "
                       "testsite (cpu: sapphirerapids) runs driver 535.183.06"]
    assert not [p for p in site_problems(SPECS["hopper-cuda"], new) if "driver" in p]
    assert not [p for p in site_problems(SPECS["hopper-cuda"], unknown) if "driver" in p]
    v100 = _site("srun", "openmpi", gpu_driver="520.61.05", **V100)
    assert any(">= 525" in p for p in site_problems(SPECS["volta-cuda"], v100))
    assert not [p for p in site_problems(SPECS["volta-cuda"], _site("srun", "openmpi", gpu_driver="525.60.13", **V100))
                if "driver" in p]


def test_a_driver_given_by_the_cuda_it_supports_refuses_an_image_of_a_newer_cuda_major():
    """Centres often publish the CUDA their driver carries, not its number (TTU REPACSS: "CUDA 13.1 is
    available through the NVIDIA driver", https://github.com/nsfcac/repacss-user-guide/blob/
    0d16007ecd293f7ee27fb34641245a3430695c7c/docs/running-jobs/basics.md), as nvidia-smi prints it
    ("CUDA Version: 13.1"). By minor-version compatibility that driver runs any CUDA 13.x image, and
    no CUDA 14; a "CUDA 12.4" driver runs no CUDA 13 image (hopper-cuda's 13.0)."""
    h100 = {"cpu_target": "sapphirerapids", "gpus": [{"model": "NVIDIA H100 NVL", "socket": 0}]}
    cuda12 = _site("srun", "openmpi", gpu_driver_cuda="12.4", **h100)
    cuda13 = _site("srun", "openmpi", gpu_driver_cuda="13.1", **h100)
    assert [p for p in site_problems(SPECS["hopper-cuda"], cuda12) if "driver" in p] == [
        "the image's CUDA 13.0 needs a driver of CUDA 13 or newer but site testsite (cpu: sapphirerapids) runs a "
        "driver of CUDA 12.4"]
    assert not [p for p in site_problems(SPECS["hopper-cuda"], cuda13) if "driver" in p]
    later_minor = _with(SPECS["hopper-cuda"], cuda=SPECS["hopper-cuda"].cuda.model_copy(update={"version": "13.2"}))
    assert not [p for p in site_problems(later_minor, cuda13) if "driver" in p]
    # REPACSS's profile says it so, and hpcdl's CUDA 13 image is accepted there
    assert load_site("repacss").node_kind("h100")[1].gpu_driver_cuda == "13.1"
    assert site_problems(SPECS["hopper-cuda"], load_site("repacss"), "h100") == []
    # the CUDA of an NVIDIA driver on a node without NVIDIA GPUs is refused when the profile loads
    with pytest.raises(ValueError, match="gpu_driver_cuda: 13.1 is the CUDA of an NVIDIA driver, but the node kind"):
        _site("srun", "openmpi", gpu_driver_cuda="13.1", cpu_target="sapphirerapids")


def test_an_open_mpi_5_image_is_refused_under_a_host_open_mpi_4_mpirun():
    h100 = {"cpu_target": "x86_64_v4", "gpus": [{"model": "NVIDIA H100", "socket": 0}]}
    host4 = _site("mpirun", "openmpi", mpi_version="4.1.4", **h100)
    host5 = _site("mpirun", "openmpi", mpi_version="5.0.7", **h100)
    assert any("Open MPI 5.0.8 is another major version" in p and "4.1.4" in p
               for p in site_problems(SPECS["hopper-cuda"], host4))
    assert not [p for p in site_problems(SPECS["hopper-cuda"], host5) if "major version" in p]
    # under srun the host's Open MPI library is not used: Slurm's PMIx starts the image's own
    srun4 = _site("srun", "openmpi", mpi_version="4.1.4", **h100)
    assert not [p for p in site_problems(SPECS["hopper-cuda"], srun4) if "major version" in p]


@pytest.mark.parametrize("mpi", ["intel-mpi", "mvapich2", "parastation-mpi", "cray-mpich"])
def test_an_open_mpi_image_is_refused_where_the_hosts_mpich_abi_mpi_is_bound_in(mpi):
    """Intel MPI, MVAPICH and ParaStation MPI keep the MPICH ABI (the MPICH ABI initiative): their
    sites bind the host's libmpi into the image, so an Open MPI image cannot take it, under srun too."""
    site = _site("srun", mpi, **V100)
    assert any("needs the mpich ABI" in p for p in site_problems(SPECS["volta-cuda"], site))


def test_compat_answers_per_node_kind_with_a_list_of_reasons():
    from hpcdl.images.compat import compat

    perlmutter = load_site("perlmutter")
    assert compat(SPECS["ampere-cuda"], perlmutter, "gpu") == []
    reasons = compat(SPECS["ampere-cuda"], perlmutter, "cpu")
    assert len(reasons) == 1 and "has none" in reasons[0]
    assert compat(SPECS["ampere-cuda"]) == []  # no site: the image's own rules only


def test_no_reason_repeats_a_phrase():
    """Issue 28: "starts ranks with jsrun starts ranks through" read twice."""
    import re

    from hpcdl.sites import list_sites

    for name in list_sites():
        site = load_site(name)
        for spec in SPECS.values():
            for reason in site_problems(spec, site):
                words = reason.split()
                pairs = [" ".join(words[i:i + 2]) for i in range(len(words) - 1)]
                doubled = {p for p in pairs if pairs.count(p) > 1 and not re.fullmatch(r"(the|of|but|site) \S+", p)}
                assert not doubled, (name, spec.name, reason)


def test_the_cuda_image_built_here_runs_on_v100_a100_and_h100_nodes_from_a_525_driver_on():
    """local-cuda12 (PyPI's torch 2.7.1: CUDA 12.6, code for sm_50 to sm_90; Debian's Open MPI 4.1
    with PMIx) is accepted on x86_64 V100, A100 and H100 nodes whose srun starts ranks over PMIx,
    from an R525 driver on (CUDA 12's minor-version floor), and refused without GPUs, on an older
    driver, on a GPU newer than its code (sm_100) and under an MPICH-ABI host MPI."""
    spec = SPECS["local-cuda12"]
    gpus = {"v100": "Tesla V100-SXM2-16GB", "a100": "NVIDIA A100-SXM4-40GB", "h100": "NVIDIA H100 SXM5"}
    for model in gpus.values():
        node = {"cpu_target": "x86_64_v3", "gpus": [{"model": model, "socket": 0}]}
        assert site_problems(spec, _site("srun", "openmpi", gpu_driver="525.60.13", **node)) == [], model
        old = site_problems(spec, _site("srun", "openmpi", gpu_driver="520.61.05", **node))
        assert [p for p in old if "needs an NVIDIA driver >= 525" in p], (model, old)
    assert any("has none" in p for p in site_problems(spec, _site("srun", "openmpi", cpu_target="x86_64_v3")))
    b200 = {"cpu_target": "x86_64_v3", "gpus": [{"model": "NVIDIA B200", "socket": 0}]}
    assert any("built for sm_70, sm_80, sm_90" in p and "(sm_100)" in p
               for p in site_problems(spec, _site("srun", "openmpi", **b200)))
    v100 = {"cpu_target": "x86_64_v3", "gpus": [{"model": gpus["v100"], "socket": 0}]}
    assert any("mpich ABI" in p for p in site_problems(spec, _site("srun", "intel-mpi", **v100)))
    # the shipped V100 and A100 sites with Open MPI under srun --mpi=pmix accept it too
    assert site_problems(spec, load_site("volta-x86")) == []
    assert site_problems(spec, load_site("leonardo"), "booster") == []

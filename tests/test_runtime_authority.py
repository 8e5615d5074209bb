"""One authority decides what a job runs in (hpcdl.plan.runtime): an hpcdl image the compatibility
check accepts for the node kind, the centre's own environment, or a one-line refusal naming what
would serve. Every shipped site and every profile under tests/published/, each node kind, is walked:
`plan` carries the decision and `render` runs exactly it, or refuses with that line. No placeholder
image is ever written, and the network plugin reaches the ranks of every Slingshot GPU job that runs
in a container, by the image, the runtime's module or hook, or a carried library path.
"""

from __future__ import annotations

import shlex

import pytest

from conftest import ROOT, hpcdl
from hpcdl.errors import HpcdlError
from hpcdl.images.compat import fabric_mismatch
from hpcdl.images.frameworks import image_frameworks
from hpcdl.images.spec import IMAGES_YAML, load_images
from hpcdl.plan import JobRequest, make_plan
from hpcdl.plan.runtime import IMAGE, NATIVE_KINDS, SITE_CONTAINER, choose_runtime, compat_problems
from hpcdl.render import JobOptions, render_job_script
from hpcdl.sites import load_site
from hpcdl.validate.suite import largest_whole_job
from hpcdl.sites.registry import SHIPPED, load_site_file

PUBLISHED_PROFILES = ROOT / "tests" / "published" / "profiles"
SITES = [*(("shipped", p.stem) for p in sorted(SHIPPED.glob("*.yaml"))),
         *(("published", p.name) for p in sorted(PUBLISHED_PROFILES.glob("*.yaml")))]
PLACEHOLDER = "hpcdl" + ".sif"  # spelled apart, so this file is not a place it appears


def _load(where, name):
    return load_site(name) if where == "shipped" else load_site_file(PUBLISHED_PROFILES / name)


def _kinds():
    for where, name in SITES:
        for kind in _load(where, name).node_kinds:
            yield pytest.param(where, name, kind, id=f"{name}-{kind}")


def _launch(script: str) -> list[str]:
    line = next(line for line in script.splitlines() if line.endswith(" &") and " train " in line)
    return shlex.split(line[:-2])


@pytest.mark.parametrize("where,name,kind", list(_kinds()))
def test_plan_and_render_run_what_the_authority_accepts_or_refuse_in_one_line(where, name, kind):
    site = _load(where, name)
    node = site.node_kinds[kind]
    # two nodes where the kind's queues take two (ALCF Sophia's bigmem queue takes one node; NeSI Mahuika's 6 GPUs
    # a user, one node of four A100s)
    nodes = min(x for x in (2, largest_whole_job(site, kind)) if x)
    plan = make_plan(site, JobRequest(nodes=nodes, node_kind=kind))
    choice = plan.runtime
    assert choice is not None
    options = JobOptions(account="proj0")
    if choice.refusal:
        assert "\n" not in choice.refusal and "what would serve" in choice.refusal
        with pytest.raises(HpcdlError) as err:
            render_job_script(site, plan, {}, options)
        assert str(err.value) == f"runtime: {choice.refusal}"
        return
    script = render_job_script(site, plan, {}, options)
    assert PLACEHOLDER not in script
    argv = _launch(script)
    if choice.kind == IMAGE:
        spec = load_images(IMAGES_YAML)[choice.image]
        assert compat_problems(spec, site, kind) == [], (name, kind, choice.image)
        assert any(choice.image in word for word in argv), argv
        assert spec.gpu == bool(node.gpus)  # a GPU job runs a GPU build, a CPU job a CPU build
    elif choice.kind == SITE_CONTAINER:
        assert site.environment_for(kind) is not None and site.environment_for(kind).image == choice.image
        assert choice.image in " ".join(argv) or choice.image in script
    else:
        assert choice.kind in NATIVE_KINDS and not choice.in_container
        assert not {"apptainer", "singularity", "shifter", "podman-hpc", "ch-run"} & set(argv)
    assert choice.framework_from and choice.mpi_from


@pytest.mark.parametrize("where,name,kind", list(_kinds()))
def test_an_image_built_for_the_nodes_fabric_comes_before_one_whose_mpi_falls_back_to_tcp(where, name, kind):
    # An image built for Slingshot (libfabric, no verbs) on an InfiniBand node runs, but its MPI reaches the
    # other nodes over TCP sockets; where an image built for the node's own fabric also fits, that one runs
    # (unless the first is the one meant for the site: its `serves`)
    site = _load(where, name)
    node = site.node_kinds[kind]
    choice = choose_runtime(site, kind, "pytorch", use_gpus=bool(node.gpus))
    if choice.kind != IMAGE or not fabric_mismatch(spec := load_images(IMAGES_YAML)[choice.image], site, kind):
        return
    if name in spec.serves or f"{name}:{kind}" in spec.serves:
        return
    better = [other.name for other in load_images(IMAGES_YAML).values()
              if other.gpu == bool(node.gpus) and not fabric_mismatch(other, site, kind)
              and not compat_problems(other, site, kind) and "pytorch" in image_frameworks(other).frameworks
              and not any(e.local_wheels for e in other.environments.values())]
    assert not better, f"{name}:{kind} runs {choice.image} ({fabric_mismatch(spec, site, kind)}) though {better} fit"


def test_roihus_gh200_nodes_on_infiniband_run_the_open_mpi_ucx_image_not_the_slingshot_one():
    # CSC Roihu: 4 x GH200 and "four 200 Gb/s links per node, one for each GPU" (InfiniBand NDR); both aarch64
    # GH200 images fit, the first in the specs (gh200-cuda) built for Slingshot (CSCS Alps)
    site = load_site("roihu-gpu")
    assert fabric_mismatch(load_images(IMAGES_YAML)["gh200-cuda"], site, "gpu")
    assert choose_runtime(site, "gpu", "pytorch", use_gpus=True).image == "gh200-cuda-openmpi"


def _slingshot_gpu_container_sites():
    for where, name in SITES:
        site = _load(where, name)
        for kind, node in site.node_kinds.items():
            if node.gpus and any(n.kind == "slingshot" for n in node.nics):
                plan = make_plan(site, JobRequest(nodes=2, node_kind=kind))
                if plan.runtime.in_container and not plan.runtime.refusal:
                    yield pytest.param(where, name, kind, id=f"{name}-{kind}")


@pytest.mark.parametrize("where,name,kind", list(_slingshot_gpu_container_sites()))
def test_a_slingshot_gpu_job_in_a_container_carries_the_plugin_in_its_rendered_line(where, name, kind):
    site = _load(where, name)
    plan = make_plan(site, JobRequest(nodes=2, node_kind=kind))
    script = render_job_script(site, plan, {}, JobOptions(account="proj0"))
    argv, source = _launch(script), plan.runtime.net_plugin_from
    assert source, f"{name}: nothing brings the plugin"
    if plan.runtime.net_plugin_library:  # the image's own build: NCCL_NET_PLUGIN names it (OLCF)
        assert f"export NCCL_NET_PLUGIN={plan.runtime.net_plugin_library}" in script.splitlines()
    elif site.runtime == "podman-hpc":  # NERSC podman-hpc's nccl module: the --nccl flag
        assert "--nccl" in argv
    elif site.runtime == "shifter":  # NERSC Shifter: --module=...,nccl-plugin
        modules = next(w for w in argv if w.startswith("--module=")).split("=", 1)[1].split(",")
        assert "nccl-plugin" in modules
    elif site.runtime == "container-engine":  # CSCS: the EDF's aws_ofi_nccl hook, and srun reads that EDF
        assert 'com.hooks.aws_ofi_nccl.enabled = "true"' in script.splitlines()
        assert any(w.startswith("--environment=") for w in argv)
    else:  # a library path Apptainer carries in (APPTAINERENV_/SINGULARITYENV_LD_LIBRARY_PATH)
        assert any(line.startswith(("export APPTAINERENV_LD_LIBRARY_PATH=", "export SINGULARITYENV_LD_LIBRARY_PATH="))
                   for line in script.splitlines()), source


def test_the_cli_refuses_a_request_nothing_serves_in_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "job.sh"
    proc = hpcdl("render", "--site", "lassen", "-N", "2", ROOT / "recipes" / "digits-quick.yaml", "-o", out)
    assert proc.returncode == 2 and not out.exists()
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "what would serve" in lines[0], lines


def test_hpcdl_plan_states_where_framework_mpi_and_plugin_come_from():
    text = hpcdl("plan", "--site", "perlmutter", "-N", "2", check=True).stdout
    assert "runtime: hpcdl image ampere-cuda with podman-hpc" in text
    assert "network plugin from the podman-hpc nccl module" in text


def test_a_placeholder_image_appears_nowhere_in_what_hpcdl_ships_or_writes():
    folders = [ROOT / "platform", ROOT / "docs", ROOT / "tests" / "golden", ROOT / "modulefiles", ROOT / "containers"]
    offenders = [str(p.relative_to(ROOT)) for folder in folders for p in folder.rglob("*")
                 if p.is_file() and p.suffix not in (".pyc", ".png", ".sif") and PLACEHOLDER in p.read_text(errors="ignore")]
    assert offenders == []


def test_a_named_image_the_compat_check_refuses_is_refused_at_render():
    site = load_site("stampede2-skx")
    plan = make_plan(site, JobRequest(nodes=2, image="knl-mkldnn"))
    assert plan.runtime.refusal and "knl" in plan.runtime.refusal
    with pytest.raises(HpcdlError, match="^runtime: --image knl-mkldnn"):
        render_job_script(site, plan, {}, JobOptions())


def test_the_centres_environment_states_its_pieces_and_a_host_module_name_says_nothing():
    site = load_site("polaris")
    plan = make_plan(site, JobRequest(nodes=2))
    assert plan.runtime.kind == "conda" and plan.runtime.modules == ("conda",)
    assert "LD_LIBRARY_PATH" in plan.runtime.net_plugin_from
    # the same job without the plugin folder on its path has no plugin, whatever its modules are named
    bare = site.model_copy(update={"env": {k: v for k, v in site.env.items() if k != "LD_LIBRARY_PATH"},
                                   "modules": site.modules.model_copy(update={"load": ("aws-ofi-nccl",)})})
    with pytest.raises(HpcdlError, match="^net plugin: "):
        make_plan(bare, JobRequest(nodes=2))


def test_modules_for_a_site_without_containers_need_the_framework_in_the_prefix(tmp_path):
    """Issue 28: `module load pytorch` must not load a module whose `import torch` fails."""
    prefix = tmp_path / "prefix"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "hpcdl").write_text("#!/bin/sh\n")
    (prefix / "bin" / "hpcdl").chmod(0o755)
    out = tmp_path / "tree"
    proc = hpcdl("modulefiles", "render", "--site", "local", "--prefix", prefix, "--out", out)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "holds no torch" in lines[0], proc.stderr
    assert not out.exists()
    # with torch there (and no TensorFlow), only the pytorch module is written
    (prefix / "lib" / "python3.11" / "site-packages" / "torch").mkdir(parents=True)
    (prefix / "lib" / "python3.11" / "site-packages" / "torch" / "__init__.py").write_text("")
    hpcdl("modulefiles", "render", "--site", "local", "--prefix", prefix, "--out", out, check=True)
    assert sorted(p.parent.name for p in (out / "local").glob("*/*.lua")) == ["hpcdl", "pytorch"]


def _alps_with(environment: dict, runtime: str = "none"):
    from hpcdl.sites.schema import SiteEnvironment

    site = load_site("alps-gh200")
    return site.model_copy(update={"runtime": runtime, "environment": SiteEnvironment(**environment)})


def test_a_uenv_is_entered_by_srun_and_its_declared_plugin_counts():
    site = _alps_with({"kind": "uenv", "activate": "pytorch/v2.6.0:v1", "view": "default",
                       "net_plugin": "the uenv's default view (aws-ofi-nccl)"})
    plan = make_plan(site, JobRequest(nodes=2))
    assert plan.runtime.kind == "uenv" and plan.runtime.net_plugin_from == "the uenv's default view (aws-ofi-nccl)"
    argv = _launch(render_job_script(site, plan, {}, JobOptions(account="g0")))
    assert argv[argv.index("--uenv=pytorch/v2.6.0:v1") + 1:][:3] == ["--view=default", "hpcdl", "train"]
    # without a word on the plugin, NCCL_NET names one nothing provides: refused
    with pytest.raises(HpcdlError, match="^net plugin: "):
        make_plan(_alps_with({"kind": "uenv", "activate": "pytorch/v2.6.0:v1"}), JobRequest(nodes=2))


def test_a_venv_is_activated_before_the_launch():
    site = _alps_with({"kind": "venv", "activate": "$SCRATCH/venvs/torch", "net_plugin": "aws-ofi-nccl in the venv"})
    plan = make_plan(site, JobRequest(nodes=2))
    lines = render_job_script(site, plan, {}, JobOptions(account="g0")).splitlines()
    assert 'source "${SCRATCH}"/venvs/torch/bin/activate' in lines
    assert lines.index('source "${SCRATCH}"/venvs/torch/bin/activate') < next(
        i for i, line in enumerate(lines) if " train " in line and line.endswith(" &"))

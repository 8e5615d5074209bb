"""What a profile can say about a real machine, rendered: extra directives, PBS job-wide
resources, `module use`, path lists the job shell expands, Cray PALS, container-runtime
modules, GPU-aware Cray MPICH with its GTL, every-rank-sees-every-GPU, {project} paths.
Each rendered script passes shellcheck and bash -n, and no profile value runs."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import shellcheck

from hpcdl.errors import HpcdlError
from hpcdl.plan import JobRequest, make_plan
from hpcdl.render.jobscript import JobOptions, render_job_script
from hpcdl.sites import load_site
from hpcdl.sites.registry import SHIPPED, load_site_file

POLARIS = Path(__file__).parent / "published" / "profiles" / "polaris.yaml"


def _render(site, tmp_path, nodes=2, image=None, net_plugin=None, **options) -> str:
    plan = make_plan(site, JobRequest(nodes=nodes, image=image, net_plugin=net_plugin))
    text = render_job_script(site, plan, {}, JobOptions(**options))
    path = tmp_path / f"{site.name}.sh"
    path.write_text(text)
    shellcheck(path)
    return text


def _profile(tmp_path, base: Path, **changes):
    data = yaml.safe_load(base.read_text())
    for key, value in changes.items():
        target = data
        *path, last = key.split(".")
        for p in path:
            target = target.setdefault(p, {})
        target[last] = value
    out = tmp_path / base.name
    out.write_text(yaml.safe_dump(data))
    return load_site_file(out)


def test_a_pbs_pro_pals_machine_renders_job_resources_module_use_and_a_path_list(tmp_path):
    site = load_site_file(POLARIS)
    text = _render(site, tmp_path, account="MyProj")
    lines = text.splitlines()
    assert "#PBS -l filesystems=home:eagle" in lines
    assert any(line.startswith("#PBS -l select=2:") and line.endswith(":system=polaris") for line in lines)
    assert "module use /soft/modulefiles" in lines
    assert "module load craype-accel-nvidia80 conda" in lines and "export MPICH_GPU_SUPPORT_ENABLED=1" in lines
    assert ('export LD_LIBRARY_PATH=/soft/libraries/aws-ofi-nccl/v1.9.1-aws/lib"${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"'
            in lines)
    assert "export NCCL_NET='AWS Libfabric'" in lines
    # ALCF's conda module, entered natively, so the plugin folder on LD_LIBRARY_PATH reaches NCCL
    assert "conda activate" in lines
    assert "mpiexec -n 8 --ppn 4 --depth=8 --cpu-bind depth hpcdl train" in text
    # a container of the user's own gets the apptainer module and the project folder bound
    text = _render(site, tmp_path, account="MyProj", image="/lus/eagle/projects/MyProj/my.sif",
                   net_plugin="/opt/aws-ofi-nccl/lib/libnccl-net.so")
    assert "module load craype-accel-nvidia80 apptainer" in text.splitlines()
    assert "mpiexec -n 8 --ppn 4 --depth=8 --cpu-bind depth apptainer exec --nv" in text
    assert "--bind /lus/eagle/projects/MyProj" in text


def test_a_path_list_expands_only_variable_references(tmp_path):
    site = _profile(tmp_path, POLARIS, **{"env.LD_LIBRARY_PATH": {"prepend": ["/opt/$(touch pwned)/lib"],
                                                                    "append": ["$HOME/lib`id`"]}})
    text = _render(site, tmp_path, account="p")
    line = next(x for x in text.splitlines() if x.startswith("export LD_LIBRARY_PATH="))
    env = {"PATH": os.environ["PATH"], "HOME": "/home/u", "LD_LIBRARY_PATH": "/old"}
    out = subprocess.run(["bash", "-c", f"cd {tmp_path} && {line} && printf %s \"$LD_LIBRARY_PATH\""],
                         capture_output=True, text=True, env=env)
    assert out.stdout == "/opt/$(touch pwned)/lib:/old:/home/u/lib`id`"
    assert not (tmp_path / "pwned").exists()
    env.pop("LD_LIBRARY_PATH")
    out = subprocess.run(["bash", "-uc", f"{line} && printf %s \"$LD_LIBRARY_PATH\""], capture_output=True, text=True, env=env)
    assert out.returncode == 0 and out.stdout == "/opt/$(touch pwned)/lib:/home/u/lib`id`", "no stray ':' when unset"


def test_a_project_path_takes_the_account_or_the_one_slurm_charged(tmp_path):
    site = load_site("frontier")
    assert "/lustre/orion/prj1/scratch/\"${USER}\"" in _render(site, tmp_path, account="prj1")
    # no account given: Slurm sets the one it charged in every job
    assert '/lustre/orion/"${SLURM_JOB_ACCOUNT}"/scratch/"${USER}"' in _render(site, tmp_path)
    plan = make_plan(site, JobRequest())
    with pytest.raises(HpcdlError, match=r"account"):
        render_job_script(site, plan, {}, JobOptions(account="../etc"))
    polaris = load_site_file(POLARIS)  # PBS sets no such variable: the account must be given
    with pytest.raises(HpcdlError, match=r"account: site 'polaris' names its filesystems.scratch by project"):
        render_job_script(polaris, make_plan(polaris, JobRequest()), {}, JobOptions())


def test_gpu_aware_cray_mpich_comes_with_its_gtl_module_or_not_at_all(tmp_path):
    site = load_site("frontier")
    plan = make_plan(site, JobRequest())
    assert plan.env["MPICH_GPU_SUPPORT_ENABLED"] == "1" and plan.modules == ("craype-accel-amd-gfx90a", "rocm")
    bare = _profile(tmp_path, SHIPPED / "frontier.yaml", **{"modules.gpu_mpi": []})
    plan = make_plan(bare, JobRequest())
    assert "MPICH_GPU_SUPPORT_ENABLED" not in plan.env and plan.modules == ()
    assert any("no GTL module" in n for n in plan.notes)


def test_container_runtime_modules_reach_podman_hpc_and_shifter(tmp_path):
    perlmutter = load_site("perlmutter")
    assert "podman-hpc run --rm --mpi --gpu --nccl" in _render(perlmutter, tmp_path)
    shifter = perlmutter.model_copy(update={"runtime": "shifter", "container": perlmutter.container.model_copy(
        update={"gpu_modules": ("gpu", "nccl-plugin")})})
    assert "shifter --image=" in _render(shifter, tmp_path) and "--module=gpu,nccl-plugin" in _render(shifter, tmp_path)


def test_every_rank_sees_every_gpu_and_picks_its_own():
    lassen = make_plan(load_site("lassen"), JobRequest(nodes=2, distributed="horovod"))
    assert list(lassen.launcher_argv) == ["jsrun", "-n2", "-a4", "-c32", "-g4", "-r1", "-bpacked:8", "--smpiargs=-gpu"]
    assert [r.env["HPCDL_GPU"] for r in lassen.local_ranks()] == ["0", "1", "2", "3"]
    assert all("CUDA_VISIBLE_DEVICES" not in r.env for r in lassen.ranks)


def test_the_trainer_drives_the_gpu_the_plan_names(monkeypatch):
    torch = pytest.importorskip("torch")
    from hpcdl.train.backends.pytorch.steps import choose_device
    from hpcdl.train.ranks import RankInfo

    picked = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: picked.append(d.index))
    monkeypatch.setenv("HPCDL_GPU", "3")
    recipe = type("R", (), {"device": "auto"})()
    me = RankInfo(rank=1, world_size=2, local_rank=1, launcher="srun")
    assert choose_device(recipe, me).index == 3 and picked == [3]


def test_slingshot_gpu_jobs_without_the_nccl_plugin_are_refused(tmp_path):
    # Frontier's own image (mi250x-rocm) carries the plugin; an image of the site's own does not say so
    bare = _profile(tmp_path, SHIPPED / "frontier.yaml", env={}, **{"defaults.image": "/sw/images/site-own.sif"})
    with pytest.raises(HpcdlError, match="^net plugin: 2 nodes of frontier mi250x GPUs over Slingshot"):
        make_plan(bare, JobRequest(nodes=2))
    assert make_plan(load_site("frontier"), JobRequest(nodes=2)).runtime.net_plugin_from


def test_site_directives_are_written_for_the_sites_own_scheduler(tmp_path):
    site = load_site("cori-knl")
    text = _render(site, tmp_path, image="docker:sfarrell/cosmoflow-cpu-mpich:latest")
    assert "#SBATCH -S 2" in text.splitlines()
    plan = make_plan(site, JobRequest(image="docker:sfarrell/cosmoflow-cpu-mpich:latest"))
    assert "-S 2" not in render_job_script(site, plan, {}, JobOptions(), scheduler="pbs")


def test_a_centre_that_turns_gpu_aware_cray_mpich_off_keeps_its_zero(tmp_path):
    # CSCS: with NCCL "explicitly set MPICH_GPU_SUPPORT_ENABLED=0"; the plan dropped it for want of a GTL module
    site = _profile(tmp_path, POLARIS, **{"env.MPICH_GPU_SUPPORT_ENABLED": "0", "modules.gpu_mpi": []})
    plan = make_plan(site, JobRequest(nodes=1))
    assert plan.env["MPICH_GPU_SUPPORT_ENABLED"] == "0" and not plan.modules
    # and with the GTL module named, the centre's 0 still wins and the module is not loaded for nothing
    site = _profile(tmp_path, POLARIS, **{"env.MPICH_GPU_SUPPORT_ENABLED": "0"})
    plan = make_plan(site, JobRequest(nodes=1))
    assert plan.env["MPICH_GPU_SUPPORT_ENABLED"] == "0" and "craype-accel-nvidia80" not in plan.modules


@pytest.mark.parametrize("gpu,says", [
    ({"model": "Intel Data Center GPU Max 1550", "vendor": "intel"}, r"gpus\.0\.vendor: 'intel' GPUs are outside hpcdl's scope"),
    ({"model": "Intel Data Center GPU Max 1550"}, r"gpus\.0: vendor: model .* is an Intel GPU, outside hpcdl's scope"),
    ({"model": "AMD Instinct MI250X GCD"}, r"gpus\.0: vendor: model .* is an AMD GPU but vendor is 'nvidia'; set vendor: amd"),
    # a bare model number says the vendor as well as the brand does
    ({"model": "MI250X"}, r"gpus\.0: vendor: model 'MI250X' is an AMD GPU but vendor is 'nvidia'; set vendor: amd"),
    ({"model": "A100-SXM4-40GB", "vendor": "amd"}, r"model 'A100-SXM4-40GB' is an NVIDIA GPU but vendor is 'amd'"),
    ({"model": "GH200 120GB", "vendor": "amd"}, r"is an NVIDIA GPU but vendor is 'amd'"),
])
def test_a_gpu_hpcdl_does_not_drive_or_a_model_that_contradicts_vendor_is_refused(tmp_path, gpu, says):
    data = yaml.safe_load(POLARIS.read_text())
    data["node_kinds"]["a100"]["gpus"] = [{**gpu, "socket": 0}] * 4
    (tmp_path / "polaris.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(HpcdlError) as err:
        load_site_file(tmp_path / "polaris.yaml")
    message = str(err.value)
    assert re.search(says, message), message
    assert message.count("outside hpcdl's scope") + message.count("set vendor") == 1, "said once"
    assert "(and 3 more like it)" in message


def test_gpus_that_come_with_the_node_are_not_requested_on_any_scheduler(tmp_path):
    # TACC: "--gres | TACC does not support this option"; the ranks still get their GPUs from plan.json
    site = _profile(tmp_path, POLARIS, **{"defaults.gpu_request": "none"})
    text = _render(site, tmp_path, account="MyProj")
    select = next(line for line in text.splitlines() if line.startswith("#PBS -l select="))
    assert "ngpus" not in select
    plan = make_plan(site, JobRequest(nodes=1))
    assert [r.env["CUDA_VISIBLE_DEVICES"] for r in plan.ranks] == ["0", "1", "2", "3"]
    with pytest.raises(HpcdlError, match="defaults.gpu_request: an LSF setting, but the scheduler is pbs"):
        _profile(tmp_path, POLARIS, **{"defaults.gpu_request": "rusage"})

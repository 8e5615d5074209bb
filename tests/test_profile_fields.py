"""What a profile can say about a real machine, rendered: extra directives, PBS job-wide
resources, `module use`, path lists the job shell expands, Cray PALS, container-runtime
modules, GPU-aware Cray MPICH with its GTL, every-rank-sees-every-GPU, {project} paths.
Each rendered script passes shellcheck and bash -n, and no profile value runs."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import hpcdl, require_tool, shellcheck

from hpcdl.cluster import NodeShape
from hpcdl.errors import HpcdlError
from hpcdl.plan import JobRequest, make_plan
from hpcdl.render.jobscript import JobOptions, render_job_script
from hpcdl.sites import load_site
from hpcdl.sites.registry import SHIPPED, load_site_file

LMOD_INIT = "/usr/share/lmod/lmod/init/bash"
POLARIS = Path(__file__).parents[1] / "platform" / "hpcdl" / "sites" / "profiles" / "polaris.yaml"


def _render(site, tmp_path, nodes=2, image=None, net_plugin=None, **options) -> str:
    plan = make_plan(site, JobRequest(nodes=nodes, image=image, net_plugin=net_plugin))
    text = render_job_script(site, plan, {}, JobOptions(**options))
    path = tmp_path / f"{site.name}.sh"
    path.write_text(text)
    shellcheck(path)
    return text


# CSD3's shipped line is Open MPI's count with -npernode and gpu-local ranks; tests that take its profile as a base
# for another line start from hpcdl's restated one
CSD3_RESTATED = {"launch.mpirun_layout": "restate", "launch.rank_cpus": "plan", "launch.ranks_per_node_option": None}


# volta-x86's shipped line names no binding of hpcdl's (launch.cpu_bind_default: unstated, launch.rank_cpus: gpu-local,
# no page placing its GPUs on sockets); tests that take its node (2 sockets of 20 cores, 4 GPUs, two a socket) as a base
# for hpcdl's own binding words (--cpu-bind, --distribution, masks) start from plan-bound cores, its line before
VOLTA_PLAN_BOUND = {"launch.cpu_bind_default": None, "launch.rank_cpus": "plan"}


def _volta_plan_bound(tmp_path) -> Path:
    """volta-x86 with VOLTA_PLAN_BOUND, written apart from the files _profile writes in tmp_path."""
    base = tmp_path / "plan-bound"
    base.mkdir(exist_ok=True)
    _profile(base, SHIPPED / "volta-x86.yaml", **VOLTA_PLAN_BOUND)
    return base / "volta-x86.yaml"


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


def test_a_path_list_takes_one_folder_per_entry(tmp_path):
    # ':' separates a path list's folders: '/opt/a:/opt/b' would be two, and every container runtime's
    # bind (apptainer --bind, ch-run -b, podman --volume) splits on it
    with pytest.raises(HpcdlError, match=r"env\.LD_LIBRARY_PATH.*'/opt/a:/opt/b': one folder each"):
        _profile(tmp_path, POLARIS, **{"env.LD_LIBRARY_PATH": {"prepend": ["/opt/a:/opt/b"]}})

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


@pytest.mark.parametrize("account", ["bbka", "bbka-dtai-gh", None])
def test_a_project_path_takes_the_project_not_the_node_kinds_account(tmp_path, account):
    # NCSA DeltaAI charges the project's GH200 account, "abcd-dtai-gh" ($ accounts, Job Accounting), and its folders
    # are the project's own: "a user ... that has an allocated project with a local project serial code abcd will
    # see ... /work/hdd/abcd" (Data Management). The folder is the project, whichever way the account is given:
    # the project, the charged account, or none (Slurm's $SLURM_JOB_ACCOUNT, the charged one, less the suffix)
    site = load_site("deltaai")
    text = _render(site, tmp_path, nodes=1, account=account)
    assert "#SBATCH --account=bbka-dtai-gh" in text or account is None
    line = next(x for x in text.splitlines() if x.startswith("srun "))
    bind = line.split("--bind ", 1)[1].split()[0]
    env = {"PATH": os.environ["PATH"], "USER": "auser", "SLURM_JOB_ACCOUNT": "bbka-dtai-gh"}
    out = subprocess.run(["bash", "-uc", f"printf %s {bind}"], capture_output=True, text=True, env=env)
    assert out.returncode == 0 and out.stdout == "/work/hdd/bbka/auser", (bind, out.stderr)
    # a value in the shell's own suffix-removal form stays inert: only the suffix word, no pattern, no command
    from hpcdl.shell import path_with_variables

    hostile = path_with_variables("/x/${SLURM_JOB_ACCOUNT%$(touch pwned)}/${A%*}")
    out = subprocess.run(["bash", "-c", f"cd {tmp_path} && printf %s {hostile}"], capture_output=True, text=True,
                         env={"PATH": os.environ["PATH"], "SLURM_JOB_ACCOUNT": "p", "A": "a"})
    assert not (tmp_path / "pwned").exists() and "$(touch pwned)" in out.stdout


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
    # LBANN's resource set holds the node's every core (--cpu_per_rs ALL_CPUS): the ranks' 4 x 8 cores leave
    # 8 idle, and a set of 32 cores would be jsrun's choice of 32, not the plan's
    assert list(lassen.launcher_argv) == ["jsrun", "-n2", "-a4", "-cALL_CPUS", "-g4", "-r1", "-bpacked:8", "--smpiargs=-gpu"]
    assert [r.env["HPCDL_GPU"] for r in lassen.local_ranks()] == ["0", "1", "2", "3"]
    assert all("CUDA_VISIBLE_DEVICES" not in r.env for r in lassen.ranks)
    # where the ranks use every core, the count, as OLCF writes it for Summit (-c42)
    summit = make_plan(load_site("summit"), JobRequest(nodes=2))
    assert "-c42" in summit.launcher_argv and "-r1" in summit.launcher_argv


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
    # every GPU still goes to one rank (Polaris numbers ranks by their cores: local rank 0 drives GPU 3)
    assert [r.env["CUDA_VISIBLE_DEVICES"] for r in plan.ranks] == ["3", "2", "1", "0"]
    with pytest.raises(HpcdlError, match="defaults.gpu_request: rusage is an LSF setting, but the scheduler is pbs"):
        _profile(tmp_path, POLARIS, **{"defaults.gpu_request": "rusage"})


# --- what a profile can say about charging, requesting and launching (issue 26) ---------------------

GADI = SHIPPED / "gadi.yaml"
PERLMUTTER = SHIPPED / "perlmutter.yaml"


def test_pbs_job_wide_totals_grow_with_the_nodes_and_the_project_fills_the_storage_list(tmp_path):
    site = load_site_file(GADI)
    text = _render(site, tmp_path, nodes=3, account="a00")
    lines = text.splitlines()
    for line in ("#PBS -P a00", "#PBS -l ncpus=144", "#PBS -l ngpus=12", "#PBS -l mem=1146GB", "#PBS -l jobfs=600GB",
                 "#PBS -l storage=gdata/dk92+scratch/a00+gdata/a00"):
        assert line in lines, line
    assert not any(line.startswith(("#PBS -l select", "#PBS -l place", "#PBS -A")) for line in lines)
    with pytest.raises(HpcdlError, match=r"^account: site 'gadi' names its filesystems.scratch by project"):
        _render(site, tmp_path)
    with pytest.raises(HpcdlError, match=r"^account: site 'gadi' names its project in defaults.job_resources.storage "
                                         r"\(gdata/dk92\+scratch/\{project\}\+gdata/\{project\}\); give the project"):
        _render(_profile(tmp_path, GADI, **{"filesystems.scratch": "/scratch/$USER"}), tmp_path)
    # a select site puts a node's own resources into its chunk, as they are
    chunked = _profile(tmp_path, GADI, **{"defaults.pbs_request": "select"})
    lines = _render(chunked, tmp_path, nodes=2, account="a00").splitlines()
    assert "#PBS -l select=2:ncpus=48:mpiprocs=4:ompthreads=12:ngpus=4:jobfs=200GB:mem=382GB" in lines  # (the copy sorts keys)
    assert "#PBS -l ncpus=96" not in lines


def test_a_pbs_chunk_on_a_node_the_job_shares_asks_the_nodes_resources_in_its_share_of_the_gpus(tmp_path):
    # Imperial CX3: "`mem` This is the amount of memory to allocate to the job per compute node" (default 1GB) and
    # PBS puts jobs "co-located on the execution node"; a one-GPU job asking the node's 920gb would hold back the
    # other seven GPUs' jobs, so on a node the job shares (exclusive: false) a chunk asks its GPUs' share
    def chunk(site, nodes=1, **request):
        plan = make_plan(site, JobRequest(nodes=nodes, **request))
        text = render_job_script(site, plan, {}, JobOptions(account="a00"))
        return next(line for line in text.splitlines() if line.startswith("#PBS -l select="))

    per_node = {"node_kinds.gpuvolta.defaults.job_resources_per_node": {"mem": "380GB"}}
    shared = _profile(tmp_path, GADI, **{"defaults.pbs_request": "select", "defaults.exclusive": False}, **per_node)
    assert chunk(shared, ranks_per_node=1).endswith(":ngpus=1:mem=95GB")
    # and its GPU's share of the cores, not its socket's 24 (NCAR Casper, "where nodes are typically shared and
    # individual CPU cores are scheduled"): the cores of the socket's other GPU are another job's
    assert chunk(shared, ranks_per_node=1).startswith("#PBS -l select=1:ncpus=12:mpiprocs=1:ompthreads=12:")
    assert chunk(shared, nodes=2) == "#PBS -l select=2:ncpus=48:mpiprocs=4:ompthreads=12:ngpus=4:mem=380GB"
    # a job that takes its nodes whole asks all of each, whatever share of the GPUs it drives
    whole = _profile(tmp_path, GADI, **{"defaults.pbs_request": "select"}, **per_node)
    assert chunk(whole, ranks_per_node=1).endswith(":ngpus=1:mem=380GB")
    # and all of its CPUs, though its one rank runs on a socket's 24 (NCAR: "Request all ncpus when running on
    # exclusive nodes ... users should still request access to all CPUs, but only use a subset")
    assert chunk(whole, ranks_per_node=1).startswith("#PBS -l select=1:ncpus=48:mpiprocs=1:ompthreads=24:")
    # a CPU job on a shared node asks the share of the node's CPUs it takes: one rank on one of two sockets
    cpu = chunk(shared, node_kind="normal", ranks_per_node=1)
    assert cpu.startswith("#PBS -l select=1:ncpus=24:") and cpu.endswith(":jobfs=200GB:mem=96GB"), cpu


def test_an_account_per_node_kind_takes_the_kinds_suffix(tmp_path):
    site = _profile(tmp_path, PERLMUTTER, **{"node_kinds.gpu.defaults.account_suffix": "_g"})
    assert "#SBATCH --account=m1234_g" in _render(site, tmp_path, account="m1234").splitlines()
    assert "#SBATCH --account=m1234_g" in _render(site, tmp_path, account="m1234_g").splitlines()
    both = _profile(tmp_path, PERLMUTTER, **{"node_kinds.gpu.defaults.account_suffix": "-gpu",
                                              "node_kinds.cpu.defaults.account_suffix": "-cpu"})
    with pytest.raises(HpcdlError, match=r"^account: 'm1234-cpu' is the account of node kind 'cpu'"):
        _render(both, tmp_path, account="m1234-cpu")


def test_qos_is_given_at_render_and_only_slurm_takes_it(tmp_path):
    site = load_site_file(PERLMUTTER)
    assert "#SBATCH --qos=debug" in _render(site, tmp_path, qos="debug").splitlines()
    assert "#SBATCH --qos=regular" in _render(site, tmp_path).splitlines()
    with pytest.raises(HpcdlError, match=r"^qos: 'debug' is a Slurm quality of service; pbs jobs have none"):
        _render(load_site_file(GADI), tmp_path, qos="debug", account="a00")


@pytest.mark.parametrize("style,directive,srun", [
    ("gres", "#SBATCH --gres=gpu:4", "--gres=gpu:4"),
    ("gpus-per-task", "#SBATCH --gpus-per-task=1", "--gpus-per-task=1"),
    ("gpus-per-node", "#SBATCH --gpus-per-node=4", "--gpus-per-node=4"),
])
def test_the_gpu_request_takes_the_form_the_centre_counts(tmp_path, style, directive, srun):
    site = _profile(tmp_path, PERLMUTTER, **{"defaults.gpu_request": style})
    text = _render(site, tmp_path)
    assert directive in text.splitlines()
    launch = next(line for line in text.splitlines() if line.startswith("srun "))
    assert f" {srun} " in launch
    assert sum(w.startswith(("--gres", "--gpus-per-")) for w in launch.split()) == 1


@pytest.mark.parametrize("style, directive, srun", [
    ("gres", "#SBATCH --gres=gpu:a100:4", "--gres=gpu:a100:4"),
    ("gpus-per-task", "#SBATCH --gpus-per-task=a100:1", "--gpus-per-task=a100:1"),
    ("gpus-per-node", "#SBATCH --gpus-per-node=a100:4", "--gpus-per-node=a100:4"),
])
def test_the_gpu_request_names_the_gres_type_the_centre_names(tmp_path, style, directive, srun):
    # CSC Mahti: "#SBATCH --gres=gpu:a100:<number_of_gpus_per_node>", Puhti gpu:v100:N (Slurm: [type:]number
    # in --gres, --gpus-per-node and --gpus-per-task alike)
    site = _profile(tmp_path, PERLMUTTER, **{"defaults.gpu_request": style, "node_kinds.gpu.defaults.gpu_type": "a100"})
    text = _render(site, tmp_path)
    assert directive in text.splitlines()
    assert f" {srun} " in next(line for line in text.splitlines() if line.startswith("srun "))
    with pytest.raises(HpcdlError, match=r"node_kinds.gpu.defaults.gpu_type"):
        _profile(tmp_path, PERLMUTTER, **{"node_kinds.gpu.defaults.gpu_type": "a100:4"})
    with pytest.raises(HpcdlError, match=r"node_kinds.cpu.*defaults.gpu_type: a100 but the node kind has no GPUs"):
        _profile(tmp_path, PERLMUTTER, **{"node_kinds.cpu.defaults.gpu_type": "a100"})


def test_a_job_asks_the_node_memory_that_comes_with_its_gpus(tmp_path):
    # MPCDF Raven's GPU job: "--gres=gpu:a100:1 --cpus-per-task=18 --mem=125000" on a shared node, ":2 ... 250000",
    # ":4 ... --cpus-per-task=72 --mem=500000" on a full one: the memory grows with the GPUs the job takes per node
    site = _profile(tmp_path, PERLMUTTER, **{"node_kinds.gpu.defaults.mem_per_gpu": "125000"})
    assert "#SBATCH --mem=500000" in _render(site, tmp_path).splitlines()
    one = render_job_script(site, make_plan(site, JobRequest(nodes=1, ranks_per_node=1)), {}, JobOptions()).splitlines()
    assert "#SBATCH --mem=125000" in one
    # a unit is kept, the number multiplied; a job on a kind that names none asks no --mem
    site = _profile(tmp_path, PERLMUTTER, **{"node_kinds.gpu.defaults.mem_per_gpu": "60G"})
    assert "#SBATCH --mem=240G" in _render(site, tmp_path).splitlines()
    assert not any(x.startswith("#SBATCH --mem") for x in _render(_profile(tmp_path, PERLMUTTER), tmp_path).splitlines())
    with pytest.raises(HpcdlError, match=r"node_kinds.gpu.defaults.mem_per_gpu"):
        _profile(tmp_path, PERLMUTTER, **{"node_kinds.gpu.defaults.mem_per_gpu": "125 GB"})
    with pytest.raises(HpcdlError, match=r"node_kinds.cpu.*defaults.mem_per_gpu: 1000 but the node kind has no GPUs"):
        _profile(tmp_path, PERLMUTTER, **{"node_kinds.cpu.defaults.mem_per_gpu": "1000"})
    with pytest.raises(HpcdlError,
                       match=r"node_kinds.gpuvolta.defaults.mem_per_gpu: Slurm's --mem per GPU, but the scheduler is pbs"):
        _profile(tmp_path, GADI, **{"node_kinds.gpuvolta.defaults.mem_per_gpu": "95000"})


def test_the_memory_a_jobs_gpus_ask_is_capped_at_the_most_a_job_may_ask_of_a_node(tmp_path):
    # UQ RCC Bunya: "appropriate CPU resource requests per GPU": 700000 MB with each of a node's three H100, and "Ask
    # for 2000000M to get the maximum memory on a epyc3 standard node": three GPUs' 2100000 would never be allocated
    site = _profile(tmp_path, PERLMUTTER, **{"node_kinds.gpu.defaults.mem_per_gpu": "700000",
                                             "node_kinds.gpu.defaults.max_mem": "2000000"})
    assert "#SBATCH --mem=2000000" in _render(site, tmp_path).splitlines()
    one = render_job_script(site, make_plan(site, JobRequest(nodes=1, ranks_per_node=1)), {}, JobOptions()).splitlines()
    assert "#SBATCH --mem=700000" in one
    # the units are Slurm's, compared as such: 4 x 300G is 1200G, more than 1T, and 4 x 200G (800G) is not
    site = _profile(tmp_path, PERLMUTTER, **{"node_kinds.gpu.defaults.mem_per_gpu": "300G",
                                             "node_kinds.gpu.defaults.max_mem": "1T"})
    assert "#SBATCH --mem=1T" in _render(site, tmp_path).splitlines()
    site = _profile(tmp_path, PERLMUTTER, **{"node_kinds.gpu.defaults.mem_per_gpu": "200G",
                                             "node_kinds.gpu.defaults.max_mem": "1T"})
    assert "#SBATCH --mem=800G" in _render(site, tmp_path).splitlines()
    with pytest.raises(HpcdlError, match=r"node_kinds.gpu.*defaults.max_mem: 2000000 caps the memory mem_per_gpu asks"):
        _profile(tmp_path, PERLMUTTER, **{"node_kinds.gpu.defaults.max_mem": "2000000"})
    with pytest.raises(HpcdlError, match=r"node_kinds.gpu.defaults.max_mem"):
        _profile(tmp_path, PERLMUTTER, **{"node_kinds.gpu.defaults.mem_per_gpu": "700000",
                                          "node_kinds.gpu.defaults.max_mem": "2 TB"})


def test_a_job_on_every_gpu_of_a_node_asks_all_its_memory_where_the_centre_says_mem_0(tmp_path):
    # NREL Kestrel: "To request all of the memory available on the GPU node, use --mem=0", and half a node is "2
    # GPUs, and 180G of RAM": 90G a GPU, whose four shares (360G) pass the node's "about 350G of usable RAM"
    site = _profile(tmp_path, PERLMUTTER, **{"node_kinds.gpu.defaults.mem_per_gpu": "90G",
                                             "node_kinds.gpu.defaults.max_mem": "0"})
    assert "#SBATCH --mem=0" in _render(site, tmp_path).splitlines()
    for ranks, mem in ((1, "90G"), (2, "180G"), (3, "270G")):
        lines = render_job_script(site, make_plan(site, JobRequest(nodes=1, ranks_per_node=ranks)), {},
                                  JobOptions()).splitlines()
        assert f"#SBATCH --mem={mem}" in lines
    # 0 is the only amount without a number of units; 00 or 0G is no Slurm word for it
    for wrong in ("00", "0G"):
        with pytest.raises(HpcdlError, match=r"node_kinds.gpu.defaults.max_mem"):
            _profile(tmp_path, PERLMUTTER, **{"node_kinds.gpu.defaults.mem_per_gpu": "90G",
                                              "node_kinds.gpu.defaults.max_mem": wrong})

def test_the_gpu_request_may_be_the_jobs_total(tmp_path):
    # PSC Bridges-2 asks the job's GPUs, typed, with sbatch's --gpus ("Specify the total number of GPUs
    # required for the job", sbatch(1)): "#SBATCH -N 2", "#SBATCH --gpus=v100-32:16" (PSC staff's
    # pt_horovod_multi_nodes.sbatch); Perlmutter's 2 nodes of 4 GPUs ask 8, srun the step's 8 alike
    site = _profile(tmp_path, PERLMUTTER, **{"defaults.gpu_request": "gpus", "node_kinds.gpu.defaults.gpu_type": "a100"})
    lines = _render(site, tmp_path).splitlines()
    assert "#SBATCH --gpus=a100:8" in lines and not any(x.startswith("#SBATCH --gpus-per-") for x in lines)
    launch = next(line for line in lines if line.startswith("srun "))
    assert " --gpus=a100:8 " in launch and "--gpus-per-" not in launch
    # Slurm may lay a job's total out unevenly over its nodes: a job of several nodes that leaves GPUs of each
    # node unasked cannot say how many each node gets as a total, so it asks them per node (Slurm's [type:]N
    # there too), header and srun alike, and the plan says why (a validation suite's 2 x 1 collectives job)
    plan = make_plan(site, JobRequest(nodes=2, ranks_per_node=2))
    assert any("defaults.gpu_request: gpus would ask the job's 4 GPUs as one total" in n for n in plan.notes)
    lines = render_job_script(site, plan, {}, JobOptions()).splitlines()
    assert "#SBATCH --gpus-per-node=a100:2" in lines and not any(x.startswith("#SBATCH --gpus=") for x in lines)
    assert "--gpus-per-node=a100:2" in plan.launcher_argv and not any(w.startswith("--gpus=") for w in plan.launcher_argv)
    one = make_plan(site, JobRequest(nodes=1, ranks_per_node=2))
    assert "#SBATCH --gpus=a100:2" in render_job_script(site, one, {}, JobOptions()).splitlines()
    with pytest.raises(HpcdlError, match=r"defaults.gpu_request: gpus is a Slurm setting, but the scheduler is pbs"):
        _profile(tmp_path, GADI, **{"defaults.gpu_request": "gpus"})


def test_mpirun_keeps_the_centres_bind_to_none_and_its_mapping(tmp_path):
    # PSC's Bridges-2 jobs: "mpirun -np 16 -H ... -bind-to none -map-by slot -x LD_LIBRARY_PATH -x PATH ..."
    # (pscedu/bridges2-examples pt_horovod_multi_nodes.sbatch): mpirun binds no rank, and each rank binds itself
    # to the plan's cores from plan.json, so hpcdl writes no --bind-to and no PE= of its own; the centre's
    # -map-by slot fills each node's slots, which the header's --ntasks-per-node makes the plan's ranks per node
    site = _profile(tmp_path, GADI, **{"launch.args": ["-bind-to", "none", "-map-by", "slot"]})
    argv = make_plan(site, JobRequest(nodes=2)).launcher_argv
    assert argv[:3] == ("mpirun", "-np", "8") and argv[-4:] == ("-bind-to", "none", "-map-by", "slot")
    assert "--bind-to" not in argv and "--map-by" not in argv and not any("PE=" in w for w in argv)
    # without a mapping of its own, the ranks per node are still said, unbound
    site = _profile(tmp_path, GADI, **{"launch.args": ["--bind-to", "none"]})
    argv = make_plan(site, JobRequest(nodes=2)).launcher_argv
    assert ("--map-by", "ppr:4:node") == argv[3:5] and argv.count("--bind-to") == 1
    # any other binding is the plan's to say
    with pytest.raises(HpcdlError, match=r"launch.args: --bind-to socket: hpcdl writes the binding"):
        _profile(tmp_path, GADI, **{"launch.args": ["--bind-to", "socket"]})


def test_slurm_gpu_request_styles_are_refused_elsewhere(tmp_path):
    with pytest.raises(HpcdlError, match=r"defaults.gpu_request: gres is a Slurm setting, but the scheduler is pbs"):
        _profile(tmp_path, GADI, **{"defaults.gpu_request": "gres"})
    with pytest.raises(HpcdlError,
                       match=r"node_kinds.gpuvolta.defaults.gpu_type: Slurm's GRES type, but the scheduler is pbs"):
        _profile(tmp_path, GADI, **{"node_kinds.gpuvolta.defaults.gpu_type": "v100"})


def test_a_centres_launcher_wrapper_and_mpi_plugin(tmp_path):
    site = _profile(tmp_path, GADI, **{"launch.command": ["/apps/site/bin/mpirun"], "launch.wrapper": ["numa-wrap"]})
    line = next(line for line in _render(site, tmp_path, account="a00").splitlines() if " hpcdl train " in line)
    assert line.startswith("/apps/site/bin/mpirun -np 8 --map-by ppr:4:node:PE=12 --bind-to core ")
    assert " numa-wrap hpcdl train " in line
    # srun: the centre's PMI plugin, or none at all where its line is a plain srun
    volta = SHIPPED / "volta-x86.yaml"
    assert "--mpi=pmix" in make_plan(load_site_file(volta), JobRequest()).launcher_argv
    plain = _profile(tmp_path, volta, **{"launch.srun_mpi": "default"})
    assert not any(w.startswith("--mpi") for w in make_plan(plain, JobRequest()).launcher_argv)
    pmi2 = _profile(tmp_path, volta, **{"launch.srun_mpi": "pmi2"})
    assert "--mpi=pmi2" in make_plan(pmi2, JobRequest()).launcher_argv
    with pytest.raises(HpcdlError, match=r"launch.srun_mpi: launch.args name a --mpi too"):
        _profile(tmp_path, volta, **{"launch.srun_mpi": "pmi2", "launch.args": ["--mpi=pmix"]})


def test_a_job_goes_to_the_queue_that_takes_its_size_and_a_larger_one_is_refused(tmp_path):
    site = load_site_file(SHIPPED / "frontera.yaml")
    assert "#SBATCH --partition=small" in _render(site, tmp_path, nodes=2).splitlines()
    assert "#SBATCH --partition=normal" in _render(site, tmp_path, nodes=3).splitlines()
    assert "#SBATCH --partition=flex" in _render(site, tmp_path, nodes=3, partition="flex").splitlines()
    big = _profile(tmp_path, SHIPPED / "frontera.yaml", **{"defaults.max_time": None})
    with pytest.raises(HpcdlError, match=r"^nodes: 600 is more than any queue of site 'frontera' takes "
                                         r"\(defaults.partition_by_nodes: at most 512 in normal\)"):
        render_job_script(big, make_plan(big, JobRequest(nodes=600)), {}, JobOptions())
    with pytest.raises(HpcdlError, match=r"defaults.partition_by_nodes: list the queues from the smallest jobs up"):
        _profile(tmp_path, SHIPPED / "frontera.yaml", **{"defaults.partition_by_nodes": [
            {"max_nodes": 512, "partition": "normal"}, {"max_nodes": 2, "partition": "small"}]})


def test_a_node_kinds_own_queues_by_size_route_its_jobs(tmp_path):
    # A node kind's defaults.partition_by_nodes (docs/sites.md: "a node kind's own list replaces the site's")
    # reached the renderer as plain dicts and stopped every job with an AttributeError
    site = _profile(tmp_path, SHIPPED / "volta-x86.yaml", **{
        "node_kinds.v100.defaults": {"partition_by_nodes": [{"max_nodes": 2, "partition": "tiny", "max_time": "12:00:00"},
                                                            {"partition": "wide"}]}})
    assert "#SBATCH --partition=tiny" in _render(site, tmp_path, nodes=2).splitlines()
    assert "#SBATCH --partition=wide" in _render(site, tmp_path, nodes=3).splitlines()
    with pytest.raises(HpcdlError, match=r"longer than queue 'tiny'"):
        render_job_script(site, make_plan(site, JobRequest(nodes=1)), {}, JobOptions(time="13:00:00"))


def test_a_queue_by_size_may_name_the_qos_its_jobs_must_ask(tmp_path):
    # NHR@FAU Alex (doc.nhr.fau.de/clusters/alex/): a one-node job names no qos, a multi-node A100 job
    # "#SBATCH --nodes=2 ... #SBATCH --gres=gpu:a100:8 #SBATCH --qos=a100multi"; a queue by size could only
    # name a partition, and a site-wide qos went on every job
    site = _profile(tmp_path, SHIPPED / "volta-x86.yaml", **{
        "node_kinds.v100.defaults": {"partition_by_nodes": [{"max_nodes": 1}, {"qos": "a100multi"}]}})
    one, two = (_render(site, tmp_path, nodes=n).splitlines() for n in (1, 2))
    assert not any(line.startswith("#SBATCH --qos") for line in one)
    assert "#SBATCH --qos=a100multi" in two
    # the queue is the site's where the size names none; a qos given at render wins
    assert "#SBATCH --partition=" + site.defaults.partition in two
    assert "#SBATCH --qos=debug" in _render(site, tmp_path, nodes=2, qos="debug").splitlines()


def test_a_header_that_keeps_the_submitting_environment_out_lets_srun_carry_the_scripts(tmp_path):
    # sbatch's --export=NONE reaches every srun of the job through SLURM_EXPORT_ENV, which would start the ranks
    # without the script's exports (MASTER_ADDR, OMP_NUM_THREADS, ...); NHR@FAU's job scripts
    # (doc.nhr.fau.de/batch-processing/batch_system_slurm/): "#SBATCH --export=NONE", then "unset SLURM_EXPORT_ENV
    # # Enable script environment export to srun"
    for directive, unsets in (("--export=NONE", True), ("--export=HOME,PATH", True), ("--export=ALL", False)):
        site = _profile(tmp_path, SHIPPED / "volta-x86.yaml", **{"defaults.directives": [directive]})
        lines = _render(site, tmp_path, nodes=1).splitlines()
        assert ("unset SLURM_EXPORT_ENV" in lines) is unsets, directive
        if unsets:
            assert lines.index("unset SLURM_EXPORT_ENV") < next(i for i, l in enumerate(lines) if l.startswith("srun "))
    assert "unset SLURM_EXPORT_ENV" not in _render(load_site_file(SHIPPED / "volta-x86.yaml"), tmp_path, nodes=1)


def test_a_job_that_keeps_the_submitting_environment_out_loads_hpcdls_own_module_itself(tmp_path):
    # Under "#SBATCH --export=NONE" (NHR@FAU's scripts, which then "module load <modules>" themselves) the batch
    # shell gets nothing of the submitting one, hpcdl's module neither: the job stopped at HPCDL_IMAGE_DIR unset
    alex = load_site_file(SHIPPED / "alex.yaml")
    plan = make_plan(alex, JobRequest(nodes=1))
    lines = render_job_script(alex, plan, {}, JobOptions(hpcdl_module="hpcdl/0.1.0")).splitlines()
    assert "module load hpcdl/0.1.0" in lines
    assert lines.index("module load hpcdl/0.1.0") < lines.index(next(l for l in lines if l.startswith(": \"${HPCDL_IMAGE_DIR")))
    assert "module load hpcdl/0.1.0" not in render_job_script(alex, plan, {}, JobOptions()).splitlines()
    # a header that lets the environment through keeps the module the job inherits, and loads none
    raven = load_site_file(SHIPPED / "raven.yaml")
    assert "module load hpcdl/0.1.0" not in render_job_script(
        raven, make_plan(raven, JobRequest(nodes=1)), {}, JobOptions(hpcdl_module="hpcdl/0.1.0")).splitlines()
    with pytest.raises(HpcdlError, match=r"^hpcdl_module: 'x; rm' is not hpcdl's module"):
        render_job_script(alex, plan, {}, JobOptions(hpcdl_module="x; rm"))
    # the command line names the module it runs under (LOADEDMODULES)
    proc = hpcdl("render", "--site", "alex", "cifar10-quick", env={"LOADEDMODULES": "gcc/12:hpcdl/0.1.0"}, check=True)
    assert "module load hpcdl/0.1.0" in proc.stdout.splitlines()


def test_a_node_kinds_own_settings_reach_its_jobs_alone_and_win_over_the_plans(tmp_path):
    # NHR@FAU (doc.nhr.fau.de/apps/pytorch/): "For A100 nodes, enforce specific InfiniBand devices: export
    # NCCL_IB_HCA="=mlx5_0:1,mlx5_3:1"", on a machine whose A40 nodes have no InfiniBand: a site-wide env would
    # set it on every node kind, and the plan's per-rank HCA would be applied over it
    data = yaml.safe_load((SHIPPED / "volta-x86.yaml").read_text())
    data["node_kinds"]["v100"]["env"] = {"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1"}
    data["node_kinds"]["cpu"] = {**data["node_kinds"]["v100"], "gpus": [], "env": {}}
    (tmp_path / "volta-x86.yaml").write_text(yaml.safe_dump(data))
    site = load_site_file(tmp_path / "volta-x86.yaml")
    gpu = make_plan(site, JobRequest(nodes=2))
    assert gpu.env["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_1:1"
    assert all("NCCL_IB_HCA" not in r.env for r in gpu.ranks)
    assert "export NCCL_IB_HCA='=mlx5_0:1,mlx5_1:1'" in _render(site, tmp_path).splitlines()
    cpu = make_plan(site, JobRequest(nodes=2, node_kind="cpu", use_gpus=False))
    assert "NCCL_IB_HCA" not in cpu.env


def test_a_queue_that_limits_a_jobs_gpus_takes_every_job_within_them_over_any_nodes(tmp_path):
    # PSI Merlin7 limits a job's GPUs per partition, not its nodes (hpce.pages.psi.ch/merlin7/slurm-configuration.html:
    # "a100-general | 1-00:00:00 | 7-00:00:00 | ... | gres/gpu=4", "a100-daily | ... | 1-00:00:00 | ... | gres/gpu=8"):
    # two nodes of two GPUs each are 4 GPUs, which a100-general runs for a week; by nodes alone they went to
    # a100-daily and a 3-day job was refused
    site = _profile(tmp_path, SHIPPED / "volta-x86.yaml", **{
        "defaults.exclusive": False, "defaults.max_time": "7-00:00:00",
        "node_kinds.v100.defaults": {"partition_by_nodes": [
            {"max_gpus": 4, "partition": "a100-general"},
            {"max_gpus": 8, "partition": "a100-daily", "max_time": "1-00:00:00"}]}})

    def header(nodes, ranks, time="3-00:00:00"):
        plan = make_plan(site, JobRequest(nodes=nodes, ranks_per_node=ranks))
        return render_job_script(site, plan, {}, JobOptions(time=time)).splitlines()

    assert "#SBATCH --partition=a100-general" in header(2, 2)
    assert "#SBATCH --partition=a100-general" in header(4, 1)
    assert "#SBATCH --partition=a100-daily" in header(2, 4, time="12:00:00")
    with pytest.raises(HpcdlError, match=r"longer than queue 'a100-daily'"):
        header(2, 4)
    with pytest.raises(HpcdlError, match=r"^gpus: 12 is more than any queue of site 'volta-x86' takes "
                                         r"\(defaults.partition_by_nodes: at most 8 GPUs in a100-daily\)$"):
        header(3, 4, time="12:00:00")
    with pytest.raises(HpcdlError, match=r"partition_by_nodes.*each max_gpus larger than the one before"):
        _profile(tmp_path, SHIPPED / "volta-x86.yaml", **{"node_kinds.v100.defaults": {"partition_by_nodes": [
            {"max_gpus": 8, "partition": "daily"}, {"max_gpus": 4, "partition": "general"}]}})


def test_a_centre_that_counts_a_jobs_tasks_gets_their_total_beside_the_tasks_of_each_node(tmp_path):
    # Cambridge CSD3's template: "How many (MPI) tasks will there be in total? ... #SBATCH --ntasks=1"; NSC
    # Berzelius's: "--ntasks=1 --ntasks-per-node=1". sbatch(1): with both, "--ntasks ... will take precedence and the
    # --ntasks-per-node will be treated as a maximum count of tasks per node", so the plan's layout stays
    base = SHIPPED / "volta-x86.yaml"
    site = _profile(tmp_path, base, **{"defaults.total_tasks": True})
    header = [line for line in render_job_script(site, make_plan(site, JobRequest(nodes=2)), {}, JobOptions())
              .splitlines() if line.startswith("#SBATCH --ntasks")]
    assert header == ["#SBATCH --ntasks=8", "#SBATCH --ntasks-per-node=4"]
    plain = load_site_file(base)
    assert not [line for line in render_job_script(plain, make_plan(plain, JobRequest(nodes=2)), {}, JobOptions())
                .splitlines() if line.startswith("#SBATCH --ntasks=")]
    with pytest.raises(HpcdlError, match=r"defaults\.total_tasks: .* but the scheduler is pbs"):
        _profile(tmp_path, SHIPPED / "polaris.yaml", **{"defaults.total_tasks": True})


def test_a_gpus_cpus_are_asked_with_it_where_the_centre_asks_them_per_gpu(tmp_path):
    # Birmingham's Baskerville: "Leave --cpus-per-gpu=36. Resources such as CPUs and Memory are allocated per GPU",
    # "#SBATCH --gpus 1 #SBATCH --cpus-per-gpu 36"; sbatch takes not both --cpus-per-gpu and --cpus-per-task, and srun
    # still names the task's CPUs (a real slurmd 22.05 gives each task SLURM_CPUS_PER_TASK=36 so)
    volta = SHIPPED / "volta-x86.yaml"  # 2 x 20 cores of two threads, 4 GPUs
    site = _profile(tmp_path, volta, **{"defaults.cpu_request": "cpus-per-gpu"})
    plan = make_plan(site, JobRequest(nodes=2))
    header = [line for line in render_job_script(site, plan, {}, JobOptions()).splitlines()
              if line.startswith("#SBATCH --cpus-per")]
    assert header == ["#SBATCH --cpus-per-gpu=20"]
    assert "--cpus-per-task=20" in plan.launcher_argv
    # one rank on the node's four GPUs: its 80 CPUs split between them
    whole = make_plan(site, JobRequest(nodes=1, mode="per-node"))
    assert [line for line in render_job_script(site, whole, {}, JobOptions()).splitlines()
            if line.startswith("#SBATCH --cpus-per")] == ["#SBATCH --cpus-per-gpu=20"]
    # a CPU job has no GPU to ask them with
    cpu = make_plan(site, JobRequest(nodes=1, use_gpus=False, ranks_per_node=2))
    assert [line for line in render_job_script(site, cpu, {}, JobOptions()).splitlines()
            if line.startswith("#SBATCH --cpus-per")] == ["#SBATCH --cpus-per-task=40"]
    plain = load_site_file(volta)
    assert "#SBATCH --cpus-per-gpu" not in render_job_script(plain, make_plan(plain, JobRequest()), {}, JobOptions())
    with pytest.raises(HpcdlError, match=r"defaults\.cpu_request: cpus-per-gpu .* but the scheduler is pbs"):
        _profile(tmp_path, SHIPPED / "polaris.yaml", **{"defaults.cpu_request": "cpus-per-gpu"})


def test_a_job_that_shares_its_nodes_takes_its_gpus_share_of_the_cores(tmp_path):
    # IT4I Karolina: "you can allocate 1/8 of the node - 1 GPU and 16 cores", charged "allocated gpus * time / 8";
    # CSC Mahti: "You should reserve no more than 32 CPU cores per GPU". A one-GPU job on a node it does not hold
    # whole (no --exclusive) asked a whole socket's cores, the cores of GPUs other jobs are given
    volta = SHIPPED / "volta-x86.yaml"  # 2 x 20 cores, 4 GPUs: 10 cores come with each
    whole = _profile(tmp_path, volta)
    assert make_plan(whole, JobRequest(ranks_per_node=1)).ranks[0].cores == tuple(range(20))
    shared = _profile(tmp_path, volta, **{"defaults.exclusive": False})
    plan = make_plan(shared, JobRequest(ranks_per_node=1))
    assert plan.ranks[0].cores == tuple(range(10)) and plan.ranks[0].gpus == (0,)
    assert any("10 cores per GPU" in note for note in plan.notes)
    assert "--cpus-per-task=20" in plan.launcher_argv  # 10 cores of two hardware threads
    assert "--cpus-per-task=40" in make_plan(whole, JobRequest(ranks_per_node=1)).launcher_argv
    # a full node is the same either way, and a CPU job is not capped
    assert make_plan(shared, JobRequest()).ranks[1].cores == tuple(range(10, 20))
    assert make_plan(shared, JobRequest(use_gpus=False, ranks_per_node=2)).ranks[0].cores == tuple(range(20))
    assert make_plan(load_site("mahti"), JobRequest(ranks_per_node=1)).ranks[0].cores == tuple(range(32))
    # two GPUs of four: the first two with their cores, on socket 0, as Slurm lays the tasks out there
    two = make_plan(shared, JobRequest(ranks_per_node=2))
    assert [(r.gpus, r.cores) for r in two.ranks[:2]] == [((0,), tuple(range(10))), ((1,), tuple(range(10, 20)))]


def test_the_rendezvous_address_and_port_follow_the_centre(tmp_path):
    frontier = load_site_file(SHIPPED / "frontier.yaml")
    lines = _render(frontier, tmp_path).splitlines()
    assert "MASTER_ADDR=$(hostname -i)" in lines and "export MASTER_PORT=3442" in lines
    lines = _render(load_site_file(PERLMUTTER), tmp_path).splitlines()
    assert "MASTER_ADDR=$(hostname)" in lines and "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 12000))" in lines
    with pytest.raises(HpcdlError, match=r"launch.master_addr: a Slurm setting .* but the scheduler is pbs"):
        _profile(tmp_path, GADI, **{"launch.master_addr": "host-ip"})
    # JSC: the first node's name + "i", "to allow communication over InfiniBand cells"
    lines = _render(load_site_file(SHIPPED / "juwels-booster.yaml"), tmp_path).splitlines()
    assert 'MASTER_ADDR="$(hostname -s)i"' in lines
    with pytest.raises(HpcdlError, match=r"launch.master_addr_suffix: a Slurm setting .* but the scheduler is pbs"):
        _profile(tmp_path, GADI, **{"launch.master_addr_suffix": "i"})
    with pytest.raises(HpcdlError, match=r"launch.master_addr_suffix"):  # nothing a shell would run
        _profile(tmp_path, SHIPPED / "juwels-booster.yaml", **{"launch.master_addr_suffix": 'i"; rm -rf ~; "'})


def test_the_rendezvous_address_of_another_interfaces_name(tmp_path):
    # JSC's deep-learning course on JURECA-DC: 'MASTER_ADDR="${MASTER_ADDR}i"  # Modifies the master address to allow
    # communication over InfiniBand cells.' then 'export MASTER_ADDR="$(nslookup "$MASTER_ADDR" | grep -oP
    # '(?<=Address: ).*')"' (HelmholtzAI-FZJ/2025-12-course-Bringing-Deep-Learning-Workloads-to-JSC-supercomputers,
    # code/parallelize/run_ddp_training.sbatch): the address of the suffixed name, not the host's own (hostname -i)
    require_tool("getent")
    site = _profile(tmp_path, SHIPPED / "juwels-booster.yaml",
                    **{"launch.master_addr": "host-ip", "launch.master_addr_suffix": "host"})
    text = _render(site, tmp_path)
    lines = text.splitlines()
    at = lines.index('MASTER_ADDR="$(getent ahostsv4 "$(hostname -s)host" | awk \'NR == 1 { print $1 }\')" || {')
    block = ["\n".join(lines[at:lines.index("}", at) + 1])]
    assert "hostname -i" not in text
    # run it as the job does, on a host whose short name is "local": "localhost" resolves, "localnowhere" does not
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "hostname").write_text("#!/bin/sh\necho local\n")
    (shim / "hostname").chmod(0o755)
    env = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}"}
    run = subprocess.run(["bash", "-c", f"set -euo pipefail\n{block[0]}\necho \"$MASTER_ADDR\""],
                         capture_output=True, text=True, env=env)
    assert run.returncode == 0 and run.stdout.strip() == "127.0.0.1", run
    # a name with no address here (a test cluster's node): the ranks get the name, never an empty MASTER_ADDR
    lost = block[0].replace('host"', 'nowhere"')
    run = subprocess.run(["bash", "-c", f"set -euo pipefail\n{lost}\necho \"$MASTER_ADDR\""],
                         capture_output=True, text=True, env=env)
    assert run.returncode == 0 and run.stdout.strip() == "localnowhere", run
    assert "localnowhere has no IPv4 address" in run.stderr


def test_the_rendezvous_port_from_the_centres_own_command(tmp_path):
    # Princeton Research Computing's Della DDP job: "export MASTER_PORT=$(get_free_port)", a free port on the
    # batch host, where rank 0 runs (github.com/PrincetonUniversity/multi_gpu_training, 02_pytorch_ddp/README.md)
    della = load_site_file(SHIPPED / "della-gpu.yaml")
    text = _render(della, tmp_path)
    assert "MASTER_PORT=$(get_free_port)" in text.splitlines()
    assert "SLURM_JOB_ID % 12000" not in text
    # the line runs the command and exports what it prints
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "get_free_port").write_text("#!/bin/sh\necho 41234\n")
    (bin_dir / "get_free_port").chmod(0o755)
    lines = text.splitlines()
    start = lines.index("MASTER_PORT=$(get_free_port)")
    out = subprocess.run(["bash", "-euc", "\n".join(lines[start:start + 2]) + '\necho "$MASTER_PORT"'],
                         capture_output=True, text=True, check=True,
                         env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert out.stdout.strip() == "41234"
    # PBS and LSF take it alike; a word of it is one argument, nothing in it runs
    gadi = _profile(tmp_path, GADI, **{"launch.master_port_command": ["site-port", "--range=30000-40000; rm -rf ~"]})
    assert "MASTER_PORT=$(site-port '--range=30000-40000; rm -rf ~')" in _render(gadi, tmp_path, account="a00").splitlines()
    minerva = _profile(tmp_path, SHIPPED / "minerva.yaml", **{"launch.master_port_command": ["get_free_port"]})
    lines = _render(minerva, tmp_path, account="acc_demo").splitlines()
    assert "MASTER_PORT=$(get_free_port)" in lines and not any("LSB_JOBID % 12000" in line for line in lines)
    with pytest.raises(HpcdlError, match=r"launch.master_port_command: .* launch.master_port fixes it at 3442"):
        _profile(tmp_path, SHIPPED / "frontier.yaml", **{"launch.master_port_command": ["get_free_port"]})
    with pytest.raises(HpcdlError, match=r"launch.master_port_command\[0\]"):
        _profile(tmp_path, SHIPPED / "della-gpu.yaml", **{"launch.master_port_command": ["get\nfree"]})


def test_a_pbs_plan_says_its_cpu_unit_in_pbs_words():
    notes = make_plan(load_site("derecho"), JobRequest(nodes=2, node_kind="gpu")).notes
    note = next(n for n in notes if "scheduler_cpus_per_core" in n)
    assert "ncpus 16 per rank is 16 cores" in note and "-c " not in note
    notes = make_plan(load_site("frontier"), JobRequest(nodes=2)).notes
    assert any("-c 7 is 7 cores" in n for n in notes)


def test_a_site_whose_slurm_binds_tasks_itself_names_no_cpu_bind_and_refuses_a_plan_it_would_not_bind(tmp_path):
    """launch.cpu_bind_default: the srun line names no --cpu-bind (CSCS's lines carry none), and a plan
    whose cores only a mask gives (Frontier: rank 0 on cores 49-55, beside its GCD, where Slurm's first block is
    cores 1-7, core 0 being specialised) is refused in one line naming the field, as is the field beside a launcher
    other than srun."""
    volta = _volta_plan_bound(tmp_path)
    assert "--cpu-bind=cores" in make_plan(load_site_file(volta), JobRequest()).launcher_argv
    for bind in ("auto", "cores"):
        own = _profile(tmp_path, volta, **{"launch.cpu_bind_default": bind})
        argv = make_plan(own, JobRequest()).launcher_argv
        assert not any(w.startswith("--cpu-bind") for w in argv), argv
        frontier = _profile(tmp_path, SHIPPED / "frontier.yaml", **{"launch.cpu_bind_default": bind})
        with pytest.raises(HpcdlError, match=rf"^launch.cpu_bind_default: {bind} binding cannot give this plan's "
                                             r"cores: the plan puts local rank 0 on cores 49-55, where Slurm's default "
                                             r"binding gives it cores 1-7; [^\n]*$"):
            make_plan(frontier, JobRequest(nodes=2))
    with pytest.raises(HpcdlError, match=r"launch.cpu_bind_default: how Slurm binds srun's tasks, but the launcher is "
                                         r"mpirun"):
        _profile(tmp_path, GADI, **{"launch.cpu_bind_default": "auto"})


def test_a_bare_srun_centre_silent_on_its_binding_gets_a_line_asking_none_and_ranks_that_bind_themselves(tmp_path):
    """launch.cpu_bind_default: unstated (SURF's and BriCS's lines are a bare srun; no page says how their Slurm
    binds it): no --cpu-bind, --distribution or mask on the line, even where the plan's cores need masks under
    srun's own binding (Frontier's, beside each GCD), which is no longer refused: each rank binds itself to its
    cores from plan.json. Beside --gpu-bind=closest, which picks GPUs by the cores Slurm binds, it is refused."""
    frontier = _profile(tmp_path, SHIPPED / "frontier.yaml", **{"launch.cpu_bind_default": "unstated"})
    plan = make_plan(frontier, JobRequest(nodes=2))
    assert not [w for w in plan.launcher_argv if w.startswith(("--cpu-bind", "--distribution"))], plan.launcher_argv
    assert plan.local_ranks()[0].cores == tuple(range(49, 56))
    assert "--threads-per-core=1" in plan.launcher_argv  # the CPUs Slurm counts are still asked
    with pytest.raises(HpcdlError, match=r"launch.cpu_bind_default: unstated leaves each task's cores to the site's "
                                         r"Slurm until the rank binds itself, but launch.gpu_bind: closest [^\n]*keep one$"):
        _profile(tmp_path, SHIPPED / "delta.yaml", **{"launch.cpu_bind_default": "unstated"})


def test_a_site_whose_slurm_binds_no_task_names_no_binding_and_each_rank_binds_itself(tmp_path):
    """launch.cpu_bind_default: none (NRIS Olivia: jobs "are bound to the cpu cores they are allocated. However, the
    tasks and threads are free to use all cores the job has access to on the node", and its srun lines name no
    binding): the line names no --cpu-bind, no mask and no --distribution, even for a plan only masks would give
    (Frontier's rank 0 on cores 49-55), which is not refused: each rank binds itself to its plan.json cores.
    Beside launch.args' --cpu-bind=none (the same, said twice) it is refused in one line."""
    for base in (SHIPPED / "volta-x86.yaml", SHIPPED / "frontier.yaml"):
        site = _profile(tmp_path, base, **{"launch.cpu_bind_default": "none"})
        plan = make_plan(site, JobRequest(nodes=2))
        assert not any(w.startswith(("--cpu-bind", "--distribution", "-m", "--hint")) for w in plan.launcher_argv), \
            plan.launcher_argv
        assert plan.local_ranks()[0].cores == make_plan(load_site_file(base), JobRequest(nodes=2)).local_ranks()[0].cores
    assert make_plan(site, JobRequest(nodes=2)).local_ranks()[0].cores == tuple(range(49, 56))  # Frontier's, kept
    with pytest.raises(HpcdlError, match=r"launch.cpu_bind_default: none, the line asking no binding, and "
                                         r"launch.args say --cpu-bind=none too; keep one"):
        _profile(tmp_path, SHIPPED / "volta-x86.yaml",
                 **{"launch.cpu_bind_default": "none", "launch.args": ["--cpu-bind=none"]})


def test_a_centre_that_starts_from_a_clean_module_environment_purges_first(tmp_path):
    # CSC ("module purge", "module load pytorch") and SURF ("module purge", "module load 2024 ..."): the job's
    # modules are loaded into an empty environment, not on top of what the submitting shell had loaded
    site = _profile(tmp_path, PERLMUTTER, **{"modules.purge": True})
    lines = _render(site, tmp_path).splitlines()
    purge = lines.index("module purge")
    assert purge < next(i for i, line in enumerate(lines) if line.startswith("module load "))
    assert "module purge" not in _render(load_site_file(PERLMUTTER), tmp_path).splitlines()
    # with Lmod itself: the site's module is loaded, a module the submitting shell had is gone, and hpcdl's own
    # module (its HPCDL_IMAGE_DIR) is loaded again after the purge
    require_tool("lua")  # Lmod runs on lua; its init script is read from Debian's lmod package
    tree = _module_tree(tmp_path)
    site = _profile(tmp_path, PERLMUTTER,
                    **{"modules.purge": True, "modules.load": ["site/1"], "modules.init": LMOD_INIT})
    text = _render(site, tmp_path)
    block = text[text.index("source -- "):text.index("set -u", text.index("source -- "))]
    probe = (f"source {LMOD_INIT}; module use {tree}; module load hpcdl/0.1 stale/1; set -euo pipefail\n" + block
             + 'echo "image=${HPCDL_IMAGE_DIR:-} stale=${STALE:-} site=${SITE_STACK:-}"\n')
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, env={**os.environ, "MODULEPATH": ""})
    assert out.stdout.strip().splitlines()[-1] == "image=/images stale= site=1", out.stderr
    # MPCDF Raven's GPU job starts "module purge" whatever it loads after: a job that loads nothing (its framework
    # in hpcdl's image) still purges, so no module of the submitting shell reaches the container, and still gets
    # hpcdl's own module (its HPCDL_IMAGE_DIR, which names the image) back
    site = _profile(tmp_path, SHIPPED / "volta-x86.yaml", **{"modules.purge": True, "modules.init": LMOD_INIT})
    text = _render(site, tmp_path)
    assert "module purge" in text.splitlines() and not any(x.startswith("module load ") for x in text.splitlines())
    block = text[text.index("source -- "):text.index("set -u", text.index("source -- "))]
    probe = (f"source {LMOD_INIT}; module use {tree}; module load hpcdl/0.1 stale/1; set -euo pipefail\n" + block
             + 'echo "image=${HPCDL_IMAGE_DIR:-} stale=${STALE:-}"\n')
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, env={**os.environ, "MODULEPATH": ""})
    assert out.stdout.strip().splitlines()[-1] == "image=/images stale=", out.stderr


def _module_tree(tmp_path, *more: tuple[str, str]):
    """A folder of Lmod modules for the purge and reset tests: hpcdl's own, one the submitting shell had loaded,
    the site's, its GPU-aware MPI's (and `more`), each setting one variable."""
    tree = tmp_path / "mf"
    for name, body in (("hpcdl/0.1", 'setenv("HPCDL_IMAGE_DIR", "/images")'), ("stale/1", 'setenv("STALE", "1")'),
                       ("site/1", 'setenv("SITE_STACK", "1")'), ("craype-accel-nvidia80", 'setenv("GTL", "1")'), *more):
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / f"{name}.lua").write_text(body + "\n")
    return tree


def test_a_centre_that_starts_from_its_default_modules_resets_first(tmp_path):
    # NRIS Olivia's PyTorch jobs start `ml reset; ml load NRIS/GPU; ...` (Lmod's return to the site's default modules,
    # its sticky stacks kept), not `module purge`: the job writes `module reset` before its loads
    site = _profile(tmp_path, PERLMUTTER, **{"modules.reset": True})
    lines = _render(site, tmp_path).splitlines()
    reset = lines.index("module reset")
    assert reset < next(i for i, line in enumerate(lines) if line.startswith("module load "))
    assert "module purge" not in lines
    # a purge would unload what the reset restores: one or the other, and reset is Lmod's alone
    with pytest.raises(HpcdlError, match=r"modules: .*purge and reset both set"):
        _profile(tmp_path, PERLMUTTER, **{"modules.reset": True, "modules.purge": True})
    with pytest.raises(HpcdlError, match=r"modules: .*reset: `module reset` is Lmod's; modules.system is tcl"):
        _profile(tmp_path, PERLMUTTER, **{"modules.reset": True, "modules.system": "tcl"})
    # with Lmod itself: a module the submitting shell had is gone, the site's default (LMOD_SYSTEM_DEFAULT_MODULES)
    # is back, the job's own modules are loaded, and so is hpcdl's module again after the reset
    require_tool("lua")
    tree = _module_tree(tmp_path, ("StdEnv/1", 'setenv("DEFAULT_STACK", "1")'))
    site = _profile(tmp_path, PERLMUTTER,
                    **{"modules.reset": True, "modules.load": ["site/1"], "modules.init": LMOD_INIT})
    text = _render(site, tmp_path)
    block = text[text.index("source -- "):text.index("set -u", text.index("source -- "))]
    # the folder is the site's own MODULEPATH (what the login shell starts with, and a reset returns to)
    probe = (f"source {LMOD_INIT}; module load hpcdl/0.1 stale/1; set -euo pipefail\n" + block
             + 'echo "image=${HPCDL_IMAGE_DIR:-} stale=${STALE:-} site=${SITE_STACK:-} default=${DEFAULT_STACK:-}"\n')
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True,
                         env={**os.environ, "MODULEPATH": str(tree), "LMOD_SYSTEM_DEFAULT_MODULES": "StdEnv"})
    assert out.stdout.strip().splitlines()[-1] == "image=/images stale= site=1 default=1", out.stderr


def test_a_port_whose_device_the_centre_does_not_name_gets_no_device_settings(tmp_path):
    # docs/sites.md: "If the guide does not say, leave domain out rather than guess"; the same for a port's device
    # name (SURF names no HCA of Snellius's GPU nodes): NCCL_IB_HCA==<guess> is an exact match, so a wrong guess
    # would keep NCCL off InfiniBand, where no setting lets NCCL and UCX pick the HCAs themselves
    volta = SHIPPED / "volta-x86.yaml"
    data = yaml.safe_load(volta.read_text())
    nics = data["node_kinds"]["v100"]["nics"]
    for nic in nics:
        nic.pop("device")
        nic.pop("netdev", None)
    site = _profile(tmp_path, volta, **{"node_kinds.v100.nics": nics})
    plan = make_plan(site, JobRequest(nodes=2))
    assert all(r.nic is None for r in plan.ranks)
    assert not any(k in r.env for r in plan.ranks for k in ("NCCL_IB_HCA", "UCX_NET_DEVICES"))
    assert "NCCL_SOCKET_IFNAME" not in plan.env
    _render(site, tmp_path)
    # the ports still count for what crosses the network (hpcdl predict reads their kind and speed)
    assert [n.kind for n in site.node_kinds["v100"].nics] == ["infiniband", "infiniband"]
    # and the node's picture draws them, pinned to no rank
    from hpcdl.plan.picture import draw_node

    assert draw_node(site, make_plan(site, JobRequest(nodes=1)), tmp_path / "node.png").stat().st_size > 0


def test_a_port_the_centre_names_by_its_interface_only_is_the_rank_s_nic_by_that_name(tmp_path):
    # NCSA DeltaAI's GPU affinity table pairs each GPU with its Slingshot interface ("GPU0 ... HSN hsn0 ... CPU
    # Affinity 0-71") and names no CXI device: the plan gives each rank the port beside it by its interface name,
    # as the centre's table does, and still no device setting (NCCL_IB_HCA and UCX_NET_DEVICES take device names)
    volta = SHIPPED / "volta-x86.yaml"
    data = yaml.safe_load(volta.read_text())
    nics = data["node_kinds"]["v100"]["nics"]
    for nic in nics:
        nic.pop("device")
    site = _profile(tmp_path, volta, **{"node_kinds.v100.nics": nics})
    plan = make_plan(site, JobRequest(nodes=2))
    assert [(r.socket, r.nic) for r in plan.ranks[:4]] == [(0, "ib0"), (0, "ib0"), (1, "ib1"), (1, "ib1")]
    assert not any(k in r.env for r in plan.ranks for k in ("NCCL_IB_HCA", "UCX_NET_DEVICES"))
    assert plan.env["NCCL_SOCKET_IFNAME"] == "ib0,ib1"
    assert "NIC ib1" in _render(site, tmp_path)
    from hpcdl.plan.picture import draw_node

    assert draw_node(site, make_plan(site, JobRequest(nodes=1)), tmp_path / "node.png").stat().st_size > 0


def test_a_slurm_that_lays_tasks_out_in_blocks_by_default_gets_no_distribution(tmp_path):
    # CSC Mahti: "By default, Slurm scatters MPI tasks --cpus-per-task apart, i.e. with --cpus-per-task=8 the MPI
    # task 0 is bound to CPU core 0, the MPI task 1 is bound to CPU core 7 etc." on two 64-core sockets: consecutive
    # tasks fill a socket first (slurm.conf CR_Core_Default_Dist_Block), so CSC's lines name no --distribution
    volta = _volta_plan_bound(tmp_path)
    assert "--distribution=block:block" in make_plan(load_site_file(volta), JobRequest()).launcher_argv
    site = _profile(tmp_path, volta, **{"launch.distribution_default": "block"})
    argv = make_plan(site, JobRequest()).launcher_argv
    assert not any(w.startswith(("--distribution", "-m")) for w in argv)
    assert "--cpu-bind=cores" in argv
    with pytest.raises(HpcdlError, match=r"launch.distribution_default: an srun setting, but the launcher is mpirun"):
        _profile(tmp_path, SHIPPED / "vista.yaml", **{"launch.distribution_default": "block"})


def test_a_slurm_that_splits_a_task_over_the_sockets_by_default_is_told_block(tmp_path):
    # TU Dresden ZIH: "The default binding pattern of hybrid jobs will split the cores allocated to a rank between the
    # sockets of a node" (its Slurm 20.11's cyclic, srun(1)'s fcyclic today: "Tasks requiring more than one CPU will
    # have each CPUs allocated in a cyclic fashion across sockets"). One rank per socket (volta-x86's two sockets of
    # 20 cores) names no distribution where Slurm keeps a task on one socket, but must where Slurm splits it
    from test_slurm_binding import binding_mismatches

    volta = _volta_plan_bound(tmp_path)
    request = JobRequest(mode="per-socket", ranks_per_node=2)
    cyclic = _profile(tmp_path, volta, **{"launch.distribution_default": "cyclic"})
    assert not any(w.startswith("--distribution") for w in make_plan(cyclic, request).launcher_argv)
    site = _profile(tmp_path, volta, **{"launch.distribution_default": "fcyclic"})
    for req in (request, JobRequest(ranks_per_node=1), JobRequest()):
        assert "--distribution=block:block" in make_plan(site, req).launcher_argv, req
    # one rank on every core of the node: fcyclic gives it the same cores, and the line names none
    whole = make_plan(site, JobRequest(mode="per-node", use_gpus=False)).launcher_argv
    assert not any(w.startswith("--distribution") for w in whole)
    # the layouts a real slurmd gives (tests/test_slurm_binding.py's rule, checked against slurmd 22.05 there)
    for kwargs in ({"mode": "per-socket", "ranks_per_node": 2}, {"ranks_per_node": 1}, {}):
        assert not binding_mismatches(str(volta), site, "v100", kwargs), kwargs
    # a centre's own fcyclic in launch.args lays a lone rank's cores over both sockets: the plan's masks instead
    own = _profile(tmp_path, volta, **{"launch.args": ["--distribution=block:fcyclic"]})
    assert any(w.startswith("--cpu-bind=mask_cpu:") for w in make_plan(own, JobRequest(ranks_per_node=1)).launcher_argv)


def test_a_site_whose_slurm_binds_no_gpu_names_no_gpu_bind(tmp_path):
    """launch.gpu_bind_default: none: every task of a bare srun sees the step's GPUs and drives its own by
    local rank (IDRIS's jobs: `srun python -u fsdp.py` under --gres=gpu:4, each task
    torch.cuda.set_device(local_rank)), so the line names no --gpu-bind, as the centre's do; without the
    field the same plan says --gpu-bind=none. Refused beside per-rank GPUs or a launcher other than srun."""
    jean_zay = SHIPPED / "jean-zay.yaml"
    # (the line restating the header, launch.srun_layout: restate, so that it names the GPUs)
    said = _profile(tmp_path, jean_zay, **{"launch.gpu_visibility": "node", "launch.gpu_bind_default": None,
                                           "launch.srun_layout": "restate"})
    assert "--gpu-bind=none" in make_plan(said, JobRequest(nodes=2)).launcher_argv
    bare = _profile(tmp_path, jean_zay, **{"launch.gpu_visibility": "node", "launch.gpu_bind_default": "none",
                                           "launch.srun_layout": "restate"})
    plan = make_plan(bare, JobRequest(nodes=2))
    assert not any(w.startswith("--gpu-bind") for w in plan.launcher_argv), plan.launcher_argv
    assert "--gres=gpu:4" in plan.launcher_argv
    assert [r.env["HPCDL_GPU"] for r in plan.local_ranks()] == ["0", "1", "2", "3"]
    with pytest.raises(HpcdlError, match=r"launch.gpu_bind_default: every task seeing the step's GPUs, but "
                                         r"launch.gpu_visibility is per-rank[^\n]*$"):
        _profile(tmp_path, jean_zay, **{"launch.gpu_visibility": "per-rank", "launch.gpu_bind_default": "none"})
    with pytest.raises(HpcdlError, match=r"launch.gpu_bind_default: how Slurm binds srun's GPUs, but the launcher "
                                         r"is mpirun"):
        _profile(tmp_path, GADI, **{"launch.gpu_visibility": "node", "launch.gpu_bind_default": "none"})


def test_a_centres_own_cpu_bind_none_is_kept_and_the_ranks_bind_themselves(tmp_path):
    """launch.args: [--cpu-bind=none] (JSC's deep-learning jobs: FZJ-JSC's jubench 'srun --cpu_bind=none' on the
    booster, four tasks a node): the line carries it once, as written, and none of hpcdl's own binding words (no
    mask, no --distribution); each rank still holds its cores in plan.json, which the trainer binds to. Any other
    --cpu-bind there is refused (the binding is the plan's), as is none beside launch.cpu_bind_default."""
    juwels, jean_zay = SHIPPED / "juwels-booster.yaml", SHIPPED / "jean-zay.yaml"
    for base in (juwels, jean_zay):  # a mask, and blocks with --distribution=block:block, without it
        site = _profile(tmp_path, base, **{"launch.cpu_bind_default": None, "launch.args": ["--cpu-bind=none"]})
        plan = make_plan(site, JobRequest(nodes=2))
        binding = [w for w in plan.launcher_argv if w.startswith(("--cpu-bind", "--cpu_bind", "--distribution"))]
        assert binding == ["--cpu-bind=none"], plan.launcher_argv
        planned = make_plan(load_site_file(base), JobRequest(nodes=2))
        assert [r.cores for r in plan.local_ranks()] == [r.cores for r in planned.local_ranks()]
    with pytest.raises(HpcdlError, match=r"launch.args: --cpu-bind=cores: hpcdl writes the binding srun gives "
                                         r"each task"):
        _profile(tmp_path, juwels, **{"launch.args": ["--cpu-bind=cores"]})
    with pytest.raises(HpcdlError, match=r"launch.cpu_bind_default: the site's Slurm binding tasks by itself, but "
                                         r"launch.args say --cpu-bind=none; keep one"):
        _profile(tmp_path, jean_zay, **{"launch.args": ["--cpu_bind=none"]})


def test_a_centre_that_names_no_hca_leaves_each_ranks_nic_to_its_library(tmp_path):
    """launch.nic_choice: library (JSC's jobs on JUWELS Booster name no HCA: NCCL takes the one nearest its GPU):
    no rank carries NCCL_IB_HCA or UCX_NET_DEVICES of its own, while the job's out-of-band interface
    (NCCL_SOCKET_IFNAME, from the NICs' netdev) stays; the default, plan, gives each rank its nearest port, and
    mode per-nic still places one rank per port."""
    juwels = SHIPPED / "juwels-booster.yaml"
    planned = make_plan(_profile(tmp_path, juwels, **{"launch.nic_choice": "plan"}), JobRequest(nodes=2))
    assert [r.env["NCCL_IB_HCA"] for r in planned.local_ranks()] == ["=mlx5_0:1", "=mlx5_1:1", "=mlx5_2:1", "=mlx5_3:1"]
    library = _profile(tmp_path, juwels, **{"launch.nic_choice": "library"})
    plan = make_plan(library, JobRequest(nodes=2))
    assert all(r.nic is None and not {"NCCL_IB_HCA", "UCX_NET_DEVICES"} & set(r.env) for r in plan.ranks), plan.ranks
    assert plan.env["NCCL_SOCKET_IFNAME"] == "ib0"
    assert any("launch.nic_choice: library" in n for n in plan.notes)
    per_nic = make_plan(library, JobRequest(nodes=2, mode="per-nic"))
    assert [r.nic for r in per_nic.local_ranks()] == ["mlx5_0:1", "mlx5_1:1", "mlx5_2:1", "mlx5_3:1"]


def test_one_thread_per_core_is_asked_in_the_centres_words(tmp_path):
    """EPCC and IDRIS ask one hardware thread per core with --hint=nomultithread (in #SBATCH and on srun,
    with no --cpu-bind: srun takes --hint beside neither); launch.threads_request: hint writes that, and
    --threads-per-core=1 where the plan needs masks. Neither line carries --cpu-bind=cores, which binds
    both threads of every core (a real slurmd 22.05, tests/test_slurm_binding.py)."""
    jean_zay = SHIPPED / "jean-zay.yaml"
    # (the line restating the header, launch.srun_layout: restate; IDRIS's own bare srun says neither, below)
    other = _profile(tmp_path, jean_zay, **{"launch.threads_request": "threads-per-core", "launch.srun_layout": "restate"})
    plain = make_plan(other, JobRequest(nodes=2)).launcher_argv
    assert "--threads-per-core=1" in plain and not any(w.startswith(("--hint", "--cpu-bind")) for w in plain)
    site = load_site_file(jean_zay)  # IDRIS: "#SBATCH --hint=nomultithread"
    text = _render(site, tmp_path)
    assert "#SBATCH --hint=nomultithread" in text.splitlines() and "--threads-per-core" not in text
    restated = _profile(tmp_path, jean_zay, **{"launch.srun_layout": "restate"})
    line = make_plan(restated, JobRequest(nodes=2)).launcher_argv
    assert "--hint=nomultithread" in line and "--distribution=block:block" in line
    assert not any(w.startswith("--cpu-bind") for w in line)
    # IDRIS's bare srun takes the header's --hint from SLURM_HINT (launch.srun_layout: header)
    assert list(make_plan(site, JobRequest(nodes=2)).launcher_argv) == ["srun", "--distribution=block:block"]
    # a rank layout only masks give: srun takes no --hint beside --cpu-bind=mask_cpu
    masked = _profile(tmp_path, jean_zay, **{"launch.threads_request": "hint", "launch.cpu_bind_default": None,
                                             "launch.args": ["--distribution=block:cyclic"]})
    line = make_plan(masked, JobRequest(nodes=2)).launcher_argv
    assert "--threads-per-core=1" in line and any(w.startswith("--cpu-bind=mask_cpu:") for w in line)
    assert "--threads-per-core=1" in _render(masked, tmp_path)
    with pytest.raises(HpcdlError, match=r"launch.threads_request: hint is srun's and sbatch's --hint=nomultithread, "
                                         r"but the launcher is mpirun"):
        _profile(tmp_path, GADI, **{"launch.threads_request": "hint"})


def test_a_queue_by_size_keeps_its_own_time_limit(tmp_path):
    """Purdue Anvil (docs.rcac.purdue.edu, Anvil queues): wholenode takes up to 16 nodes for 96 h, wide up
    to 56 nodes for 12 h; a 24-hour job of 32 nodes goes to wide, which would not run it."""
    anvil = load_site_file(SHIPPED / "anvil.yaml")
    assert "#SBATCH --partition=wholenode" in _render(anvil, tmp_path, nodes=16, time="96:00:00", account="x").splitlines()
    assert "#SBATCH --partition=wide" in _render(anvil, tmp_path, nodes=32, time="12:00:00", account="x").splitlines()
    with pytest.raises(HpcdlError, match=r"^time: 24:00:00 is longer than queue 'wide' of site 'anvil' runs "
                                         r"\(defaults.partition_by_nodes: wide max_time 12:00:00\)$"):
        render_job_script(anvil, make_plan(anvil, JobRequest(nodes=32)), {}, JobOptions(time="24:00:00", account="x"))
    with pytest.raises(HpcdlError, match=r"partition_by_nodes.1.max_time.*'half a day' is not a time limit"):
        _profile(tmp_path, SHIPPED / "anvil.yaml", **{"defaults.partition_by_nodes": [
            {"max_nodes": 16, "partition": "wholenode"}, {"max_nodes": 56, "partition": "wide", "max_time": "half a day"}]})


def test_a_job_of_several_nodes_takes_every_gpu_of_each_where_the_centre_shares_only_one(tmp_path):
    # CSD3's Wilkes-3 template: "Specify the number of GPUs per node (between 1 and 4; must be 4 if nodes>1)": a
    # node is shared GPU by GPU only by a one-node job, so two nodes of two GPUs each are refused before submission,
    # naming the field, where the centre's submit script would refuse them after
    volta = SHIPPED / "volta-x86.yaml"  # 4 GPUs a node
    shared = _profile(tmp_path, volta, **{"defaults.exclusive": False, "defaults.max_nodes_partial": 1})
    assert make_plan(shared, JobRequest(nodes=1, ranks_per_node=2)).ranks_per_node == 2
    assert make_plan(shared, JobRequest(nodes=2)).ranks_per_node == 4
    with pytest.raises(HpcdlError, match=r"2 of its 4 GPUs.*defaults\.max_nodes_partial"):
        make_plan(shared, JobRequest(nodes=2, ranks_per_node=2))
    # a CPU-only job on the same nodes asks no GPU, and a site without the field shares nodes at any size
    assert make_plan(shared, JobRequest(nodes=2, use_gpus=False)).ranks_per_node == 2
    assert make_plan(_profile(tmp_path, volta, **{"defaults.exclusive": False}),
                     JobRequest(nodes=2, ranks_per_node=2)).ranks_per_node == 2


def test_a_job_the_site_gives_whole_nodes_spreads_its_ranks_over_them(tmp_path):
    # OSC's Slurm hands nodes out by their cores, but a job of several nodes gets them whole (OSC's own OnDemand
    # template, github.com/OSC/osc-ood-config ondemand.osc.edu/apps/bc_desktop/submit/slurm.yml.erb: "if you request
    # > 1 nodes, it doesn't matter how many cores you request - you get the whole node"): such a job is planned as
    # on a whole node (its ranks spread over the sockets with their sockets' cores), not on the first GPUs of a
    # shared one, and its header still names no --exclusive, as the centre's jobs do
    volta = SHIPPED / "volta-x86.yaml"  # 2 sockets of 20 cores, 4 GPUs, two a socket
    site = _profile(tmp_path, volta, **{"defaults.exclusive": False, "defaults.whole_nodes_from": 2})
    one = make_plan(site, JobRequest(nodes=1, ranks_per_node=2))
    assert [r.gpus for r in one.local_ranks()] == [(0,), (1,)] and len(one.local_ranks()[0].cores) == 10
    two = make_plan(site, JobRequest(nodes=2, ranks_per_node=2))
    assert [r.gpus for r in two.local_ranks()] == [(0,), (2,)]
    assert [r.cores for r in two.local_ranks()] == [tuple(range(20)), tuple(range(20, 40))]
    lines = render_job_script(site, two, {}, JobOptions()).splitlines()
    # 20 cores of two hardware threads each, as volta-x86's Slurm counts them
    assert "#SBATCH --cpus-per-task=40" in lines and "#SBATCH --exclusive" not in lines
    # unset, a shared node stays shared at any size
    shared = make_plan(_profile(tmp_path, volta, **{"defaults.exclusive": False}), JobRequest(nodes=2, ranks_per_node=2))
    assert [r.gpus for r in shared.local_ranks()] == [(0,), (1,)]
    # meaningful only where jobs share nodes, under Slurm
    with pytest.raises(HpcdlError, match=r"defaults\.whole_nodes_from: .*exclusive"):
        _profile(tmp_path, volta, **{"defaults.whole_nodes_from": 2})


def test_a_conda_environment_defines_condas_shell_function_where_the_centre_does(tmp_path):
    # Mahidol's MAI HPC DDP jobs (ai-hpc-mu.github.io/document/adv_guide/ddp-training.html): 'module load cuda12.2/toolkit
    # ...', 'eval "$(conda shell.bash hook)"', 'conda activate hpc_lab': a batch shell reads no ~/.bashrc, so without the
    # hook `conda activate` stops ("Run 'conda init' before 'conda activate'")
    hooked = _profile(tmp_path, POLARIS, **{"environment.hook": True, "environment.activate": "hpc_lab"})
    lines = _render(hooked, tmp_path, account="p").splitlines()
    hook = lines.index('eval "$(conda shell.bash hook)"')
    assert lines[hook + 1] == "conda activate hpc_lab"
    assert hook > max(i for i, line in enumerate(lines) if line.startswith("module load "))
    # a centre whose conda module defines the function itself (ALCF Polaris) gets no hook
    assert 'conda shell.bash hook' not in _render(load_site_file(POLARIS), tmp_path, account="p")
    with pytest.raises(HpcdlError, match=r"environment.*hook: conda's shell hook, not for a venv environment"):
        _profile(tmp_path, POLARIS, **{"environment.kind": "venv", "environment.activate": "/opt/venv",
                                       "environment.hook": True})


def test_a_centre_whose_container_stack_wants_nvidia_container_cli_gets_nvccli(tmp_path):
    # Mahidol's MAI HPC (ai-hpc-mu.github.io/document/adv_guide/zeta-A100-80GB-singularity.html): "singularity exec
    # --nvccli [other flags] image.sif command", "Driver stack: nvidia-container-toolkit (CDI)", --nvccli preferred
    site = _profile(tmp_path, POLARIS, **{"container.nvidia": "nvccli"})
    text = _render(site, tmp_path, account="p", image="/lus/eagle/projects/p/my.sif",
                   net_plugin="/opt/aws-ofi-nccl/lib/libnccl-net.so")
    line = next(x for x in text.splitlines() if " apptainer exec " in x)
    assert "apptainer exec --nvccli --bind" in line and "--nv" not in line.split()
    # the default stays --nv
    text = _render(load_site_file(POLARIS), tmp_path, account="p", image="/lus/eagle/projects/p/my.sif",
                   net_plugin="/opt/aws-ofi-nccl/lib/libnccl-net.so")
    assert "--nv" in next(x for x in text.splitlines() if " apptainer exec " in x).split()
    with pytest.raises(HpcdlError, match=r"container.nvidia: --nvccli is Apptainer's and Singularity's; the runtime is none"):
        _profile(tmp_path, POLARIS, **{"container.nvidia": "nvccli", "runtime": "none", "environment.prefer": True})


def test_a_centre_that_raises_a_shell_limit_before_its_launch_gets_it_raised_in_the_job(tmp_path):
    """launch.ulimit: the job sets the limits the centre's scripts set before the launcher (UChicago
    RCC Midway3: `ulimit -l unlimited` before mpirun), carried in the plan; where the kernel refuses
    one the job goes on, as the centre's scripts (no set -e) do. A value that is not a limit is refused
    naming the field, at load and from a plan read back."""
    volta = SHIPPED / "volta-x86.yaml"
    assert "ulimit" not in _render(load_site_file(volta), tmp_path)
    # more open files than the kernel's fs.nr_open is refused even to root; a lower locked-memory limit never is
    too_many = int(Path("/proc/sys/fs/nr_open").read_text()) + 1
    site = _profile(tmp_path, volta, **{"launch.ulimit": {"memlock": 64, "nofile": too_many}})
    plan = make_plan(site, JobRequest(nodes=2))
    assert plan.ulimit == {"memlock": "64", "nofile": str(too_many)}
    assert type(plan).from_dict(plan.to_dict()) == plan
    lines = _render(site, tmp_path).splitlines()
    raised = [i for i, line in enumerate(lines) if line.startswith("ulimit ")]
    launch = next(i for i, line in enumerate(lines) if line.startswith("srun "))
    assert [lines[i].split(" ||")[0] for i in raised] == ["ulimit -l 64", f"ulimit -n {too_many}"]
    assert raised[-1] < launch
    # run as the job's shell runs them: the one the kernel takes holds, the one it refuses warns and the job goes on
    shell = "set -euo pipefail\n" + "\n".join(lines[i] for i in raised) + "\nulimit -l\n"
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["64"]
    assert f"hpcdl: ulimit -n {too_many} refused; the ranks keep " in done.stderr
    unlimited = _profile(tmp_path, volta, **{"launch.ulimit": {"memlock": "unlimited"}})
    assert "ulimit -l unlimited || " in _render(unlimited, tmp_path)
    for name, value, says in (("memlock", "unlimited; rm -rf ~", "is not unlimited or a whole number"),
                              ("memlock", 0, "is not unlimited or a whole number"),
                              ("nofile", True, "is not unlimited or a whole number"),
                              ("locked", "unlimited", "Input should be 'core'")):
        with pytest.raises(HpcdlError, match=rf"launch\.ulimit\.{name}[^\n]*{re.escape(says)}"):
            _profile(tmp_path, volta, **{"launch.ulimit": {name: value}})
    hostile = type(plan).from_dict({**plan.to_dict(), "ulimit": {"memlock": "unlimited; touch x"}})
    with pytest.raises(HpcdlError, match=r"^plan ulimit: memlock='unlimited; touch x' is not a limit launch.ulimit"):
        render_job_script(site, hostile, {}, JobOptions())


def _tasks_per_socket(site, **request) -> list[str]:
    text = render_job_script(site, make_plan(site, JobRequest(nodes=2, **request)), {}, JobOptions(account="t01"))
    return [line for line in text.splitlines() if line.startswith("#SBATCH --ntasks-per-socket")]


def test_a_centre_that_counts_tasks_per_socket_gets_them_as_its_slurm_counts_sockets(tmp_path):
    # ULHPC: "always explicitly specify upon resource allocation the number of tasks you want per node/socket
    # (--ntasks-per-node <n> --ntasks-per-socket <s>)", on Aion's "8 (virtual) sockets" of 16 cores; a Slurm that
    # counts L3 caches as sockets (l3cache_as_socket: EPCC ARCHER2's 32 of 4 cores) counts them alike
    base = SHIPPED / "archer2.yaml"  # 2 x 64 cores, 8 ranks of 16 by default
    assert _tasks_per_socket(load_site_file(base)) == []
    physical = _profile(tmp_path, base, **{"defaults.tasks_per_socket": True})
    assert _tasks_per_socket(physical) == ["#SBATCH --ntasks-per-socket=4"]
    numa = _profile(tmp_path, base, **{"defaults.tasks_per_socket": True, "node_kinds.standard.scheduler_sockets": 8})
    assert _tasks_per_socket(numa) == ["#SBATCH --ntasks-per-socket=1"]
    assert _tasks_per_socket(numa, ranks_per_node=128) == ["#SBATCH --ntasks-per-socket=16"]
    assert _tasks_per_socket(numa, ranks_per_node=2) == ["#SBATCH --ntasks-per-socket=1"]  # 64 cores each
    # srun repeats it, as ULHPC asks "in every call of srun"
    assert "--ntasks-per-socket=1" in make_plan(numa, JobRequest(nodes=2)).launcher_argv
    assert not [w for w in make_plan(load_site_file(base), JobRequest(nodes=2)).launcher_argv if "per-socket" in w]
    # the test Slurm poses the node as that Slurm counts it: 8 sockets of 16 cores
    shape = NodeShape.from_site(numa)
    assert (shape.sockets, shape.cores_per_socket) == (8, 16)
    assert (NodeShape.from_site(physical).sockets, NodeShape.from_site(physical).cores_per_socket) == (2, 64)
    l3 = _profile(tmp_path, base, **{"defaults.tasks_per_socket": True, "node_kinds.standard.scheduler_sockets": 32})
    assert _tasks_per_socket(l3, ranks_per_node=128) == ["#SBATCH --ntasks-per-socket=4"]
    with pytest.raises(HpcdlError, match=r"scheduler_sockets: 3 does not split"):
        _profile(tmp_path, base, **{"node_kinds.standard.scheduler_sockets": 3})
    with pytest.raises(HpcdlError, match=r"defaults\.tasks_per_socket: .* but the scheduler is pbs"):
        _profile(tmp_path, SHIPPED / "polaris.yaml", **{"defaults.tasks_per_socket": True})


def test_a_centre_whose_scripts_run_in_a_login_shell_gets_one(tmp_path):
    # ULHPC: "#!/bin/bash -l # <--- DO NOT FORGET '-l' to facilitate further access to ULHPC modules"
    base = SHIPPED / "anvil.yaml"
    assert _render(load_site_file(base), tmp_path, account="x-abc").splitlines()[0] == "#!/bin/bash"
    login = _profile(tmp_path, base, **{"modules.login_shell": True})
    text = _render(login, tmp_path, account="x-abc")
    assert text.splitlines()[0] == "#!/bin/bash -l" and text.splitlines()[1].startswith("#SBATCH ")


def test_a_centre_that_keeps_apptainers_work_folder_on_node_local_disk_gets_it_in_the_job(tmp_path):
    """container.workdir: the Alliance's Apptainer page (https://docs.alliancecan.ca/wiki/Apptainer/fr) says a job's
    /tmp lives in RAM, which the job has little of, so "le répertoire de travail doit être ${SLURM_TMPDIR}, par exemple
    -W ${SLURM_TMPDIR}": the runtime gets --workdir with the job's variable expanded when the job runs, not quoted
    as a literal; a variable the job may not have, a relative path or another runtime is refused naming the field."""
    raven = SHIPPED / "raven.yaml"
    site = _profile(tmp_path, raven, **{"container.workdir": "$SLURM_TMPDIR"})
    text = _render(site, tmp_path, account="p")
    line = next(x for x in text.splitlines() if " apptainer exec " in x)
    assert ' apptainer exec --nv --workdir "${SLURM_TMPDIR}" ' in line
    # the folder expands in the job shell: the word apptainer gets is the job's node-local folder
    options = line.split(" apptainer exec ", 1)[1].split(" --bind ", 1)[0]
    words = subprocess.run(["bash", "-c", f'SLURM_TMPDIR=/localscratch/job.1; set -- {options}; printf "%s\\n" "$@"'],
                           capture_output=True, text=True, check=True).stdout.split()
    assert words == ["--nv", "--workdir", "/localscratch/job.1"]
    # unset, apptainer keeps its own default (no --workdir)
    assert "--workdir" not in _render(load_site_file(raven), tmp_path, account="p")
    with pytest.raises(HpcdlError, match=r"container.workdir: \$LOCALDISK is set neither by slurm nor by the login"):
        _profile(tmp_path, raven, **{"container.workdir": "$LOCALDISK/apptainer"})
    with pytest.raises(HpcdlError, match=r"container.workdir: .*must be an absolute path"):
        _profile(tmp_path, raven, **{"container.workdir": "tmp"})
    with pytest.raises(HpcdlError, match=r"container.workdir: --workdir is Apptainer's and Singularity's; the runtime "
                                         r"is shifter"):
        _profile(tmp_path, raven, **{"container.workdir": "$SLURM_TMPDIR", "runtime": "shifter"})
    # the site module's framework wrappers also run outside any job (no $SLURM_TMPDIR): they leave the work folder
    # to the runtime's default
    from hpcdl.modules.generator import container_argv

    argv, _ = container_argv(_profile(tmp_path, raven, **{"container.workdir": "$SLURM_TMPDIR"}))
    assert "--workdir" not in argv and argv[:3] == ("apptainer", "exec", "--nv")


def test_a_centres_own_tmpdir_is_made_first_and_reaches_every_rank(tmp_path):
    # NCAR: "For batch use, CISL recommends setting TMPDIR within each batch script for all batch jobs. Include these
    # commands as the first two executable lines of your batch script after the #PBS directives:
    # export TMPDIR=$SCRATCH/tmp && mkdir -p $TMPDIR" (NCAR/HPC-Docs docs/pbs/storing-temporary-files.md)
    cx3 = SHIPPED / "imperial-cx3.yaml"  # PBS Pro and Open MPI's mpirun, $EPHEMERAL in every job
    site = _profile(tmp_path, cx3, **{"filesystems.tmpdir": "$EPHEMERAL/tmp"})
    lines = _render(site, tmp_path, nodes=1).splitlines()
    at = lines.index('export TMPDIR="${EPHEMERAL}"/tmp')
    assert lines[at + 1] == 'mkdir -p "$TMPDIR"' and at < lines.index("module purge")
    # Open MPI's mpirun copies only the variables it is told to the other nodes' ranks; Hydra alike
    launch = next(line for line in lines if line.startswith("mpirun "))
    assert " -x TMPDIR " in launch
    plan = make_plan(site, JobRequest(nodes=1))
    assert plan.to_dict()["tmpdir"] == "$EPHEMERAL/tmp" and type(plan).from_dict(plan.to_dict()) == plan
    hydra = _profile(tmp_path, cx3, launcher="mpiexec", mpi="mpich", **{"filesystems.tmpdir": "/scratch/tmp",
                                                                       "launch.mpirun_layout": "restate",
                                                                       "launch.rank_cpus": "plan"})
    genvlist = make_plan(hydra, JobRequest(nodes=1)).launcher_argv
    assert "TMPDIR" in genvlist[genvlist.index("-genvlist") + 1].split(",")
    # a site without it sets none
    assert "TMPDIR" not in _render(load_site_file(cx3), tmp_path, nodes=1)
    with pytest.raises(Exception, match=r"filesystems\.tmpdir: \$WORKDIR is set neither by pbs"):
        _profile(tmp_path, cx3, **{"filesystems.tmpdir": "$WORKDIR/tmp"})
    with pytest.raises(Exception, match=r"tmpdir.*must be an absolute path"):
        _profile(tmp_path, cx3, **{"filesystems.tmpdir": "tmp"})


def test_closest_binds_by_each_gpus_own_cores_where_the_profile_names_them(tmp_path):
    """gpus[].cores: the cores the site's Slurm ties a GPU to (gres.conf Cores=), by which --gpu-bind=closest picks a
    task's GPUs. On the HPE Cray EX235a blade two GCDs share a NUMA domain but each has its own 8-core L3 region (OLCF
    Frontier: --gpu-bind=closest gives rank 0 on cores 1-7 GCD 4 alone), so closest gives each rank the plan's one
    GCD and the line says --gpu-bind=closest as the centres' lines do (Frontier's, and the ones published for CINES
    Adastra); by NUMA domain alone it would give two, and the line binds the plan's map instead."""
    frontier = SHIPPED / "frontier.yaml"
    gpus = yaml.safe_load(frontier.read_text())["node_kinds"]["mi250x"]["gpus"]
    l3 = {0: 48, 1: 56, 2: 16, 3: 24, 4: 0, 5: 8, 6: 32, 7: 40}  # GCD -> first core of its L3 region
    tied = [{**g, "cores": list(range(l3[i], l3[i] + 8))} for i, g in enumerate(gpus)]
    by_domain = make_plan(_profile(tmp_path, frontier, **{"launch.gpu_bind": "closest"}), JobRequest(nodes=2))
    assert "--gpu-bind=map_gpu:0,1,2,3,4,5,6,7" in by_domain.launcher_argv
    assert any("launch.gpu_bind: closest would not give" in n for n in by_domain.notes)
    site = _profile(tmp_path, frontier, **{"launch.gpu_bind": "closest", "node_kinds.mi250x.gpus": tied})
    plan = make_plan(site, JobRequest(nodes=2))
    assert "--gpu-bind=closest" in plan.launcher_argv and not any("map_gpu" in w for w in plan.launcher_argv)
    assert not any("closest would not give" in n for n in plan.notes)
    assert [r.gpus for r in plan.local_ranks()] == [(i,) for i in range(8)]
    # a GPU tied to other cores than the plan gives it: the line binds the plan's map, and the note names the field
    swapped = [{**g, "cores": tied[1 - i]["cores"]} if i < 2 else g for i, g in enumerate(tied)]
    plan = make_plan(_profile(tmp_path, frontier, **{"launch.gpu_bind": "closest", "node_kinds.mi250x.gpus": swapped}),
                     JobRequest(nodes=2))
    assert any(w.startswith("--gpu-bind=map_gpu:") for w in plan.launcher_argv)
    assert any("GPU(s) of its cores (gpus[].cores) are 1" in n for n in plan.notes), plan.notes
    for bad, says in (({**tied[0], "cores": [64]}, r"gpus\[0\]\.cores: core 64 is not on the node"),
                      ({**tied[0], "cores": [0]}, r"gpus\[0\]\.cores: core 0 is not in the GPU's NUMA domain 3"),
                      ({k: v for k, v in tied[0].items() if k != "cores"}, r"gpus\[\]\.cores: give every GPU its cores")):
        with pytest.raises(Exception, match=says):
            _profile(tmp_path, frontier, **{"node_kinds.mi250x.gpus": [bad, *tied[1:]]})


def test_a_pbs_group_is_charged_with_the_group_list_attribute(tmp_path):
    # a PBS centre that charges a group, not an account: JCAHPC Miyabi, "#PBS -W group_list=" (hpc-rookery's Miyabi
    # notes; Hokkaido's centre alike: "グループは#PBS -W group_list=<groupname>で指定できます")
    site = _profile(tmp_path, POLARIS, **{"defaults.account_flag": "-W group_list"})
    lines = _render(site, tmp_path, account="gz00").splitlines()
    assert "#PBS -W group_list=gz00" in lines
    assert not any(line.startswith(("#PBS -A", "#PBS -W group_list ")) for line in lines)
    # a PBS attribute: LSF has no such option
    with pytest.raises(HpcdlError, match=r"defaults.account_flag: -W group_list names no account under lsf"):
        _profile(tmp_path, SHIPPED / "summit.yaml", **{"defaults.account_flag": "-W group_list"})


def test_a_job_on_every_gpu_of_shared_nodes_asks_them_whole_where_the_centre_does(tmp_path):
    # BSC MareNostrum 5 ACC: one-GPU jobs share their node (BSC-CNS-EAPM/MN_bash_runners run_AF23_monomer.sh:
    # "--ntasks=1 --cpus-per-task=20 --gres=gpu:1", no --exclusive) and jobs on all four GPUs ask it whole
    # (jorditorresBCN/Marenostrum5 jacobi-template.slurm: "--gres=gpu:4 --exclusive")
    volta = SHIPPED / "volta-x86.yaml"  # 4 GPUs a node
    site = _profile(tmp_path, volta, **{"defaults.exclusive": False, "defaults.exclusive_when_full": True})
    full = render_job_script(site, make_plan(site, JobRequest(nodes=2)), {}, JobOptions()).splitlines()
    assert "#SBATCH --exclusive" in full
    one = render_job_script(site, make_plan(site, JobRequest(nodes=1, ranks_per_node=1)), {}, JobOptions())
    assert "#SBATCH --exclusive" not in one.splitlines()
    # --shared at render wins, and without the field a full job on shared nodes names none, as before
    assert "#SBATCH --exclusive" not in render_job_script(
        site, make_plan(site, JobRequest(nodes=2)), {}, JobOptions(exclusive=False)).splitlines()
    plain = _profile(tmp_path, volta, **{"defaults.exclusive": False})
    assert "#SBATCH --exclusive" not in render_job_script(
        plain, make_plan(plain, JobRequest(nodes=2)), {}, JobOptions()).splitlines()
    # meaningful only where jobs share nodes
    with pytest.raises(HpcdlError, match=r"exclusive_when_full: .*exclusive is true"):
        _profile(tmp_path, volta, **{"defaults.exclusive_when_full": True})


def test_an_srun_binding_variable_in_env_is_refused_for_the_launch_field_that_says_it(tmp_path):
    # BSC's MN5 scripts `export SLURM_CPU_BIND=none` (BSC-CNS-EAPM/MN_bash_runners run_helixFold3.sh); srun(1) reads
    # it as --cpu-bind, which the line hpcdl writes overrides, so in `env` the centre's choice would be lost in silence
    volta = _volta_plan_bound(tmp_path)
    with pytest.raises(HpcdlError, match=r"env\.SLURM_CPU_BIND: srun reads it as --cpu-bind.*launch\.args"):
        _profile(tmp_path, volta, **{"env.SLURM_CPU_BIND": "none"})
    with pytest.raises(HpcdlError, match=r"env\.SLURM_GPU_BIND: srun reads it as --gpu-bind"):
        _profile(tmp_path, volta, **{"env.SLURM_GPU_BIND": "none"})
    # the launch field says it, and the line carries it as written
    site = _profile(tmp_path, volta, **{"launch.args": ["--cpu-bind=none"]})
    assert "--cpu-bind=none" in make_plan(site, JobRequest(nodes=1)).launcher_argv


def test_a_shared_node_job_of_fewer_ranks_than_gpus_spreads_them_over_the_sockets_where_the_centre_does(tmp_path):
    # ULHPC's Iris GPU launchers (github.com/ULHPC/ulhpc-docs docs/slurm/launchers.md, "Iris (GPU)"): two GPUs of a
    # shared node as "--ntasks-per-node 2 --ntasks-per-socket 1 -c 7 -G 2", one task of a GPU's 7 cores on each
    # socket, where hpcdl took the first two GPUs, both on socket 0 (defaults.partial_gpus: spread)
    volta = SHIPPED / "volta-x86.yaml"  # 2 sockets of 20 cores, 4 GPUs, two a socket
    site = _profile(tmp_path, volta, **{"defaults.exclusive": False, "defaults.partial_gpus": "spread",
                                        "defaults.tasks_per_socket": True})
    two = make_plan(site, JobRequest(nodes=1, ranks_per_node=2))
    assert [r.gpus for r in two.local_ranks()] == [(0,), (2,)]
    # each still with its GPU's share of the node's 40 cores, not its socket's 20
    assert [r.cores for r in two.local_ranks()] == [tuple(range(10)), tuple(range(20, 30))]
    lines = render_job_script(site, two, {}, JobOptions()).splitlines()
    assert "#SBATCH --ntasks-per-socket=1" in lines and "#SBATCH --exclusive" not in lines
    # a full node is the same either way; unset, the first GPUs as before
    assert [r.gpus for r in make_plan(site, JobRequest(nodes=1)).local_ranks()] == [(0,), (1,), (2,), (3,)]
    first = make_plan(_profile(tmp_path, volta, **{"defaults.exclusive": False}), JobRequest(nodes=1, ranks_per_node=2))
    assert [r.gpus for r in first.local_ranks()] == [(0,), (1,)]
    # meaningful only where jobs share nodes
    with pytest.raises(HpcdlError, match=r"defaults\.partial_gpus: .*whole nodes"):
        _profile(tmp_path, volta, **{"defaults.partial_gpus": "spread"})


def test_a_pbs_queue_whose_chunks_are_gpus_asks_select_of_the_gpus_alone(tmp_path):
    # ALCF Sophia's by-gpu queue (argonne-lcf/user-guides docs/sophia/queueing-and-running-jobs/running-jobs.md):
    # 'The number of "chunks" you specify in your qsub (i.e., -l select=4) will be the number of GPUs you are
    # allocated, and they will all be on the same node. Valid values are 1, 2, 4, or 8'; ALCF's Dask job asks two GPUs
    # as "qsub -I -l select=2 ... -q by-gpu". A node chunk (select=1:ncpus=..:ngpus=2) would ask something else there.
    site = _profile(tmp_path, SHIPPED / "polaris.yaml", **{"defaults.partition_by_nodes": [
        {"max_nodes": 1, "max_gpus": 2, "partition": "by-gpu", "chunk": "gpu", "gpu_counts": [1, 2]},
        {"max_nodes": 496, "partition": "prod"}]})

    def header(nodes, ranks):
        plan = make_plan(site, JobRequest(nodes=nodes, ranks_per_node=ranks))
        return [line for line in render_job_script(site, plan, {}, JobOptions(account="a")).splitlines()
                if line.startswith("#PBS")]

    two = header(1, 2)
    assert "#PBS -l select=2" in two and "#PBS -q by-gpu" in two
    assert not any("place=" in line for line in two)  # scatter would put each GPU's chunk on a host of its own
    assert "#PBS -l select=1" in header(1, 1)
    # a whole node goes on to the next queue, in node chunks
    assert "#PBS -q prod" in header(1, 4)
    assert any(line.startswith("#PBS -l select=1:ncpus=") for line in header(1, 4))
    # a count the centre's qsub refuses is refused here, naming the field
    site3 = _profile(tmp_path, SHIPPED / "polaris.yaml", **{"defaults.partition_by_nodes": [
        {"max_nodes": 1, "max_gpus": 3, "partition": "by-gpu", "chunk": "gpu", "gpu_counts": [1, 2]},
        {"max_nodes": 496, "partition": "prod"}]})
    with pytest.raises(HpcdlError, match=r"^gpus: 3 GPUs is not a count queue 'by-gpu' .*gpu_counts 1, 2\)$"):
        render_job_script(site3, make_plan(site3, JobRequest(nodes=1, ranks_per_node=3)), {}, JobOptions(account="a"))


def test_gpu_chunks_are_refused_where_they_cannot_be(tmp_path):
    with pytest.raises(HpcdlError, match=r"chunk: gpu asks PBS chunks of one GPU, but the scheduler is slurm"):
        _profile(tmp_path, SHIPPED / "volta-x86.yaml", **{"node_kinds.v100.defaults": {"partition_by_nodes": [
            {"max_nodes": 1, "partition": "by-gpu", "chunk": "gpu"}]}})
    with pytest.raises(HpcdlError, match=r"chunk: gpu puts a job's GPUs on one node: give the queue max_nodes: 1"):
        _profile(tmp_path, SHIPPED / "polaris.yaml", **{"defaults.partition_by_nodes": [
            {"max_nodes": 2, "partition": "by-gpu", "chunk": "gpu"}]})
    with pytest.raises(HpcdlError, match=r"chunk:|gpu_counts"):
        _profile(tmp_path, SHIPPED / "polaris.yaml", **{"defaults.partition_by_nodes": [
            {"max_nodes": 1, "partition": "by-gpu", "chunk": "core"}]})
    # more ranks than the queue's one-slot GPU chunks: refused naming the field
    site = _profile(tmp_path, SHIPPED / "polaris.yaml", **{"defaults.partition_by_nodes": [
        {"max_nodes": 1, "partition": "by-gpu", "chunk": "gpu"}]})
    plan = make_plan(site, JobRequest(nodes=1, ranks_per_node=8, mode="per-core"))
    with pytest.raises(HpcdlError, match=r"^ranks_per_node: 8 ranks on .* \(defaults.partition_by_nodes: by-gpu "
                                         r"chunk: gpu\)"):
        render_job_script(site, plan, {}, JobOptions(account="a"))


def test_the_rendezvous_host_and_port_a_site_prolog_sets(tmp_path):
    """C3SE Alvis's job prolog sets PROEPI_HEAD_NODE and PROEPI_FREE_PORT, and its multi-node PyTorch job
    rendezvouses there (--rdzv_endpoint=${PROEPI_HEAD_NODE}:${PROEPI_FREE_PORT}): launch.master_addr_env and
    launch.master_port_env take MASTER_ADDR and MASTER_PORT from them, and a job whose prolog set none stops,
    naming the variable and the field."""
    olivia = SHIPPED / "olivia.yaml"
    site = _profile(tmp_path, olivia, **{"launch.master_addr": "host-name", "launch.master_port": None,
                                         "launch.master_addr_env": "SITE_HEAD", "launch.master_port_env": "SITE_PORT"})
    lines = _render(site, tmp_path, account="nn9999k").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("MASTER_ADDR="))
    block = [line for line in lines[start:start + 6] if line.startswith(("MASTER_", "export MASTER_"))]
    assert block[0].startswith("MASTER_ADDR=${SITE_HEAD:?") and any(b.startswith("MASTER_PORT=${SITE_PORT:?") for b in block)
    assert not any("scontrol show hostnames" in line or "% 12000" in line for line in lines)
    script = "\n".join(block) + '\necho "$MASTER_ADDR:$MASTER_PORT"'
    out = subprocess.run(["bash", "-euc", script], capture_output=True, text=True,
                         env={**os.environ, "SITE_HEAD": "alvis3-04", "SITE_PORT": "45678"})
    assert out.returncode == 0 and out.stdout.strip() == "alvis3-04:45678"
    env = {k: v for k, v in os.environ.items() if k not in ("SITE_HEAD", "SITE_PORT")}
    out = subprocess.run(["bash", "-euc", script], capture_output=True, text=True, env=env)
    assert out.returncode != 0 and "SITE_HEAD (launch.master_addr_env)" in out.stderr
    # a name only, nothing that runs; one way to name each; Slurm only
    with pytest.raises(HpcdlError, match=r"launch.master_addr_env"):
        _profile(tmp_path, olivia, **{"launch.master_addr": "host-name", "launch.master_addr_env": "X; rm -rf ~"})
    with pytest.raises(HpcdlError, match=r"launch.master_addr_env: .* keep one"):
        _profile(tmp_path, olivia, **{"launch.master_addr_env": "SITE_HEAD"})
    with pytest.raises(HpcdlError, match=r"launch.master_port_env: .* keep one"):
        _profile(tmp_path, olivia, **{"launch.master_port_env": "SITE_PORT"})
    with pytest.raises(HpcdlError, match=r"launch.master_port_env: a variable a Slurm job prolog sets, but the scheduler is pbs"):
        _profile(tmp_path, GADI, **{"launch.master_port_env": "SITE_PORT"})


UVA = Path(__file__).parents[1] / "platform" / "hpcdl" / "sites" / "profiles" / "uva-hpc-gpu.yaml"


def test_a_centre_image_under_a_folder_its_modules_set_expands_when_the_job_runs(tmp_path):
    """UVA runs PyTorch in the image its container modules name by folder: `module load apptainer pytorch/2.0.1`,
    then `apptainer run --nv $CONTAINERDIR/pytorch-2.0.1.sif`. The profile declares the variable a module sets
    (environment.module_env); the launch line expands it when the job runs, after the modules load, and nothing
    else in the image's name runs."""
    site = load_site_file(UVA)
    text = _render(site, tmp_path, nodes=1, account="mygroup")
    lines = text.splitlines()
    assert "module load apptainer pytorch/2.0.1" in lines
    launch = next(line for line in lines if " hpcdl train " in line)
    word = launch.split(" hpcdl train ", 1)[0].rsplit(" ", 1)[1]
    assert word == '"${CONTAINERDIR}"/pytorch-2.0.1.sif'
    out = subprocess.run(["bash", "-c", f"set -u; printf %s {word}"], capture_output=True, text=True,
                         env={"PATH": os.environ["PATH"], "CONTAINERDIR": "/apps/containers"})
    assert out.stdout == "/apps/containers/pytorch-2.0.1.sif"
    # a name holding anything but a variable reference stays literal
    site = _profile(tmp_path, UVA, **{"environment.image": "$CONTAINERDIR/$(id)`id`.sif"})
    word = next(x for x in _render(site, tmp_path, nodes=1, account="g").splitlines()
                if " hpcdl train " in x).split(" hpcdl train ", 1)[0].rsplit(" ", 1)[1]
    out = subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True, text=True,
                         env={"PATH": os.environ["PATH"], "CONTAINERDIR": "/c"})
    assert out.stdout == "/c/$(id)`id`.sif"


def test_an_image_variable_no_module_or_login_sets_is_refused_naming_the_field(tmp_path):
    with pytest.raises(Exception, match=r"environment\.image: \$IMAGES .*environment\.module_env: \[IMAGES\]"):
        _profile(tmp_path, UVA, **{"environment.image": "$IMAGES/pytorch.sif"})
    with pytest.raises(Exception, match=r"environment\.module_env: no module is loaded that could set \$CONTAINERDIR"):
        _profile(tmp_path, UVA, **{"environment.modules": [], "modules.runtime": None})
    with pytest.raises(Exception, match=r"module_env: the variables a container environment's image may name"):
        _profile(tmp_path, UVA, **{"environment.kind": "modules"})
    # a node kind's own environment is held to the same (N8 CIR Bede's GH200 kind runs NGC's container)
    bede = Path(__file__).parents[1] / "platform" / "hpcdl" / "sites" / "profiles" / "bede.yaml"
    with pytest.raises(Exception, match=r"node_kinds\.gh\.environment\.image: \$IMAGES .*"
                                        r"node_kinds\.gh\.environment\.module_env: \[IMAGES\]"):
        _profile(tmp_path, bede, **{"node_kinds.gh.environment.image": "$IMAGES/pytorch.sif"})
    site = _profile(tmp_path, bede, **{"node_kinds.gh.environment.image": "$IMAGES/pytorch.sif",
                                       "node_kinds.gh.environment.module_env": ["IMAGES"],
                                       "node_kinds.gh.environment.modules": ["ngc"]})
    assert site.environment_for("gh").image == "$IMAGES/pytorch.sif"


def test_folders_the_centres_runtime_binds_itself_are_not_bound_again(tmp_path):
    """UVA's Apptainer mounts "/home, /scratch, /standard, /project" into each container by default, and its
    container lines bind none: with container.system_binds the job binds no folder at or under them, and still
    binds the others."""
    site = _profile(tmp_path, UVA, **{"container.system_binds": ["/home", "/scratch/", "/standard", "/project"]})
    launch = next(x for x in _render(site, tmp_path, nodes=1, account="g").splitlines() if " hpcdl train " in x)
    assert "--bind" not in launch and launch.startswith("srun apptainer exec --nv ")
    # a folder outside them is bound; a library folder under one is not bound but still reaches the library path
    site = _profile(tmp_path, UVA, **{"container.system_binds": ["/scratch"], "filesystems.node_local": "/localscratch",
                                      "env.LD_LIBRARY_PATH": {"prepend": ["/scratch/plugins/lib"]}})
    launch = next(x for x in _render(site, tmp_path, nodes=1, account="g").splitlines() if " hpcdl train " in x)
    assert "--bind /localscratch " in launch and "--bind /scratch" not in launch
    assert "--env LD_LIBRARY_PATH=/scratch/plugins/lib:\\$LD_LIBRARY_PATH" in launch
    # a folder that only starts like one is bound
    site = _profile(tmp_path, UVA, **{"container.system_binds": ["/scratch"], "filesystems.scratch": "/scratch2/$USER"})
    assert '--bind /scratch2/"${USER}"' in _render(site, tmp_path, nodes=1, account="g")


def test_system_binds_are_absolute_folders_of_apptainer_or_singularity(tmp_path):
    with pytest.raises(Exception, match=r"system_binds\[0\]: 'scratch' is not an absolute host folder"):
        _profile(tmp_path, UVA, **{"container.system_binds": ["scratch"]})
    with pytest.raises(Exception, match=r"system_binds\[1\]: '/scratch/\$USER' is not an absolute host folder"):
        _profile(tmp_path, UVA, **{"container.system_binds": ["/home", "/scratch/$USER"]})
    with pytest.raises(Exception, match=r"container\.system_binds: the folders apptainer.conf's `bind path` binds; "
                                        r"the runtime is charliecloud"):
        _profile(tmp_path, UVA, **{"container.system_binds": ["/home"], "runtime": "charliecloud",
                                   "environment": None})


def test_a_cap_on_a_jobs_cpus_shrinks_each_rank_to_fit(tmp_path):
    """UAB Cheaha's A100 nodes: "#SBATCH --partition=amperenodes # up to 64 cpus per job", "--ntasks=2
    --cpus-per-task=32", and "requesting four GPUs will allocate two nodes": node_kinds.<kind>.defaults.max_job_cpus
    caps the CPUs of the job's ranks together, so each rank asks its share of the cap where its GPUs' share of the
    node would be more; a job with more ranks than the cap has CPUs, or on nodes it takes whole, is refused naming
    the field."""
    base = SHIPPED / "cheaha-gpu.yaml"
    site = _profile(tmp_path, base, **{"node_kinds.a100.defaults": {"max_job_cpus": 64}})

    def cores(nodes, rpn):
        plan = make_plan(site, JobRequest(nodes=nodes, ranks_per_node=rpn))
        return [len(r.cores) for r in plan.ranks], plan.notes

    assert cores(1, 1)[0] == [64]  # one GPU's share of the node's 128 cores is within the cap
    per_rank, notes = cores(1, 2)
    assert per_rank == [32, 32] and any("max_job_cpus" in n for n in notes)
    assert cores(2, 2)[0] == [16] * 4  # four GPUs on two nodes, 64 CPUs in all
    script = render_job_script(site, make_plan(site, JobRequest(nodes=2)), {}, JobOptions())
    assert "#SBATCH --cpus-per-task=16" in script and "#SBATCH --ntasks=4" in script
    # without the cap, each A100 comes with its half of the node
    plain = _profile(tmp_path, base, **{"node_kinds.a100.defaults": {}})
    assert [len(r.cores) for r in make_plan(plain, JobRequest(nodes=1)).ranks] == [64, 64]
    # more ranks than CPUs under the cap: refused, naming the field
    tiny = _profile(tmp_path, base, **{"node_kinds.a100.defaults": {"max_job_cpus": 3}})
    with pytest.raises(HpcdlError, match=r"^ranks_per_node: 4 ranks of a job on .*\(node_kinds.a100.defaults.max_job_cpus 3\)"):
        make_plan(tiny, JobRequest(nodes=2, ranks_per_node=2))
    # a job on nodes it takes whole holds every CPU of them: the cap cannot hold there
    with pytest.raises(HpcdlError, match=r"node_kinds.a100.defaults.max_job_cpus: .*defaults.exclusive"):
        _profile(tmp_path, base, **{"node_kinds.a100.defaults": {"max_job_cpus": 64}, "defaults.exclusive": True,
                                    "defaults.partial_gpus": "first"})


def test_a_queue_by_size_takes_a_job_by_its_time_too(tmp_path):
    """UAB Cheaha: "Use `amperenodes` partition for up to 12 hours or `amperenodes-medium` partition for up to 48
    hours": a queue by size bounded by its max_time alone takes the jobs whose time it runs, and a longer job goes
    on to the next queue; a job longer than every queue runs is refused naming the queue, as before (Purdue Anvil)."""
    site = _profile(tmp_path, SHIPPED / "cheaha-gpu.yaml", **{"defaults.max_time": "2-00:00:00",
                                                             "defaults.partition_by_nodes": [
        {"max_time": "12:00:00", "partition": "amperenodes"},
        {"max_time": "2-00:00:00", "partition": "amperenodes-medium"}]})
    plan = make_plan(site, JobRequest(nodes=1))

    def partition(time):
        script = render_job_script(site, plan, {}, JobOptions(time=time))
        return [line for line in script.splitlines() if line.startswith("#SBATCH --partition=")]

    assert partition("12:00:00") == ["#SBATCH --partition=amperenodes"]
    assert partition("12:00:01") == ["#SBATCH --partition=amperenodes-medium"]
    assert partition("1-12:00:00") == ["#SBATCH --partition=amperenodes-medium"]
    with pytest.raises(HpcdlError, match=r"^time: 3-00:00:00 is longer than site"):
        render_job_script(site, plan, {}, JobOptions(time="3-00:00:00"))
    # Purdue Anvil's queues by nodes and time: a 24-hour job of 32 nodes is still refused, naming wide's 12 hours
    anvil = load_site("anvil")
    big = make_plan(anvil, JobRequest(nodes=32))
    with pytest.raises(HpcdlError, match=r"queue 'wide' .*max_time 12:00:00"):
        render_job_script(anvil, big, {}, JobOptions(time="24:00:00", account="x"))
    # time bounds alone must grow down the list, as node bounds do
    with pytest.raises(HpcdlError, match=r"partition_by_nodes.*max_time"):
        _profile(tmp_path, SHIPPED / "cheaha-gpu.yaml", **{"defaults.partition_by_nodes": [
            {"max_time": "2-00:00:00", "partition": "amperenodes-medium"},
            {"max_time": "12:00:00", "partition": "amperenodes"}]})


def test_each_node_kind_runs_its_own_environment_where_the_centres_route_differs_by_kind(tmp_path):
    # N8 CIR Bede (github.com/N8-CIR-Bede/documentation): PyTorch on its ppc64le POWER9 nodes from a conda environment
    # with Open-CE's build ("The upstream Conda and pip distributions do not provide ppc64le pytorch packages"), on its
    # aarch64 GH200 nodes from "NGC Pytorch containers" under Apptainer: one machine, two routes, one per node kind
    site = _profile(tmp_path, PERLMUTTER, **{
        "node_kinds.cpu.environment": {"kind": "conda", "activate": "cpu-torch", "hook": True, "prefer": True},
        "node_kinds.gpu.environment": {"kind": "container", "image": "nersc/pytorch:ngc-22.05-v1", "prefer": True}})
    gpu = render_job_script(site, make_plan(site, JobRequest(nodes=1)), {}, JobOptions(account="p"))
    assert "nersc/pytorch:ngc-22.05-v1" in gpu and "conda activate" not in gpu
    cpu = render_job_script(site, make_plan(site, JobRequest(nodes=1, node_kind="cpu", use_gpus=False)), {},
                            JobOptions(account="p"))
    assert "conda activate cpu-torch" in cpu.splitlines() and "nersc/pytorch" not in cpu
    path = tmp_path / "cpu.sh"
    path.write_text(cpu)
    shellcheck(path)
    # a kind's own environment serves that kind alone; the site's still serves the kinds it names
    with pytest.raises(HpcdlError, match=r"node_kinds\.gpu\.environment\.node_kinds: a node kind's own environment"):
        _profile(tmp_path, PERLMUTTER, **{"node_kinds.gpu.environment": {
            "kind": "container", "image": "nersc/pytorch:ngc-22.05-v1", "node_kinds": ["cpu"]}})
    mixed = _profile(tmp_path, PERLMUTTER, **{
        "environment": {"kind": "conda", "activate": "site-env"},
        "node_kinds.gpu.environment": {"kind": "container", "image": "nersc/pytorch:ngc-22.05-v1"}})
    assert mixed.environment_for("gpu").image == "nersc/pytorch:ngc-22.05-v1"
    assert mixed.environment_for("cpu").activate == "site-env"


def test_a_centres_own_mpirun_command_lays_the_ranks_out_from_a_header_of_nodes_and_gpus(tmp_path):
    # N8 CIR Bede (github.com/N8-CIR-Bede/documentation, usage/index.rst): "#SBATCH --nodes=2", "#SBATCH --gres=gpu:4"
    # and nothing else of the layout, then "bede-mpirun --bede-par 1ppc <mpi_program>": "The bede-mpirun command takes
    # both ordinary mpirun arguments and the special --bede-par <distrib> option, allowing control over how MPI jobs
    # launch, e.g. one MPI rank per CPU core or GPU"
    csd3 = SHIPPED / "csd3-ampere.yaml"
    # CSD3's own line is Open MPI's count (mpirun_layout: count, -npernode, gpu-local): here a centre's command on its base
    own = {"launch.command": ["site-mpirun"], "launch.args": ["--site-par", "1ppg"], "defaults.total_tasks": False,
           **CSD3_RESTATED}
    site = _profile(tmp_path, csd3, **{**own, "launch.mpirun_layout": "command", "defaults.batch_request": "nodes"})
    text = _render(site, tmp_path, account="p-GPU")
    header = [line for line in text.splitlines() if line.startswith("#SBATCH ")]
    assert "#SBATCH --nodes=2" in header and "#SBATCH --gres=gpu:4" in header
    assert not any(word in line for line in header for word in ("--ntasks", "--cpus-per-task", "--exclusive"))
    line = next(line for line in text.splitlines() if line.startswith("site-mpirun "))
    assert line.startswith("site-mpirun -x ") and "--site-par 1ppg hpcdl train" in line
    assert not any(word in line.split() for word in ("-np", "--map-by", "--bind-to"))
    # restated, the line keeps hpcdl's own layout beside the centre's options
    restated = _render(_profile(tmp_path, csd3, **own), tmp_path, account="p-GPU")
    assert "site-mpirun -np 8 --map-by ppr:4:node:PE=32 --bind-to core" in restated
    with pytest.raises(HpcdlError, match=r"launch\.mpirun_layout: command leaves the layout to the centre's own "
                                         r"mpirun command \(launch\.command\).*launch\.command is unset"):
        _profile(tmp_path, csd3, **{"launch.mpirun_layout": "command"})
    # restated under a header of nodes alone, Open MPI's line still lays the ranks out, and the job exports the slots
    # Open MPI reads from Slurm (EPCC Cirrus; tests/test_mpirun_nodes_header.py): taken, not refused
    nodes_only = _render(_profile(tmp_path, csd3, **own, **{"defaults.batch_request": "nodes"}), tmp_path,
                         account="p-GPU")
    assert "site-mpirun -np 8 --map-by ppr:4:node:PE=32 --bind-to core" in nodes_only
    assert "SLURM_TASKS_PER_NODE='4(x2)'" in nodes_only


def test_a_refused_runtime_names_as_closest_an_image_built_for_the_nodes_cpu_family(tmp_path):
    # N8 CIR Bede's GH200 nodes start Open MPI 4 (openmpi/4.1.6) through bede-mpirun: hpcdl's aarch64 Open MPI image
    # (Open MPI 5) is refused for its MPI, and the refusal named an x86_64 image, refused for its CPU, as the closest
    # (JCAHPC Miyabi-G, another GH200 site whose mpirun is Open MPI, posed with an Open MPI 4)
    vista = _profile(tmp_path, SHIPPED / "miyabi-g.yaml", mpi_version="4.1.6")
    refusal = make_plan(vista, JobRequest(nodes=1)).runtime.refusal
    # either aarch64 image, each refused for its MPI alone, says what an Open MPI 4 GH200 site lacks
    assert re.search(r"closest: gh200-cuda(-openmpi)?: the image's (MPI|Open MPI) ", refusal), refusal


def test_a_node_taken_in_part_is_taken_only_by_the_gpu_counts_the_centre_takes(tmp_path):
    # SciNet Trillium: "you are only allowed to request exactly 1 GPU or a multiple of 4 GPUs. You cannot request
    # --gpus-per-node=2 or 3": a job on two or three of a node's four GPUs is refused before submission, naming the
    # field, where Trillium's scheduler would refuse it after; one GPU, or every GPU of each node, is taken
    volta = SHIPPED / "volta-x86.yaml"  # 4 GPUs a node
    site = _profile(tmp_path, volta, **{"defaults.exclusive": False, "defaults.partial_gpu_counts": [1]})
    assert make_plan(site, JobRequest(nodes=1, ranks_per_node=1)).ranks_per_node == 1
    assert make_plan(site, JobRequest(nodes=2)).ranks_per_node == 4
    for ranks in (2, 3):
        with pytest.raises(HpcdlError, match=rf"uses {ranks} of the 4 GPUs.*takes 1, 4 GPU\(s\).*"
                                             r"defaults\.partial_gpu_counts: 1"):
            make_plan(site, JobRequest(nodes=1, ranks_per_node=ranks))
    # a CPU-only job asks no GPU, and a site without the field takes any count
    assert make_plan(site, JobRequest(nodes=1, ranks_per_node=2, use_gpus=False)).ranks_per_node == 2
    assert make_plan(_profile(tmp_path, volta, **{"defaults.exclusive": False}),
                     JobRequest(nodes=1, ranks_per_node=2)).ranks_per_node == 2
    with pytest.raises(HpcdlError, match=r"defaults\.partial_gpu_counts"):
        _profile(tmp_path, volta, **{"defaults.partial_gpu_counts": [0]})


@pytest.mark.parametrize("base", ["narval.yaml", "polaris.yaml"])
def test_a_job_writes_its_run_folder_on_scratch_where_the_compute_nodes_cannot_write_home(tmp_path, base):
    # SciNet Trillium: "The home and project file systems are read-only on compute nodes on Trillium. Your compute
    # jobs, therefore, have to write to the scratch directory": filesystems.runs: scratch puts the run folder under
    # the shared scratch, wherever the job was submitted from; the default keeps it under the submit folder
    site = _profile(tmp_path, SHIPPED / base, **{"filesystems.scratch": "/scratch/$USER/wo rk$(x)",
                                                  "filesystems.runs": "scratch"})
    text = _render(site, tmp_path, nodes=1, account="abc")
    line = next(x for x in text.splitlines() if x.startswith("HPCDL_JOB_DIR="))
    env = {"PATH": os.environ["PATH"], "USER": "ann", "HPCDL_JOB_ID": "7", "SLURM_SUBMIT_DIR": "/home/ann",
           "PBS_O_WORKDIR": "/home/ann"}
    out = subprocess.run(["bash", "-c", f'{line}\nprintf %s "$HPCDL_JOB_DIR"'], env=env, capture_output=True,
                         text=True, check=True).stdout
    assert out == "/scratch/ann/wo rk$(x)/hpcdl-runs/hpcdl-7", out
    plain = _render(load_site(base.removesuffix(".yaml")), tmp_path, nodes=1, account="abc")
    assert "hpcdl-runs" in plain and "SCRATCH" not in next(x for x in plain.splitlines() if x.startswith("HPCDL_JOB_DIR="))
    with pytest.raises(HpcdlError, match=r"filesystems.*runs: 'scratch'.*scratch names no path"):
        _profile(tmp_path, SHIPPED / base, **{"filesystems.scratch": None, "filesystems.runs": "scratch"})


def test_a_job_shorter_than_the_centre_takes_is_refused_naming_the_field(tmp_path):
    # SciNet Trillium's GPU compute partition: "Min. walltime 15 minutes": a ten-minute job is refused at render,
    # naming the field, where the centre's scheduler would refuse it after submission
    site = _profile(tmp_path, SHIPPED / "narval.yaml", **{"defaults.min_time": "00:15:00"})
    assert "#SBATCH --time=00:15:00" in _render(site, tmp_path, nodes=1, time="00:15:00")
    with pytest.raises(HpcdlError, match=r"time: 00:10:00 is shorter .*defaults\.min_time 00:15:00"):
        _render(site, tmp_path, nodes=1, time="00:10:00")
    with pytest.raises(HpcdlError, match=r"time: 10 is shorter .*defaults\.min_time"):
        _render(site, tmp_path, nodes=1, time="10")
    for bad, says in (("a quarter hour", "not a time limit"), ("8-00:00:00", "longer than max_time"),
                      ("04:00:00", "longer than time 03:00:00")):
        with pytest.raises(HpcdlError, match=rf"defaults.*min_time.*{says}"):
            _profile(tmp_path, SHIPPED / "narval.yaml", **{"defaults.min_time": bad})


def test_a_centre_that_binds_each_task_to_its_sockets_gets_that_word_where_it_gives_the_plans_cores(tmp_path):
    """launch.cpu_bind_unit: sockets (JSC staff's JUPITER tutorial: 'srun --cpu-bind=sockets --unbuffered', a task
    per GH200): srun binds "tasks to sockets. Only the CPUs on the socket which have been allocated to the job will
    be used" (srun(1)), so the word is written where each rank holds every usable core of its socket(s) (one rank per
    socket, one per node), and --cpu-bind=cores, with a note naming the field, where two ranks share a socket. Beside
    a line that names no binding of hpcdl's it is refused, naming the field."""
    volta = _volta_plan_bound(tmp_path)  # 2 sockets x 20 cores, 4 GPUs
    site = _profile(tmp_path, volta, **{"launch.cpu_bind_unit": "sockets"})
    for request, word in (({"mode": "per-socket"}, "--cpu-bind=sockets"), ({"mode": "per-node"}, "--cpu-bind=sockets"),
                          ({}, "--cpu-bind=cores")):
        plan = make_plan(site, JobRequest(nodes=2, **request))
        assert word in plan.launcher_argv, (request, plan.launcher_argv)
        assert [r.cores for r in plan.ranks] == [r.cores for r in make_plan(load_site_file(volta), JobRequest(
            nodes=2, **request)).ranks]
    assert any("launch.cpu_bind_unit: sockets would not give this plan's cores (local rank 0 holds cores 0-9, but the "
               "usable cores of its socket(s) 0 are 0-19)" in n for n in make_plan(site, JobRequest(nodes=2)).notes)
    assert not any("cpu_bind_unit" in n for n in make_plan(site, JobRequest(nodes=2, mode="per-socket")).notes)
    for change, says in (({"launch.cpu_bind_default": "auto"}, r"launch.cpu_bind_default: auto says the line names none"),
                         ({"launch.args": ["--cpu-bind=none"]}, r"launch.args say --cpu-bind=none"),
                         ({"launch.spawner": "torchrun"}, r"launch.spawner: torchrun starts one task per node")):
        with pytest.raises(HpcdlError, match=rf"launch.cpu_bind_unit: sockets [^\n]*{says}"):
            _profile(tmp_path, volta, **{"launch.cpu_bind_unit": "sockets", **change})
    with pytest.raises(HpcdlError, match=r"launch.cpu_bind_unit: sockets is srun's --cpu-bind=sockets, but the "
                                         r"launcher is mpirun"):
        _profile(tmp_path, GADI, **{"launch.cpu_bind_unit": "sockets"})
    with pytest.raises(HpcdlError, match=r"cpu_bind_unit"):
        _profile(tmp_path, volta, **{"launch.cpu_bind_unit": "threads"})


def test_ranks_lie_evenly_over_the_sockets_where_the_centre_lays_them_so_though_the_gpus_share_one_socket(tmp_path):
    # ULHPC's hwloc-ls of an Iris GPU node (github.com/ULHPC/ulhpc-docs docs/jobs/hwloc.md): "There are 4 GPUs attached
    # to socket 0", while ULHPC's GPU jobs ask "--ntasks-per-node 4 --ntasks-per-socket 2 -c 7 -G 4", two tasks of a
    # GPU's 7 cores on each socket; hpcdl put every rank on its GPU's socket, four ranks crowded on socket 0
    volta = SHIPPED / "volta-x86.yaml"  # 2 sockets of 20 cores, 4 GPUs
    on_socket_0 = [{"model": "Tesla V100-PCIE-32GB", "socket": 0, "memory_gb": 32}] * 4
    crowded = _profile(tmp_path, volta, **{"node_kinds.v100.gpus": on_socket_0, "defaults.tasks_per_socket": True})
    assert {r.socket for r in make_plan(crowded, JobRequest(nodes=1)).local_ranks()} == {0}
    site = _profile(tmp_path, volta, **{"node_kinds.v100.gpus": on_socket_0, "defaults.tasks_per_socket": True,
                                        "defaults.gpu_rank_sockets": "even"})
    plan = make_plan(site, JobRequest(nodes=1))
    assert [(r.socket, r.gpus) for r in plan.local_ranks()] == [(0, (0,)), (0, (1,)), (1, (2,)), (1, (3,))]
    # each socket's 20 cores shared by its two ranks, as on a node whose GPUs are spread
    assert [r.cores for r in plan.local_ranks()] == [tuple(range(10)), tuple(range(10, 20)), tuple(range(20, 30)),
                                                    tuple(range(30, 40))]
    assert "#SBATCH --ntasks-per-socket=2" in render_job_script(site, plan, {}, JobOptions()).splitlines()
    # a node the job shares: its two GPUs' ranks one on each socket, each with its GPU's share of the cores
    shared = _profile(tmp_path, volta, **{"node_kinds.v100.gpus": on_socket_0, "defaults.tasks_per_socket": True,
                                          "defaults.gpu_rank_sockets": "even", "defaults.exclusive": False,
                                          "defaults.partial_gpus": "spread"})
    two = make_plan(shared, JobRequest(nodes=1, ranks_per_node=2))
    assert [(r.socket, r.gpus, r.cores) for r in two.local_ranks()] == [(0, (0,), tuple(range(10))),
                                                                      (1, (1,), tuple(range(20, 30)))]
    # Slurm picking each task's GPUs by its cores cannot give a rank a GPU of the other socket
    with pytest.raises(HpcdlError, match=r"defaults\.gpu_rank_sockets: even .*launch\.gpu_bind: closest"):
        _profile(tmp_path, volta, **{"defaults.gpu_rank_sockets": "even", "launch.gpu_bind": "closest"})
    with pytest.raises(HpcdlError, match=r"defaults\.gpu_rank_sockets"):
        _profile(tmp_path, volta, **{"defaults.gpu_rank_sockets": "socket"})


def test_a_conda_environment_sources_the_conda_install_the_centres_scripts_source(tmp_path):
    # MASSIVE M3's GPU jobs (github.com/ML4AU/M3-GPU-jobs, single-gpu-examples/resnet_job.bash): 'module load
    # cuda/10.1', 'module load cudnn/7.6.5.32-cuda10', 'source /path/to/miniconda/bin/activate', 'conda activate
    # tf2-gpu': conda lives in the user's own install, on no module's PATH, so neither `conda activate` alone nor
    # conda's shell hook (which runs `conda`) finds it; the job sources the install's script first
    site = _profile(tmp_path, POLARIS, **{"environment.init": "$HOME/miniconda/bin/activate",
                                          "environment.activate": "tf2-gpu"})
    lines = _render(site, tmp_path, account="p").splitlines()
    source = next(i for i, line in enumerate(lines) if line.startswith("source ") and "miniconda" in line)
    assert lines[source] == 'source "${HOME}"/miniconda/bin/activate'
    assert lines[source + 1] == "conda activate tf2-gpu"
    assert source > max(i for i, line in enumerate(lines) if line.startswith("module load "))
    # a node kind's own environment sources its own
    kind = _profile(tmp_path, POLARIS, **{"node_kinds.a100.environment": {
        "kind": "conda", "init": "/apps/miniconda3/bin/activate", "activate": "torch", "prefer": True}})
    assert "source /apps/miniconda3/bin/activate" in _render(kind, tmp_path, account="p").splitlines()
    # conda's alone; one way to define its shell function; a path the job can resolve
    with pytest.raises(HpcdlError, match=r"environment.*init: the script that brings conda, not for a venv environment"):
        _profile(tmp_path, POLARIS, **{"environment.kind": "venv", "environment.activate": "/opt/venv",
                                       "environment.init": "/opt/miniconda/bin/activate"})
    with pytest.raises(HpcdlError, match=r"environment.*init: the sourced script and hook both"):
        _profile(tmp_path, POLARIS, **{"environment.init": "/opt/miniconda/bin/activate", "environment.hook": True})
    with pytest.raises(HpcdlError, match=r"environment\.init: \$MINICONDA is set neither"):
        _profile(tmp_path, POLARIS, **{"environment.init": "$MINICONDA/bin/activate"})
    with pytest.raises(HpcdlError, match=r"environment.*init.*must be an absolute path"):
        _profile(tmp_path, POLARIS, **{"environment.init": "miniconda/bin/activate"})


GAUTSCHI = Path(__file__).parents[1] / "platform" / "hpcdl" / "sites" / "profiles" / "gautschi-gpu.yaml"


def test_a_centre_variable_under_a_folder_its_runtime_binds_itself_is_not_bound_again(tmp_path):
    """Purdue RCAC's scratch is "/scratch/gautschi/$USER ($RCAC_SCRATCH)", and its Apptainer "auto-mounts /home,
    /depot, and /scratch into containers": with container.system_bound_env the job binds no folder under
    $RCAC_SCRATCH, as RCAC's container lines bind none; without it hpcdl cannot know where the variable points and
    binds it."""
    site = _profile(tmp_path, GAUTSCHI)
    launch = next(x for x in _render(site, tmp_path, nodes=1, account="g").splitlines() if " hpcdl train " in x)
    assert "RCAC_SCRATCH" not in launch and launch.startswith("srun --ntasks=8 apptainer exec --nv ")
    site = _profile(tmp_path, GAUTSCHI, **{"container.system_bound_env": {}})
    assert '--bind "${RCAC_SCRATCH}"' in _render(site, tmp_path, nodes=1, account="g")
    # ${NAME} and a folder under it alike; a variable that only starts like it is bound
    site = _profile(tmp_path, GAUTSCHI, **{"filesystems.scratch": "${RCAC_SCRATCH}/runs"})
    assert "RCAC_SCRATCH" not in next(x for x in _render(site, tmp_path, nodes=1, account="g").splitlines()
                                      if " hpcdl train " in x)
    site = _profile(tmp_path, GAUTSCHI, **{"filesystems.scratch": "$RCAC_SCRATCH2", "provides_env": ["RCAC_SCRATCH",
                                                                                                    "RCAC_SCRATCH2"]})
    assert '--bind "${RCAC_SCRATCH2}"' in _render(site, tmp_path, nodes=1, account="g")


def test_system_bound_env_names_a_variable_every_job_has_under_a_system_bind(tmp_path):
    with pytest.raises(Exception, match=r"system_bound_env\.RCAC_SCRATCH: /data is not at or under a folder of "
                                        r"container\.system_binds"):
        _profile(tmp_path, GAUTSCHI, **{"container.system_bound_env": {"RCAC_SCRATCH": "/data"}})
    with pytest.raises(Exception, match=r"system_bound_env\.RCAC_SCRATCH: '\$HOME/x' is not an absolute host folder"):
        _profile(tmp_path, GAUTSCHI, **{"container.system_bound_env": {"RCAC_SCRATCH": "$HOME/x"}})
    with pytest.raises(Exception, match=r"container\.system_bound_env\.SCRATCH: not a variable every job has"):
        _profile(tmp_path, GAUTSCHI, **{"container.system_bound_env": {"SCRATCH": "/scratch"}})
    with pytest.raises(Exception, match=r"system_bound_env\.\$X: '\$X' is not a variable's name"):
        _profile(tmp_path, GAUTSCHI, **{"container.system_bound_env": {"$X": "/scratch"}})
    # HOME is every job's: /home/$USER lies under /home
    _profile(tmp_path, GAUTSCHI, **{"container.system_bound_env": {"RCAC_SCRATCH": "/scratch/gautschi", "HOME": "/home"}})


def test_a_job_on_one_gpu_asks_it_as_the_centre_asks_a_single_gpu(tmp_path):
    # Calcul Quebec Rorqual: "One H100-80gb : --gpus=h100:1", "Multiple H100-80gb per node: --gpus-per-node=h100:2":
    # a job on one GPU in all asks the job's total, every larger job its GPUs per node, header and restated srun alike
    site = _profile(tmp_path, PERLMUTTER, **{"defaults.single_gpu_request": "gpus",
                                             "node_kinds.gpu.defaults.gpu_type": "a100"})
    one = make_plan(site, JobRequest(nodes=1, ranks_per_node=1))
    lines = render_job_script(site, one, {}, JobOptions()).splitlines()
    assert "#SBATCH --gpus=a100:1" in lines and not any(x.startswith("#SBATCH --gpus-per-") for x in lines)
    assert "--gpus=a100:1" in one.launcher_argv and not any(w.startswith("--gpus-per-") for w in one.launcher_argv)
    for nodes, ranks, word in ((1, 2, "--gpus-per-node=a100:2"), (2, 1, "--gpus-per-node=a100:1"),
                               (2, 4, "--gpus-per-node=a100:4")):
        plan = make_plan(site, JobRequest(nodes=nodes, ranks_per_node=ranks))
        lines = render_job_script(site, plan, {}, JobOptions()).splitlines()
        assert f"#SBATCH {word}" in lines and not any(x.startswith("#SBATCH --gpus=") for x in lines)
        assert word in plan.launcher_argv
    # unset, one GPU is asked as gpu_request says
    plain = _profile(tmp_path, PERLMUTTER, **{"node_kinds.gpu.defaults.gpu_type": "a100"})
    assert "#SBATCH --gpus-per-node=a100:1" in render_job_script(
        plain, make_plan(plain, JobRequest(nodes=1, ranks_per_node=1)), {}, JobOptions()).splitlines()
    with pytest.raises(HpcdlError, match=r"defaults.single_gpu_request: gpus is how a Slurm header .* scheduler is pbs"):
        _profile(tmp_path, GADI, **{"defaults.single_gpu_request": "gpus"})
    with pytest.raises(HpcdlError, match=r"defaults.single_gpu_request: gpus .* gpu_request none"):
        _profile(tmp_path, PERLMUTTER, **{"defaults.single_gpu_request": "gpus", "defaults.gpu_request": "none"})
    with pytest.raises(HpcdlError, match=r"defaults.*single_gpu_request"):
        _profile(tmp_path, PERLMUTTER, **{"defaults.single_gpu_request": "gpus-per-task"})


def test_the_rendezvous_port_from_the_job_id_as_the_centre_derives_it(tmp_path):
    # NYU Torch's DDP job: "export MASTER_PORT=$(expr 10000 + $(echo -n $SLURM_JOBID | tail -c 4))", 10000 + the id's
    # last four digits (github.com/NYU-RTS/rts-docs, docs/hpc/08_ml_ai_hpc/03_pytorch_dpp.md @ 7e46f010)
    site = _profile(tmp_path, SHIPPED / "della-gpu.yaml", **{"launch.master_port_command": [],
                                                            "launch.master_port_base": 10000,
                                                            "launch.master_port_span": 10000})
    lines = _render(site, tmp_path).splitlines()
    line = "export MASTER_PORT=$((10000 + SLURM_JOB_ID % 10000))"
    assert line in lines and not any("% 12000" in x for x in lines)
    for job_id, port in (("1234567", "14567"), ("42", "10042")):
        out = subprocess.run(["bash", "-euc", f'{line}\necho "$MASTER_PORT"'], capture_output=True, text=True,
                             check=True, env={**os.environ, "SLURM_JOB_ID": job_id})
        assert out.stdout.strip() == port
    # PBS and LSF derive it alike from their own job ids
    gadi = _profile(tmp_path, GADI, **{"launch.master_port_base": 30000, "launch.master_port_span": 5000})
    assert "export MASTER_PORT=$((30000 + hpcdl_job_number % 5000))" in _render(gadi, tmp_path, account="a00").splitlines()
    minerva = _profile(tmp_path, SHIPPED / "minerva.yaml", **{"launch.master_port_base": 30000,
                                                             "launch.master_port_span": 5000})
    assert "export MASTER_PORT=$((30000 + LSB_JOBID % 5000))" in _render(minerva, tmp_path, account="acc_demo").splitlines()
    with pytest.raises(HpcdlError, match=r"launch.master_port_base: .* give both"):
        _profile(tmp_path, GADI, **{"launch.master_port_base": 30000})
    with pytest.raises(HpcdlError, match=r"launch.master_port_span: base 60000 \+ span 10000 reaches port 69999"):
        _profile(tmp_path, GADI, **{"launch.master_port_base": 60000, "launch.master_port_span": 10000})
    with pytest.raises(HpcdlError, match=r"launch.master_port_base: .* launch.master_port gives the port another way"):
        _profile(tmp_path, SHIPPED / "frontier.yaml", **{"launch.master_port_base": 30000, "launch.master_port_span": 5000})
    with pytest.raises(HpcdlError, match=r"launch.master_port_base: .* launch.master_port_command gives"):
        _profile(tmp_path, SHIPPED / "della-gpu.yaml", **{"launch.master_port_base": 30000, "launch.master_port_span": 5000})


def test_the_centres_image_with_the_users_overlay_and_its_environment_script(tmp_path):
    # NYU Torch's "Apptainer with Conda": "apptainer exec --nv --overlay /scratch/<NetID>/pytorch-example/
    # my_pytorch.ext3:ro /share/apps/images/cuda-13.3.1-ubuntu-26.04.sif /bin/bash -c "source /ext3/env.sh; python
    # torch-test.py"" (github.com/NYU-RTS/rts-docs, docs/hpc/07_containers/03_apptainer_with_conda.md @ 45f70b21)
    script = tmp_path / "env.sh"
    script.write_text("export HPCDL_T=from-the-overlay\n")
    site = _profile(tmp_path, SHIPPED / "nyu-torch.yaml", **{"environment.source": str(script)})
    text = _render(site, tmp_path, account="torch_pr_1_2")
    line = next(x for x in text.splitlines() if x.startswith("srun "))
    words = shlex.split(line)
    image = words.index("/share/apps/images/cuda-13.3.1-ubuntu-26.04.sif")
    # the overlay before the image, read-only, its $SCRATCH expanded by the job
    assert words[image - 2 : image] == ["--overlay", "${SCRATCH}/pytorch-example/my_pytorch.ext3:ro"]
    assert ' --overlay "${SCRATCH}"/pytorch-example/my_pytorch.ext3:ro ' in line
    assert words[image + 1 : image + 3] == ["/bin/bash", "-c"] and words[image + 4 : image + 7] == ["bash", "hpcdl", "train"]
    # the shell sources the script, then runs the program with its words as they were
    inside = line[line.index("/bin/bash") : line.index(" hpcdl train")] + " printenv HPCDL_T"
    out = subprocess.run(["bash", "-c", inside], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "from-the-overlay"
    # an image the job names is its own: neither the overlay nor the script
    plan = make_plan(site, JobRequest(nodes=1))
    own = render_job_script(site, plan, {}, JobOptions(account="torch_pr_1_2", image="/scratch/me/mine.sif"))
    assert "--overlay" not in own and "/bin/bash -c" not in own
    # what the profile may not say, each refused naming the field
    nyu = SHIPPED / "nyu-torch.yaml"
    with pytest.raises(HpcdlError, match=r"environment.overlays: --overlay is Apptainer's and Singularity's; the runtime is shifter"):
        _profile(tmp_path, nyu, runtime="shifter")
    with pytest.raises(HpcdlError, match=r"overlays\[0\]: .* ':' as the mode's separator"):
        _profile(tmp_path, nyu, **{"environment.overlays": ["$SCRATCH/my.ext3:rw"]})
    with pytest.raises(HpcdlError, match=r"environment.overlays\[0\]: \$PROJECTDIR is set neither"):
        _profile(tmp_path, nyu, **{"environment.overlays": ["$PROJECTDIR/my.ext3"]})
    with pytest.raises(HpcdlError, match=r"source: '\$HOME/env.sh' is not an absolute path"):
        _profile(tmp_path, nyu, **{"environment.source": "$HOME/env.sh"})
    with pytest.raises(HpcdlError, match=r"overlays: a container environment's; this is a conda environment"):
        _profile(tmp_path, nyu, environment={"kind": "conda", "overlays": ["/scratch/x.ext3"]})


def test_one_partition_runs_longer_jobs_under_another_qos(tmp_path):
    """CU Boulder Alpine (CURC's "Alpine Hardware": aa100 "24H, 7D"; QoS "normal | Default | 1D", "long | Longer
    wall times | 7D"): one partition takes a job of a day under its default QOS and one of a week under
    `--qos=long`. The time limit is the chosen entry's, not that of every entry naming the partition; a job no
    entry runs that long is still refused, naming the longest."""
    volta = SHIPPED / "volta-x86.yaml"
    site = _profile(tmp_path, volta, **{"defaults.exclusive": False, "defaults.max_time": "10-00:00:00",
                                        "defaults.partition_by_nodes": [
                                            {"partition": "aa100", "max_time": "24:00:00"},
                                            {"partition": "aa100", "qos": "long", "max_time": "7-00:00:00"}]})
    day = _render(site, tmp_path, nodes=1, time="24:00:00").splitlines()
    assert "#SBATCH --partition=aa100" in day and not any(line.startswith("#SBATCH --qos") for line in day)
    week = _render(site, tmp_path, nodes=1, time="3-00:00:00").splitlines()
    assert "#SBATCH --partition=aa100" in week and "#SBATCH --qos=long" in week
    with pytest.raises(HpcdlError, match=r"^time: 8-00:00:00 is longer than queue 'aa100' of site 'volta-x86' runs "
                                         r"\(defaults.partition_by_nodes: aa100 max_time 7-00:00:00\)$"):
        render_job_script(site, make_plan(site, JobRequest(nodes=1)), {}, JobOptions(time="8-00:00:00"))


def test_a_conda_environment_entered_with_condas_activate_script_where_the_centre_does(tmp_path):
    # MIT ORCD Engaging's PyTorch jobs (github.com/mit-orcd/orcd-docs-edit @0f2610108c33f6d62bc16fe2ef1727d12d1beb26,
    # docs/recipes/torch-gpu.md): 'module load miniforge/24.3.0-0', 'source activate pytorch': conda's own activate
    # script, on the PATH the Miniforge module sets, which needs no shell function (no `conda init`, no hook)
    site = _profile(tmp_path, POLARIS, **{"environment.activate_command": "source",
                                          "environment.activate": "pytorch"})
    lines = _render(site, tmp_path, account="p").splitlines()
    entered = lines.index("source activate pytorch")
    assert entered > max(i for i, line in enumerate(lines) if line.startswith("module load "))
    assert not any(line.startswith("conda activate") for line in lines)
    # the default stays `conda activate`
    assert any(line.startswith("conda activate") for line in _render(load_site_file(POLARIS), tmp_path, account="p").splitlines())
    with pytest.raises(HpcdlError, match=r"environment.*activate_command: conda's activate script, not for a venv environment"):
        _profile(tmp_path, POLARIS, **{"environment.kind": "venv", "environment.activate": "/opt/venv",
                                       "environment.activate_command": "source"})
    with pytest.raises(HpcdlError, match=r"environment.*activate_command: source .* hook"):
        _profile(tmp_path, POLARIS, **{"environment.activate_command": "source", "environment.hook": True})
    with pytest.raises(HpcdlError, match=r"environment.*activate_command"):
        _profile(tmp_path, POLARIS, **{"environment.activate_command": "eval"})


def test_an_env_path_under_a_variable_expands_only_its_variable_references(tmp_path):
    # Texas A&M HPRC's ACES job exports HF_HOME="$SCRATCH/.cache/huggingface" (tamu-edu/dor-hprc-drona-environments,
    # run_slurm.sh): a plain env value is exported quoted and reaches the job as a literal $SCRATCH, so
    # env: {HF_HOME: {path: ...}} is one path whose $NAME references expand, and nothing else in it runs
    site = _profile(tmp_path, POLARIS, **{"provides_env": ["SCRATCH"],
                                          "env.HF_HOME": {"path": "$SCRATCH/.cache/$(touch pwned)`id`"}})
    text = _render(site, tmp_path, account="p")
    line = next(x for x in text.splitlines() if x.startswith("export HF_HOME="))
    env = {"PATH": os.environ["PATH"], "SCRATCH": "/scratch/user/u"}
    out = subprocess.run(["bash", "-uc", f"cd {tmp_path} && {line} && printf %s \"$HF_HOME\""],
                         capture_output=True, text=True, env=env)
    assert out.returncode == 0 and out.stdout == "/scratch/user/u/.cache/$(touch pwned)`id`"
    assert not (tmp_path / "pwned").exists()
    plan = make_plan(site, JobRequest(nodes=1))
    assert plan.env_paths["HF_HOME"].path == "$SCRATCH/.cache/$(touch pwned)`id`" and "HF_HOME" not in plan.env


@pytest.mark.parametrize("value,match", [
    ({"path": "$NOPE/x"}, r"NOPE"),
    ({"path": "/a", "prepend": ["/b"]}, r"env\.HF_HOME.*path is the whole value"),
    ({}, r"env\.HF_HOME.*give path"),
])
def test_an_env_path_is_one_path_under_a_variable_the_job_has(tmp_path, value, match):
    with pytest.raises(HpcdlError, match=match):
        _profile(tmp_path, POLARIS, **{"env.HF_HOME": value})


def test_the_library_path_is_never_replaced_whole(tmp_path):
    with pytest.raises(HpcdlError, match=r"env\.LD_LIBRARY_PATH: path would replace the library path whole"):
        _profile(tmp_path, POLARIS, **{"env.LD_LIBRARY_PATH": {"path": "/opt/lib"}})


def test_a_node_kind_for_gpu_jobs_only_refuses_a_cpu_only_job(tmp_path):
    """Cyfronet Athena: "Please use Athena only for GPU-enabled jobs. Running extensive workloads not using GPUs will
    result in account suspension." (https://docs.cyfronet.pl/display/~plgpawlik/Athena):
    node_kinds.<kind>.defaults.gpu_jobs_only refuses a plan whose ranks hold no GPU there, naming the field, where
    the centre would sanction the job after it ran; a GPU job is planned as before, and a kind without GPUs cannot
    carry it."""
    base = SHIPPED / "raven.yaml"
    site = _profile(tmp_path, base, **{"node_kinds.gpu.defaults.gpu_jobs_only": True})
    with pytest.raises(HpcdlError, match=r"^GPUs: .*\(node_kinds\.gpu\.defaults\.gpu_jobs_only\)"):
        make_plan(site, JobRequest(nodes=1, use_gpus=False))
    plan = make_plan(site, JobRequest(nodes=1))
    assert [r.gpus for r in plan.ranks] == [(0,), (1,), (2,), (3,)]
    # without it a CPU-only job on the GPU nodes is planned, as any site's
    assert not make_plan(load_site_file(base), JobRequest(nodes=1, use_gpus=False)).ranks[0].gpus
    # the shipped Athena carries it
    with pytest.raises(HpcdlError, match=r"gpu_jobs_only"):
        make_plan(load_site("athena"), JobRequest(nodes=1, use_gpus=False))
    with pytest.raises(HpcdlError, match=r"node_kinds\.cpu\.defaults\.gpu_jobs_only: the kind has no GPUs"):
        _profile(tmp_path, SHIPPED / "perlmutter.yaml", **{"node_kinds.cpu.defaults.gpu_jobs_only": True})


ALEX = Path(__file__).parents[1] / "platform" / "hpcdl" / "sites" / "profiles" / "alex.yaml"


def _cores_by_rank(site, rpn, kind="a100"):
    plan = make_plan(site, JobRequest(nodes=1, ranks_per_node=rpn, node_kind=kind))
    return {r.local_rank: (r.gpus, r.cores) for r in plan.ranks}


def test_two_gpus_on_one_numa_domain_spill_onto_the_empty_domain_beside_it(tmp_path):
    # NHR@FAU Alex: two A100 on each of NUMA domains 3, 1, 7, 5 (the A100-node documentation's "GPU : CPU affinity"
    # table, quoted by a job on Alex, github.com/vincent-maillou/serinv bench/slurm_select_gpu.sh) and 16 cores a
    # GPU; that job binds its eight tasks "to use all NUMA domains", GPU 0 on 32-47 and GPU 1 on 48-63
    site = load_site("alex")
    full = _cores_by_rank(site, 8)
    assert full[0] == ((0,), tuple(range(32, 48))) and full[1] == ((1,), tuple(range(48, 64)))
    assert full[2] == ((2,), tuple(range(0, 16))) and full[7] == ((7,), tuple(range(80, 96)))
    # a job on part of a node it shares: one GPU its domain's own cores, two GPUs of a domain a run that holds it
    assert _cores_by_rank(site, 1)[0] == ((0,), tuple(range(48, 64)))
    two = _cores_by_rank(site, 2)
    assert two[0] == ((0,), tuple(range(32, 48))) and two[1] == ((1,), tuple(range(48, 64)))
    # three GPUs, two sharing domain 3 and one alone on domain 1: 16 cores each still, as the node's share per GPU
    three = _cores_by_rank(site, 3)
    assert three == {0: ((0,), tuple(range(32, 48))), 1: ((1,), tuple(range(48, 64))), 2: ((2,), tuple(range(16, 32)))}
    # the default keeps every rank on its GPU's domain: the pair splits domain 3, half the socket idle
    kept = _profile(tmp_path, ALEX, **{"node_kinds.a100.shared_domain_cores": "domain"})
    full = _cores_by_rank(kept, 8)
    assert full[0] == ((0,), tuple(range(48, 56))) and full[1] == ((1,), tuple(range(56, 64)))


def test_shared_domain_cores_is_domain_or_spill(tmp_path):
    with pytest.raises(HpcdlError, match=r"shared_domain_cores"):
        _profile(tmp_path, ALEX, **{"node_kinds.a100.shared_domain_cores": "spread"})


def test_a_framework_gets_its_own_directives_where_the_centre_asks_them(tmp_path):
    # KISTI Neuron (wjnadia/neuron-guide @0a4113f6216ea086a3c254296ea294a681ef5d41,
    # system/running-jobs-through-scheduler-slurm.md): every job must name its application with --comment, "pytorch"
    # for PyTorch, "tensorflow" for TensorFlow, "etc" for others; its Keras job asks "#SBATCH --comment=tensorflow"
    volta = SHIPPED / "volta-x86.yaml"
    site = _profile(tmp_path, volta, **{"defaults.directives": ["--network=x"],
                                        "defaults.framework_directives": {"pytorch": ["--comment=pytorch"],
                                                                          "tensorflow": ["--comment=tensorflow"]}})

    def directives(framework):
        plan = make_plan(site, JobRequest(nodes=1, framework=framework, image="/opt/images/mine.sif"))
        text = render_job_script(site, plan, {}, JobOptions())
        return [line for line in text.splitlines() if line.startswith("#SBATCH --comment") or line == "#SBATCH --network=x"]

    assert directives("pytorch") == ["#SBATCH --network=x", "#SBATCH --comment=pytorch"]
    assert directives("tensorflow") == ["#SBATCH --network=x", "#SBATCH --comment=tensorflow"]
    # a framework the profile names none for gets only the site's own
    assert directives("mxnet") == ["#SBATCH --network=x"]
    with pytest.raises(HpcdlError, match=r"defaults\.framework_directives\.pytorch\[0\]: .* is not one scheduler option"):
        _profile(tmp_path, volta, **{"defaults.framework_directives": {"pytorch": ["--comment=$(id)"]}})
    with pytest.raises(HpcdlError, match=r"defaults\.framework_directives.*caffe"):
        _profile(tmp_path, volta, **{"defaults.framework_directives": {"caffe": ["--comment=caffe"]}})


def test_the_centres_lines_run_the_images_runscript_where_they_use_run(tmp_path):
    # KISTI Neuron's multi-node PyTorch job (wjnadia/neuron-guide @14d12a52afad3d01bcc438484979189f45733d2a,
    # undefined-2/appendix-3-how-to-use-singularity-container.md): "srun singularity run --nv <image> python ...", the
    # runscript (its NGC image's entrypoint) "먼저 실행한 후, 사용자 명령어 ... 가 존재하면 이어서 실행됩니다"
    raven = SHIPPED / "raven.yaml"
    site = _profile(tmp_path, raven, **{"container.command": "run"})
    text = _render(site, tmp_path, nodes=1)
    line = next(x for x in text.splitlines() if "apptainer" in x and "hpcdl train" in x)
    words = shlex.split(line)
    at = words.index("apptainer")
    assert words[at:at + 3] == ["apptainer", "run", "--nv"] and "exec" not in words
    # the default stays exec
    assert "apptainer exec --nv" in _render(load_site_file(raven), tmp_path, nodes=1)
    with pytest.raises(HpcdlError, match=r"container.command: run is an Apptainer and Singularity subcommand; the "
                                         r"runtime is shifter"):
        _profile(tmp_path, raven, **{"container.command": "run", "runtime": "shifter"})
    with pytest.raises(HpcdlError, match=r"container.command"):
        _profile(tmp_path, raven, **{"container.command": "shell"})


def test_slurm_s_own_blocks_of_cores_step_over_the_reserved_cores(tmp_path):
    # TU Dresden ZIH Capella: "8 cores per node are unavailable for jobs: 6-7, 14-15, 46-47, and 62-63" (its WEKAio
    # filesystem's), and ZIH's Slurm binds each task to cores by itself. Slurm never hands a job a reserved core
    # (CpuSpecList), so a task's block of --cpus-per-task cores steps over them: local rank 0 on cores 0-5, 8-13,
    # 16-17 is on Slurm's own block, not off it, and the line needs no mask (nor refuses the plan)
    volta = _volta_plan_bound(tmp_path)
    reserved = {"node_kinds.v100.reserved_cores": [4, 5, 24, 25]}
    site = _profile(tmp_path, volta, **reserved, **{"launch.cpu_bind_default": "cores"})
    plan = make_plan(site, JobRequest())
    assert [r.cores for r in plan.local_ranks()][:2] == [(0, 1, 2, 3, 6, 7, 8, 9, 10), (11, 12, 13, 14, 15, 16, 17, 18, 19)]
    assert not any(w.startswith("--cpu-bind") for w in plan.launcher_argv)
    # where hpcdl names the binding, the same blocks are --cpu-bind=cores, not masks
    named = make_plan(_profile(tmp_path, volta, **reserved), JobRequest()).launcher_argv
    assert "--cpu-bind=cores" in named and not any("mask_cpu" in w for w in named)


# --- runtime: pyxis (NVIDIA's enroot SPANK plugin: its words are srun's own options) ---

LRZ_AI = SHIPPED / "lrz-ai.yaml"


def _launch_argv(script: str) -> list[str]:
    line = next(line for line in script.splitlines() if line.endswith(" &") and " train " in line)
    return shlex.split(line[:-2])


def test_pyxis_words_stand_on_sruns_own_option_list_before_the_spawner_and_program(tmp_path):
    # NVIDIA/pyxis wiki, Usage: "the new command-line arguments it introduces are directly added to srun"; LRZ's AI
    # Systems: srun --container-mounts='../../:/workspace' --container-image='...sqsh' python ...
    site = _profile(tmp_path, LRZ_AI, **{"filesystems.scratch": "/dss/scratch/$USER"})
    argv = _launch_argv(_render(site, tmp_path, nodes=2))  # shellchecked
    program = argv.index("launch") - 1  # hpcdl launch (launch.spawner: hpcdl), inside the container
    assert argv[0] == "srun" and argv[program:program + 2] == ["hpcdl", "launch"]
    words = argv[1:program]
    assert words == ["--container-image=${HOME}/nvidia+pytorch+23.06-py3.sqsh",
                     "--container-mounts=/dss/scratch/${USER}:/dss/scratch/${USER},${HPCDL_JOB_DIR}:${HPCDL_JOB_DIR}",
                     "--container-workdir=${HPCDL_JOB_DIR}"]
    # the site's own runtime arguments follow its words, still on srun's option list
    site = _profile(tmp_path, LRZ_AI, **{"container.args": ["--no-container-mount-home"]})
    argv = _launch_argv(_render(site, tmp_path, nodes=1))
    assert argv[argv.index("launch") - 2] == "--no-container-mount-home"


@pytest.mark.parametrize("changes, field", [
    ({"launcher": "mpirun", "launch": {}}, "runtime: pyxis"),
    ({"launch.spawner": "none", "launch.wrapper": ["/opt/site/bind.sh"]}, "launch.wrapper"),
    ({"launch.spawner": "none", "launch.gpu_wrapper": ["set_gpu_rank"]}, "launch.gpu_wrapper"),
    ({"env": {"LD_LIBRARY_PATH": {"prepend": ["/opt/site/nccl/lib"]}}}, "env.LD_LIBRARY_PATH"),
])
def test_pyxis_is_refused_where_its_srun_options_cannot_stand_on_sruns_line(tmp_path, changes, field):
    with pytest.raises(HpcdlError, match=re.escape(field)):
        _profile(tmp_path, LRZ_AI, **changes)


def test_hpcdl_s_own_image_under_pyxis_is_an_enroot_squashfs_file_not_a_registry_tag(tmp_path):
    # pyxis's --container-image is "a docker image given as an enroot URI, or a path to a squashfs file" (NVIDIA/pyxis
    # wiki, Usage); a bare hpcdl/NAME:latest would be pulled from Docker Hub, where no hpcdl image is. hpcdl's image is
    # the file `enroot import -o` writes, in the folder the hpcdl module names
    site = _profile(tmp_path, LRZ_AI, environment=None)
    argv = _launch_argv(_render(site, tmp_path, nodes=1))
    image = next(w for w in argv if w.startswith("--container-image="))
    assert image.startswith("--container-image=${HPCDL_IMAGE_DIR}/") and image.endswith(".sqsh"), image


def test_pyxis_mounts_refuse_a_folder_that_would_split_its_list(tmp_path):
    site = _profile(tmp_path, LRZ_AI, **{"filesystems.scratch": "/dss/a,b"})
    with pytest.raises(HpcdlError, match="--container-mounts"):
        _render(site, tmp_path, nodes=1)


def test_no_framework_wrapper_module_for_a_runtime_whose_words_are_sruns_options():
    # a module's `python` wrapper runs outside srun (a login node), where pyxis's and the container engine's words
    # cannot start the image: only the hpcdl module is rendered
    from hpcdl.modules.images import frameworks_for_site

    for name in ("lrz-ai", "alps-gh200"):
        assert frameworks_for_site(load_site(name)) is None


def test_a_centres_own_launcher_takes_each_nodes_ranks_and_the_exports_by_options_of_its_own(tmp_path):
    # HPC-UGent's mympirun (VSC Hortense; https://github.com/hpcugent/vsc-mympirun, README.md): "--hybrid ... This
    # integer will be the number of processes started on each available physical node", and "To add other variables to
    # this list, you can use the mympirun option --variablesprefix. This option requires a comma-seperated list";
    # VSC staff start it as ['mympirun', '--hybrid', str(job.num_tasks_per_node)] (EESSI test suite,
    # config/vsc_hortense.py). A fixed --hybrid 4 in launch.args would start four ranks for a one-GPU job
    csd3 = SHIPPED / "csd3-ampere.yaml"
    own = {**CSD3_RESTATED, "launch.command": ["mympirun"], "launch.mpirun_layout": "command",
           "defaults.total_tasks": False,
           "launch.ranks_per_node_option": "--hybrid", "launch.env_list_option": "--variablesprefix"}
    site = _profile(tmp_path, csd3, **own)
    line = next(line for line in _render(site, tmp_path, account="p-GPU").splitlines() if line.startswith("mympirun "))
    words = line.split()
    assert words[1:3] == ["--hybrid", "4"], line
    exports = words[words.index("--variablesprefix") + 1].split(",")
    assert {"MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS"} <= set(exports) and exports == sorted(exports)
    assert "-x" not in words and not any(word in words for word in ("-np", "--map-by", "--bind-to"))
    one = make_plan(site, JobRequest(nodes=1, ranks_per_node=1))
    text = render_job_script(site, one, {}, JobOptions(account="p-GPU"))
    assert next(line for line in text.splitlines() if line.startswith("mympirun ")).split()[1:3] == ["--hybrid", "1"]
    # each is an option of the centre's own command: refused where hpcdl writes the layout, or twice
    with pytest.raises(HpcdlError, match=r"launch\.ranks_per_node_option: --hybrid .*mpirun_layout is restate"):
        _profile(tmp_path, csd3, **{**own, "launch.mpirun_layout": "restate"})
    with pytest.raises(HpcdlError, match=r"launch\.env_list_option: --variablesprefix .*launch\.args names it"):
        _profile(tmp_path, csd3, **{**own, "launch.args": ["--variablesprefix", "MY"]})
    with pytest.raises(HpcdlError, match=r"launch\.ranks_per_node_option"):
        _profile(tmp_path, csd3, **{**own, "launch.ranks_per_node_option": "--hybrid; rm -rf /"})


def test_a_hint_no_node_kind_can_take_is_refused(tmp_path):
    """launch.threads_request: hint asks one hardware thread per core (--hint=nomultithread) where the site's Slurm
    counts cores on an SMT node; on a machine whose every node kind has Slurm count each of its hardware threads
    (scheduler_cpus_per_core equal to threads_per_core), or has one thread a core, no line ever names it, and the
    centre's --hint=nomultithread (DKRZ staff's Levante srun) would be lost in silence: the profile is refused,
    naming the field and what would take it."""
    jean_zay = SHIPPED / "jean-zay.yaml"
    with pytest.raises(HpcdlError, match=r"launch.threads_request: hint .* no node kind .*scheduler_cpus_per_core: 1"):
        _profile(tmp_path, jean_zay, **{"node_kinds.v100.scheduler_cpus_per_core": 2})
    # one kind that counts cores is enough: its jobs carry the hint
    assert load_site_file(jean_zay).launch.threads_request == "hint"


def test_a_centre_that_counts_a_jobs_gpus_gets_their_total_beside_the_gpus_of_each_task(tmp_path):
    # UF Research Computing's HiPerGator AI job (UFResearchComputing/MultiNode_MONAI_example launch.sh):
    # "#SBATCH --gpus=16 # Total GPUs" beside "#SBATCH --gpus-per-task=1 # 1 GPU per task", 8 tasks on each of 2 nodes
    base = SHIPPED / "greatlakes-gpu.yaml"
    site = _profile(tmp_path, base, **{"defaults.total_gpus": True})
    header = [line for line in render_job_script(site, make_plan(site, JobRequest(nodes=2)), {}, JobOptions())
              .splitlines() if line.startswith("#SBATCH --gpus")]
    assert header == ["#SBATCH --gpus-per-task=v100:1", "#SBATCH --gpus=v100:4"], header
    plain = load_site_file(base)
    assert not [line for line in render_job_script(plain, make_plan(plain, JobRequest(nodes=2)), {}, JobOptions())
                .splitlines() if line.startswith("#SBATCH --gpus=")]
    cpu_only = render_job_script(site, make_plan(site, JobRequest(nodes=2, use_gpus=False)), {}, JobOptions())
    assert "--gpus" not in cpu_only
    with pytest.raises(HpcdlError, match=r"defaults\.total_gpus: .* gpu_request gres"):
        _profile(tmp_path, SHIPPED / "alex.yaml", **{"defaults.total_gpus": True})
    with pytest.raises(HpcdlError, match=r"defaults\.total_gpus: .* the scheduler is pbs"):
        _profile(tmp_path, SHIPPED / "polaris.yaml", **{"defaults.total_gpus": True})


def test_a_centre_that_counts_a_jobs_gpus_gets_their_total_beside_the_gpus_of_each_node(tmp_path):
    # KAUST Ibex (kaust-rccl/ksl-docs ibex_gpu_jobs.rst): "2 nodes, with 4 V100 GPUs on each node":
    # "#SBATCH --gpus=8" beside "#SBATCH --gpus-per-node=4"
    base = SHIPPED / "volta-x86.yaml"
    site = _profile(tmp_path, base, **{"defaults.total_gpus": True})
    gpus = len(site.node_kinds[site.default_node_kind or next(iter(site.node_kinds))].gpus)
    header = [line for line in render_job_script(site, make_plan(site, JobRequest(nodes=2)), {}, JobOptions())
              .splitlines() if line.startswith("#SBATCH --gpus")]
    assert header == [f"#SBATCH --gpus-per-node={gpus}", f"#SBATCH --gpus={2 * gpus}"], header
    plain = load_site_file(base)
    assert not [line for line in render_job_script(plain, make_plan(plain, JobRequest(nodes=2)), {}, JobOptions())
                .splitlines() if line.startswith("#SBATCH --gpus=")]
    cpu_only = render_job_script(site, make_plan(site, JobRequest(nodes=2, use_gpus=False)), {}, JobOptions())
    assert "--gpus" not in cpu_only


def test_the_rendezvous_host_by_its_short_name_where_the_centre_names_it_so(tmp_path):
    # UF Research Computing's HiPerGator helpers (UFResearchComputing/MultiNode_MONAI_example,
    # pt_multinode_helper_funcs.sh): "export PRIMARY=$(hostname -s)", the node's short name, which every rank is told
    site = _profile(tmp_path, PERLMUTTER, **{"launch.master_addr": "host-short-name"})
    lines = _render(site, tmp_path).splitlines()
    assert "MASTER_ADDR=$(hostname -s)" in lines and "MASTER_ADDR=$(hostname)" not in lines
    # beside a suffix, the short name + the suffix, as before
    jsc = _profile(tmp_path, SHIPPED / "juwels-booster.yaml", **{"launch.master_addr": "host-short-name"})
    assert 'MASTER_ADDR="$(hostname -s)i"' in _render(jsc, tmp_path).splitlines()
    with pytest.raises(HpcdlError, match=r"launch.master_addr: a Slurm setting .* but the scheduler is pbs"):
        _profile(tmp_path, GADI, **{"launch.master_addr": "host-short-name"})


def test_the_rendezvous_host_by_its_fully_qualified_name(tmp_path):
    # The Vector Institute's multi-node job on Killarney (VectorInstitute/vec-playbook at 50fc3345,
    # getting-started/slurm-examples/imagenet-multinode/imagenet-multinode.sh): "export MASTER_ADDR=$(hostname --fqdn)"
    site = _profile(tmp_path, PERLMUTTER, **{"launch.master_addr": "host-fqdn"})
    lines = _render(site, tmp_path).splitlines()
    assert "MASTER_ADDR=$(hostname --fqdn)" in lines and "MASTER_ADDR=$(hostname)" not in lines
    with pytest.raises(HpcdlError, match=r"launch.master_addr: a Slurm setting .* but the scheduler is pbs"):
        _profile(tmp_path, GADI, **{"launch.master_addr": "host-fqdn"})
    with pytest.raises(HpcdlError, match=r"launch.master_addr: host-fqdn .* not both"):
        _profile(tmp_path, PERLMUTTER, **{"launch.master_addr": "host-fqdn", "launch.master_addr_suffix": "i"})


def test_multi_node_directives_reach_only_jobs_of_several_nodes(tmp_path):
    # The Alliance's Nibi (SciNetHPC/alliance-docs-mcp @6c7dd7908bc2318096aab09ef9cc6af87c316118,
    # docs/pages/General/Nibi.md): "For better performance of tightly coupled multi-node jobs, you may constrain them
    # to use only one network switch, by adding this option to your job submission script: #SBATCH --switches=1"
    volta = SHIPPED / "volta-x86.yaml"
    site = _profile(tmp_path, volta, **{"defaults.directives": ["--network=x"],
                                        "defaults.multi_node_directives": ["--switches=1"]})

    def directives(nodes):
        plan = make_plan(site, JobRequest(nodes=nodes, framework="pytorch", image="/opt/images/mine.sif"))
        text = render_job_script(site, plan, {}, JobOptions())
        return [line for line in text.splitlines() if line in ("#SBATCH --switches=1", "#SBATCH --network=x")]

    assert directives(2) == ["#SBATCH --network=x", "#SBATCH --switches=1"]
    # one node is under one switch already: the job names none
    assert directives(1) == ["#SBATCH --network=x"]
    with pytest.raises(HpcdlError, match=r"defaults\.multi_node_directives\[0\]: .* is not one scheduler option"):
        _profile(tmp_path, volta, **{"defaults.multi_node_directives": ["--switches=$(id)"]})


def test_a_one_node_torchrun_meets_as_the_centre_writes_it(tmp_path):
    # NRIS's DDP job on Saga (documentation.sigma2.no code_development/guides/PyTorchProfilerMultiGpu.html): "srun
    # singularity exec --nv ... torchrun --standalone --nnodes=1 --nproc_per_node=${SLURM_GPUS_PER_NODE:-2}"; torchrun:
    # "--standalone: Useful when launching single-node, multi-worker job". MIT ORCD's one-node job
    # (github.com/mit-orcd/orcd-docs docs/recipes/torch-gpu-intermediate.md @355e4b2b): "torchrun --nnodes=1
    # --nproc_per_node=4 --rdzv_id=$SLURM_JOB_ID --rdzv_endpoint="localhost:1234"", "Use `localhost` when there is only
    # one node", no backend named (torchrun's default, static). hpcdl wrote the c10d rendezvous words on one node too
    olivia = SHIPPED / "olivia.yaml"  # launch.spawner: torchrun
    site = _profile(tmp_path, olivia, **{"launch.spawner_one_node": "standalone"})
    argv = _launch_argv(_render(site, tmp_path, nodes=1, account="nn9999k"))  # shellchecked
    spawn = argv[argv.index("torchrun"):]
    assert spawn[:5] == ["torchrun", "--standalone", "--nnodes=1", "--nproc_per_node=4", "--no-python"]
    assert not any(w.startswith("--rdzv") for w in spawn)
    local = _profile(tmp_path, olivia, **{"launch.spawner_one_node": "localhost"})
    text = _render(local, tmp_path, nodes=1, account="nn9999k")
    argv = _launch_argv(text)
    spawn = argv[argv.index("torchrun"):]
    assert spawn[:5] == ["torchrun", "--nnodes=1", "--nproc_per_node=4", "--rdzv_id=${SLURM_JOB_ID}",
                         "--rdzv_endpoint=localhost:${MASTER_PORT}"]
    assert not any(w.startswith("--rdzv_backend") for w in spawn) and "export MASTER_PORT=" in text
    # more nodes keep the job's rendezvous; without the field one node keeps it too
    for profile in (site, local):
        argv = _launch_argv(_render(profile, tmp_path, nodes=2, account="nn9999k"))
        assert "--standalone" not in argv and "--rdzv_backend=c10d" in argv
    argv = _launch_argv(_render(load_site_file(olivia), tmp_path, nodes=1, account="nn9999k"))
    assert "--standalone" not in argv and "--rdzv_backend=c10d" in argv
    with pytest.raises(HpcdlError, match=r"launch.spawner_one_node: standalone is how torchrun meets a node's "
                                         r"workers, but launch.spawner is hpcdl"):
        _profile(tmp_path, olivia, **{"launch.spawner_one_node": "standalone", "launch.spawner": "hpcdl"})
    with pytest.raises(HpcdlError, match=r"launch.spawner_one_node"):
        _profile(tmp_path, olivia, **{"launch.spawner_one_node": "local"})


def test_a_site_whose_slurm_keeps_the_submitting_environment_out_by_itself_is_written_as_under_export_none(tmp_path):
    # KU Leuven (github.com/hpcleuven/VscDocumentation @0ad5c240971f6902cef78b19453b298321b7cc5a,
    # source/leuven/slurm_specifics.rst): "Slurm jobs start in a clean environment which corresponds to your login
    # environment ... Environment variables that happen to be set in the session from which you submit the job are
    # not propagated to the job. If needed you can modify this default behaviour with the --export option", and its
    # job scripts name no --export: the job loads hpcdl's own module itself and lets srun carry its exports, as under
    # "#SBATCH --export=NONE", without writing the directive
    volta = SHIPPED / "volta-x86.yaml"
    login = {"modules.login_shell": True, "modules.system": "lmod"}
    site = _profile(tmp_path, volta, **{"defaults.export_default": "none", **login})
    lines = _render(site, tmp_path, nodes=1, hpcdl_module="hpcdl/1.0").splitlines()
    assert "unset SLURM_EXPORT_ENV" in lines and "module load hpcdl/1.0" in lines
    assert lines.index("unset SLURM_EXPORT_ENV") < next(i for i, line in enumerate(lines) if line.startswith("srun "))
    assert not any(line.startswith("#SBATCH --export") for line in lines)
    # a job that asks --export=ALL itself gets the submitting shell's environment there too: nothing to undo
    site = _profile(tmp_path, volta, **{"defaults.export_default": "none", "defaults.directives": ["--export=ALL"], **login})
    lines = _render(site, tmp_path, nodes=1, hpcdl_module="hpcdl/1.0").splitlines()
    assert "unset SLURM_EXPORT_ENV" not in lines and "module load hpcdl/1.0" not in lines
    # Slurm's own default (all) changes nothing
    plain = _render(_profile(tmp_path, volta, **login), tmp_path, nodes=1, hpcdl_module="hpcdl/1.0").splitlines()
    assert "unset SLURM_EXPORT_ENV" not in plain and "module load hpcdl/1.0" not in plain
    with pytest.raises(HpcdlError, match=r"defaults\.export_default: none is how a Slurm starts its jobs, but the "
                                         r"scheduler is pbs"):
        _profile(tmp_path, POLARIS, **{"defaults.export_default": "none"})
    with pytest.raises(HpcdlError, match=r"defaults\.export_default"):
        _profile(tmp_path, volta, **{"defaults.export_default": "some"})


def test_ranks_that_find_their_cpus_near_their_gpu_are_given_none_by_the_plan(tmp_path):
    """launch.rank_cpus: gpu-local, where the centre publishes no map of cores to GPUs (ARC's TinkerCliffs: a bare
    srun, one torchrun a node, workers bound to nothing): the plan names each rank's count of cores but no CPUs, says
    so in plan.json, the job script's map and a note, and the launch line is the one the plan mode writes; beside a
    line that binds each task itself (a srun --cpu-bind the plan writes) it is refused in one line naming the field."""
    arc = SHIPPED / "tinkercliffs-gpu.yaml"
    near = load_site_file(arc)
    given = _profile(tmp_path, arc, **{"launch.rank_cpus": "plan"})
    assert near.launch.rank_cpus == "gpu-local"
    plan, planned = make_plan(near, JobRequest(nodes=2)), make_plan(given, JobRequest(nodes=2))
    assert plan.rank_cpus == "gpu-local" and plan.to_dict()["rank_cpus"] == "gpu-local"
    assert all(r.cpus == () and len(r.cores) == 16 for r in plan.ranks)
    assert all(len(r.cpus) == 16 for r in planned.ranks) and "rank_cpus" not in planned.to_dict()
    assert plan.launcher_argv == planned.launcher_argv and plan.spawner_argv == planned.spawner_argv
    assert any("launch.rank_cpus: gpu-local" in note for note in plan.notes)
    text = _render(near, tmp_path, account="personal")
    assert "#   local rank 0: 16 cores near its GPU (found at run time), GPU 0, NIC -, 16 thread(s)" in text.splitlines()
    with pytest.raises(HpcdlError, match=r"launch.rank_cpus: gpu-local has each rank choose its CPUs at run time, but "
                                         r"the srun line binds each task to cores itself"):
        _profile(tmp_path, SHIPPED / "frontier.yaml", **{"launch.rank_cpus": "gpu-local"})
    with pytest.raises(HpcdlError, match=r"launch.rank_cpus: gpu-local has each rank choose its CPUs at run time, but "
                                         r"the mpirun line binds"):
        _profile(tmp_path, GADI, **{"launch.rank_cpus": "gpu-local"})
    # an Open MPI line of the rank count alone names no binding, each rank binding itself (JHU Rockfish: mpirun -np 8)
    counted = _profile(tmp_path, SHIPPED / "rockfish-gpu.yaml", **{"launch.rank_cpus": "gpu-local"})
    assert all(r.cpus == () for r in make_plan(counted, JobRequest(nodes=2)).ranks)
    with pytest.raises(HpcdlError, match=r"launch.rank_cpus"):
        _profile(tmp_path, arc, **{"launch.rank_cpus": "nearest"})


def test_gpu_local_ranks_replace_the_binding_a_slurm_gives_by_itself(tmp_path):
    """launch.rank_cpus: gpu-local beside launch.cpu_bind_default: auto (the Alliance's Cedar: "With Slurm, the task
    affinity is also resolved by the scheduler", a bare srun, and no page placing a V100 on a socket): Slurm binds each
    task to a block by its own default and each rank replaces it with its cores near its GPU (a real slurmd shows a
    rank leave its task's CPU: tests/test_slurm_binding.py), so the line names no binding word and no --distribution,
    where the plan's own cores, on the sockets the profile assumed, needed --distribution=block:block."""
    cedar = SHIPPED / "cedar-gpu.yaml"
    site = load_site_file(cedar)
    assert site.launch.cpu_bind_default == "auto" and site.launch.rank_cpus == "gpu-local"
    planned = _profile(tmp_path, cedar, **{"launch.rank_cpus": "plan"})
    for request in (JobRequest(nodes=2), JobRequest(nodes=1, ranks_per_node=2)):
        near, by_plan = make_plan(site, request), make_plan(planned, request)
        assert all(r.cpus == () for r in near.ranks) and all(r.cpus for r in by_plan.ranks)
        assert near.launcher_argv == ("srun",), near.launcher_argv
        assert "--distribution=block:block" in by_plan.launcher_argv, by_plan.launcher_argv
    for bind in ("auto", "cores"):
        assert _profile(tmp_path, cedar, **{"launch.cpu_bind_default": bind}).launch.rank_cpus == "gpu-local"


def test_a_centres_own_cpu_bind_cores_is_kept_beside_gpu_local_ranks(tmp_path):
    """launch.args: [--cpu-bind=cores] beside launch.rank_cpus: gpu-local (TTU REPACSS: "Each Slurm CPU is a
    hyperthread. To bind OpenMP threads to physical cores, use --cpu-bind=cores", and no page placing an H100 on a
    socket): the line carries the centre's word once, as written, and no --distribution, mask or binding word of
    hpcdl's; srun binds each task to whole cores and each GPU rank replaces that with whole cores near its GPU. A plan
    without GPUs keeps hpcdl's --distribution beside the centre's word, and is refused where that binding would not
    give its cores (Slurm counting one thread of each core). Elsewhere --cpu-bind=cores stays hpcdl's to write: refused
    beside rank_cpus: plan, launch.cpu_bind_default and a per-node spawner, each naming the field."""
    repacss = SHIPPED / "repacss.yaml"
    site = load_site_file(repacss)
    assert site.launch.args == ("--cpu-bind=cores",) and site.launch.rank_cpus == "gpu-local"
    for request in (JobRequest(nodes=2), JobRequest(nodes=1, ranks_per_node=2), JobRequest(nodes=2, mode="per-socket")):
        plan = make_plan(site, request)
        binding = [w for w in plan.launcher_argv if w.startswith(("--cpu-bind", "--cpu_bind", "--distribution",
                                                                  "--hint", "--threads-per-core"))]
        assert binding == ["--cpu-bind=cores"], plan.launcher_argv
        assert plan.rank_cpus == "gpu-local" and all(r.cpus == () and r.gpus for r in plan.ranks)
    cpus_only = make_plan(site, JobRequest(nodes=2, use_gpus=False, mode="per-socket", ranks_per_node=4))
    assert cpus_only.rank_cpus == "plan" and all(r.cpus for r in cpus_only.ranks)
    assert [w for w in cpus_only.launcher_argv if w.startswith(("--cpu-bind", "--distribution"))] == [
        "--distribution=block:block", "--cpu-bind=cores"], cpus_only.launcher_argv
    counted_by_cores = _profile(tmp_path, repacss, **{"node_kinds.h100.scheduler_cpus_per_core": 1})
    assert "--cpu-bind=cores" in make_plan(counted_by_cores, JobRequest(nodes=2)).launcher_argv
    with pytest.raises(HpcdlError, match=r"launch.args: --cpu-bind=cores, the centre's binding, cannot give this "
                                         r"plan's cores: Slurm counts 1 of each core's 2 hardware threads"):
        make_plan(counted_by_cores, JobRequest(nodes=2, use_gpus=False, mode="per-socket"))
    with pytest.raises(HpcdlError, match=r"launch.args: --cpu-bind=cores: hpcdl writes the binding srun gives each task"
                                         r"[^\n]*cores beside launch.rank_cpus: gpu-local"):
        _profile(tmp_path, repacss, **{"launch.rank_cpus": "plan"})
    with pytest.raises(HpcdlError, match=r"launch.cpu_bind_default: auto says the line names no --cpu-bind, but "
                                         r"launch.args say --cpu-bind=cores; keep one"):
        _profile(tmp_path, repacss, **{"launch.cpu_bind_default": "auto"})
    with pytest.raises(HpcdlError, match=r"launch.spawner: torchrun starts one task per node and binds none, but "
                                         r"launch.args say --cpu-bind=cores"):
        _profile(tmp_path, repacss, **{"launch.spawner": "torchrun"})
    with pytest.raises(HpcdlError, match=r"launch.args: --cpu-bind=threads: hpcdl writes the binding"):
        _profile(tmp_path, repacss, **{"launch.args": ["--cpu-bind=threads"]})


def test_gpu_local_is_refused_where_no_variable_names_a_shared_nodes_gpus(tmp_path):
    """A gpu-local rank finds its GPU among all the node's (sysfs lists every one) by the ids Slurm gives the job's
    (SLURM_JOB_GPUS, node-wide). Imperial's CX3 shares its GPU nodes under PBS, which names a job's GPUs by UUID:
    "CUDA_VISIBLE_DEVICES will be set automatically with the UUID of the allocated GPUs. Our systems utilises Cgroups,
    meaning you will only be able to see the resource that is allocated to your job"
    (https://icl-rcs-user-guide.readthedocs.io/en/latest/hpc/queues/gpu-jobs/); a job holding a node's GPUs 4 and 5
    would bind its ranks near GPUs 0 and 1. Refused there in one line naming the field; on whole nodes the job holds
    every GPU and the plan's GPU i is the node's i-th."""
    cx3 = SHIPPED / "imperial-cx3.yaml"
    # (CX3's own line is Open MPI's count, which binds no rank: mpirun_layout: count)
    unbound = {"launch.rank_cpus": "gpu-local", "defaults.gpu_ids": None}
    with pytest.raises(HpcdlError, match=r"launch\.rank_cpus: gpu-local .* under pbs a job on a shared node "
                                         r"\(defaults\.exclusive: false\)"):
        _profile(tmp_path, cx3, **unbound)
    assert _profile(tmp_path, cx3, **unbound, **{"defaults.exclusive": True}).launch.rank_cpus == "gpu-local"
    # under Slurm the job's GPUs are named, shared node or not (JHU Rockfish: exclusive: false)
    assert load_site_file(SHIPPED / "rockfish-gpu.yaml").launch.rank_cpus == "gpu-local"
    # where the centre says its batch system names them by UUID (defaults.gpu_ids: uuid), each rank finds its own by
    # it (test_binding.py); NVIDIA's driver lists the UUIDs, so not beside another vendor's GPUs, nor under Slurm
    named = _profile(tmp_path, cx3, **{**unbound, "defaults.gpu_ids": "uuid"})
    assert make_plan(named, JobRequest(nodes=1)).to_dict()["gpu_ids"] == "uuid"
    assert "gpu_ids" not in make_plan(_profile(tmp_path, cx3, **{"launch.rank_cpus": "plan"}), JobRequest(nodes=1)).to_dict()
    with pytest.raises(HpcdlError, match=r"defaults\.gpu_ids: uuid .* the scheduler is slurm"):
        _profile(tmp_path, SHIPPED / "rockfish-gpu.yaml", **{"defaults.gpu_ids": "uuid"})
    with pytest.raises(HpcdlError, match=r"defaults\.gpu_ids: uuid .* GPUs of another vendor"):
        _profile(tmp_path, SHIPPED / "frontier.yaml", **{"scheduler": "pbs", "launcher": "mpiexec",
                                                         "launch": {}, "defaults.gpu_ids": "uuid"})


def test_an_mpirun_the_centre_recommends_over_a_header_of_cores_binds_no_rank(tmp_path):
    """KU Leuven's wICE: "We recommend to start MPI applications using the launcher that comes with the MPI
    implementation (typically called mpirun)", a GPU's 18 cores asked as 18 one-CPU tasks. Its profile takes Open MPI's
    count (launch.mpirun_layout: count) with no binding word, so each rank finds its cores near its GPU (rank_cpus:
    gpu-local); on several nodes the line also names each node's ranks, --map-by ppr:R:node, else Open MPI fills the
    first node's 72 slots. hpcdl's own Open MPI line binds each rank, so no rank could choose its own there."""
    wice = SHIPPED / "wice-gpu.yaml"
    site = load_site_file(wice)
    assert site.launch.mpirun_layout == "count" and site.defaults.batch_request == "cores"
    plan = make_plan(site, JobRequest(nodes=2))
    argv = list(plan.launcher_argv)
    assert argv[:5] == ["mpirun", "-np", "8", "--map-by", "ppr:4:node"], argv
    assert not any(word.startswith(("--bind-to", "-bind-to")) or "PE=" in word for word in argv), argv
    assert all(r.cpus == () and len(r.cores) == 18 for r in plan.ranks)
    one = list(make_plan(site, JobRequest(nodes=1, ranks_per_node=1)).launcher_argv)
    assert one[:3] == ["mpirun", "-np", "1"] and "--map-by" not in one
    with pytest.raises(HpcdlError, match=r"launch.rank_cpus: gpu-local has each rank choose its CPUs at run time"):
        _profile(tmp_path, wice, **{"launch.mpirun_layout": "restate"})


def test_a_job_is_not_submitted_from_a_folder_the_centres_scheduler_refuses(tmp_path):
    # The Alliance's Cedar (github.com/SciNetHPC/alliance-docs-mcp @6c7dd7908bc2318096aab09ef9cc6af87c316118,
    # docs/pages/General/Cedar.md): "Submitting jobs from directories residing in /home is not permitted, transfer the
    # files either to your /project or /scratch directory and submit the job from there". hpcdl submits from the job's
    # own folder (-o, else runs/... under the current one), so from a home folder sbatch refused the job after hpcdl
    # had written it; the field says so first, in one line, and a folder elsewhere (or a link out of home) is taken
    home, scratch, project = tmp_path / "home", tmp_path / "scratch", tmp_path / "project"
    for folder in (home / "me", scratch, project):
        folder.mkdir(parents=True)
    (home / "me" / "projects").symlink_to(project)
    sites = tmp_path / "sites"
    sites.mkdir()
    data = yaml.safe_load((SHIPPED / "cedar-gpu.yaml").read_text())
    data["name"] = "mycedar"
    data["filesystems"]["submit_refused"] = [str(home)]
    (sites / "mycedar.yaml").write_text(yaml.safe_dump(data))
    env = {"HPCDL_SITE_PATH": str(sites)}
    proc = hpcdl("submit", "--dry-run", "--site", "mycedar", "cifar10-quick", env=env, cwd=home / "me")
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "filesystems.submit_refused" in lines[0] and f"refuses jobs submitted from {home}" in lines[0]
    assert not (home / "me" / "runs").exists()  # nothing written there
    proc = hpcdl("validate", "--dry-run", "--site", "mycedar", "--checks", "environment", env=env, cwd=home / "me")
    assert proc.returncode == 2 and "filesystems.submit_refused: site mycedar" in proc.stderr, proc.stderr
    # a job folder named outside it, the current folder elsewhere, or a link from home into /project: submitted
    hpcdl("submit", "--dry-run", "--site", "mycedar", "cifar10-quick", "-o", scratch / "job", env=env, cwd=home / "me",
          check=True)
    hpcdl("submit", "--dry-run", "--site", "mycedar", "cifar10-quick", env=env, cwd=scratch, check=True)
    hpcdl("submit", "--dry-run", "--site", "mycedar", "cifar10-quick", env=env, cwd=home / "me" / "projects", check=True)
    assert list((project / "runs").iterdir())
    # the shipped profile says it of Cedar's /home; a site that says nothing of the sort takes a home folder
    assert load_site_file(SHIPPED / "cedar-gpu.yaml").filesystems.submit_refused == ("/home",)
    hpcdl("submit", "--dry-run", "--site", "narval", "cifar10-quick", env=env, cwd=home / "me", check=True)
    assert list((home / "me" / "runs").iterdir())
    with pytest.raises(HpcdlError, match=r"submit_refused\[0\]: 'home' is not an absolute host folder"):
        _profile(tmp_path, SHIPPED / "cedar-gpu.yaml", **{"filesystems.submit_refused": ["home"]})
    with pytest.raises(HpcdlError, match=r"submit_refused\[0\]: '\$HOME' is not an absolute host folder"):
        _profile(tmp_path, SHIPPED / "cedar-gpu.yaml", **{"filesystems.submit_refused": ["$HOME"]})


def test_gpu_ranks_sized_by_the_node_take_its_share_not_their_assumed_sockets(tmp_path):
    """defaults.gpu_rank_cores: node, beside launch.rank_cpus: gpu-local (the profile's GPU sockets an assumption that
    places no rank): each GPU rank takes the node's usable cores over the ranks, not its GPU's socket's share. Warwick's
    Sulis (sulis-hpc.github.io gettingstarted/batchq/gpu.markdown @0498fcdc): "128 [cores] which does not divide
    equally over the 3 A100 GPUs in each node. We therefore recommend that single GPU jobs request 42 CPUs per task",
    and its three-task job on a node's three GPUs asks --cpus-per-task=42 each. With two of the three GPUs assumed on
    one 64-core socket, the socket's share gave them 32; the node's is 42 (128 // 3), as the centre asks. Without the
    field (the default, socket) the socket's share stays; with rank_cpus: plan the field is refused in one line."""
    sulis = SHIPPED / "sulis-gpu.yaml"
    near = load_site_file(sulis)
    assert near.launch.rank_cpus == "gpu-local" and near.defaults.gpu_rank_cores == "node"
    assert [g.socket for g in near.node_kinds["a100"].gpus] == [0, 0, 1]
    plan = make_plan(near, JobRequest(nodes=1, ranks_per_node=3))
    assert [len(r.cores) for r in plan.ranks] == [42, 42, 42] and all(r.cpus == () for r in plan.ranks)
    assert len({c for r in plan.ranks for c in r.cores}) == 126  # no core in two ranks' counts
    one = make_plan(near, JobRequest(nodes=1, ranks_per_node=1))
    assert len(one.ranks[0].cores) == 42
    text = render_job_script(near, plan, {}, JobOptions(account="su123"))
    assert "#SBATCH --cpus-per-task=42" in text.splitlines()
    # the default: each rank its GPU's socket's share, two ranks on socket 0's 64 cores, 32 each
    socket = make_plan(_profile(tmp_path, sulis, **{"defaults.gpu_rank_cores": "socket"}),
                       JobRequest(nodes=1, ranks_per_node=3))
    assert [len(r.cores) for r in socket.ranks] == [32, 32, 32]
    # more ranks than the node has cores: refused in one line naming the node's sockets
    with pytest.raises(HpcdlError, match=r"ranks_per_node: 3 ranks on the node's sockets of a sulis-gpu node but it "
                                         r"has 2 usable cores"):
        make_plan(_profile(tmp_path, sulis, **{"node_kinds.a100.cores_per_socket": 1}), JobRequest(nodes=1))
    # a plan that binds ranks by its own blocks would put one off its GPU's socket
    with pytest.raises(HpcdlError, match=r"defaults.gpu_rank_cores: node sizes each GPU rank by the node's cores, not "
                                         r"its GPU's socket, but launch.rank_cpus is plan"):
        _profile(tmp_path, sulis, **{"launch.rank_cpus": "plan", "launch.cpu_bind_default": "auto"})
    with pytest.raises(HpcdlError, match=r"defaults.gpu_rank_cores"):
        _profile(tmp_path, sulis, **{"defaults.gpu_rank_cores": "numa"})


def test_a_partition_whose_jobs_name_no_account_is_written_without_one(tmp_path):
    """defaults.accountless_partitions (UArizona's Puma: the windfall partitions, 'Do not include an --account flag
    when requesting this partition', '#SBATCH --partition=gpu_windfall'): a job there names no account, even where
    the site requires one elsewhere (defaults.account_required) or gives one by default, and an account given for it
    is refused naming the field; other partitions keep theirs."""
    changes = {"defaults.account_required": True, "defaults.partition": "gpu_standard",
               "defaults.accountless_partitions": ["gpu_windfall"]}
    site = _profile(tmp_path, SHIPPED / "narval.yaml", **changes)
    windfall = _render(site, tmp_path, nodes=1, partition="gpu_windfall")
    assert "#SBATCH --partition=gpu_windfall" in windfall and "--account" not in windfall
    assert "#SBATCH --account=grp" in _render(site, tmp_path, nodes=1, account="grp")
    with pytest.raises(HpcdlError, match=r"account: partition 'gpu_windfall' .*defaults\.accountless_partitions"):
        _render(site, tmp_path, nodes=1, partition="gpu_windfall", account="grp")
    with pytest.raises(HpcdlError, match=r"defaults\.account_required"):
        _render(site, tmp_path, nodes=1)
    # the site's default account is not written there either
    site = _profile(tmp_path, SHIPPED / "narval.yaml", **{**changes, "defaults.account": "def-grp"})
    assert "--account" not in _render(site, tmp_path, nodes=1, partition="gpu_windfall")
    with pytest.raises(HpcdlError, match=r"accountless_partitions.*not a partition name"):
        _profile(tmp_path, SHIPPED / "narval.yaml", **{"defaults.accountless_partitions": ["gpu windfall"]})

"""What each scheduler's script asks for, line by line, read as the centre's staff would write it."""

from __future__ import annotations

import pytest
import yaml

from conftest import RECIPES, hpcdl
from hpcdl.errors import HpcdlError
from hpcdl.plan import JobRequest, make_plan
from hpcdl.render import JobOptions, render_job_script
from hpcdl.render.jobscript import parse_time, slurm_time
from hpcdl.sites import load_site
from hpcdl.train.recipe import load_recipe


def render(site_name, nodes=2, scheduler=None, recipe=None, **options):
    site = load_site(site_name)
    recipe = recipe or load_recipe(RECIPES / "digits-quick.yaml").model_dump(mode="json")
    plan = make_plan(site, JobRequest(nodes=nodes))
    return render_job_script(site, plan, recipe, JobOptions(name="resnet", **options), scheduler=scheduler)


def directives(text, prefix):
    return [line[len(prefix) + 1:] for line in text.splitlines() if line.startswith(prefix + " ")]


def test_slurm_asks_for_nodes_tasks_cpus_time_partition_and_one_output_file(fixture_sites):
    d = directives(render("ci-slurm", nodes=2, time="45", account="proj1"), "#SBATCH")
    assert d == [
        "--job-name=resnet", "--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=1", "--time=00:45:00",
        "--account=proj1", "--partition=debug", "--output=resnet-%j.out",
    ]


def test_knl_nodes_ask_for_quad_cache_whole_nodes_and_count_hardware_threads_as_cpus(fixture_sites):
    d = directives(render("test-slurm-knl"), "#SBATCH")
    assert "--constraint=quad,cache" in d and "--exclusive" in d
    assert "--cpus-per-task=256" in d  # 64 cores x 4 hardware threads, 4 cores left to the OS


def test_a_user_constraint_and_shared_nodes_override_the_site(fixture_sites):
    d = directives(render("test-slurm-knl", constraint="flat,quad", exclusive=False), "#SBATCH")
    assert "--constraint=flat,quad" in d and "--exclusive" not in d


def test_summit_style_lsf_asks_for_whole_nodes_nvme_and_smt4_and_launches_with_jsrun(fixture_sites):
    text = render("test-lsf-power9", nodes=4, time="2:00:00")
    d = directives(text, "#BSUB")
    assert "-nnodes 4" in d and "-W 2:00" in d and "-P ABC123" in d
    assert '-alloc_flags "nvme smt4"' in d
    assert "-o resnet-%J.out" in d
    assert "jsrun -n24 -a1 -c7 -g1 -r6 -bpacked:7 singularity exec --nv" in text
    assert '--bind /mnt/bb/"${USER}"' in text  # Summit's NVMe path expands in the job
    assert "/sw/hpcdl/images/my-power9.sif hpcdl train recipe.json" in text
    assert "module load open-ce/1.10.0 singularity" in text


def test_classic_lsf_counts_slots_and_spreads_them_with_ptile(fixture_sites):
    d = directives(render("test-pbs-xeon", scheduler="lsf"), "#BSUB")
    # a slot per core of every rank: 2 nodes x 2 ranks x 24 cores (IBM LSF: a slot is a CPU)
    assert "-n 96" in d and '-R "span[ptile=48]"' in d and "-x" in d


def test_pbs_asks_for_a_select_statement_with_mpiprocs_and_ompthreads(fixture_sites):
    d = directives(render("test-pbs-xeon", time="90"), "#PBS")
    assert "-l select=2:ncpus=96:mpiprocs=2:ompthreads=24" in d
    assert "-l place=scatter:excl" in d and "-l walltime=01:30:00" in d and "-q workq" in d
    assert "-j oe" in d


def test_a_pbs_job_of_one_shared_chunk_names_no_place(fixture_sites):
    # PBS Pro: place=scatter takes "only one chunk ... from any host", which says nothing of a job of one chunk, and
    # Imperial CX3's one-node examples name no place ("The default is "free""); two chunks are scattered over two
    # nodes (Imperial's multi-node job: "#PBS -lplace=scatter"), and a job asking its node whole says so
    assert not any(x.startswith("-l place") for x in directives(render("test-pbs-xeon", nodes=1, exclusive=False), "#PBS"))
    assert "-l place=scatter" in directives(render("test-pbs-xeon", nodes=2, exclusive=False), "#PBS")
    assert "-l place=scatter:excl" in directives(render("test-pbs-xeon", nodes=1), "#PBS")


def test_pbs_writes_node_features_as_boolean_host_resources(fixture_sites):
    d = directives(render("test-slurm-knl", scheduler="pbs"), "#PBS")
    assert any(x.startswith("-l select=") and x.endswith(":quad=True:cache=True") for x in d), d


def test_gpus_are_requested_per_node_on_slurm_and_per_chunk_on_pbs(fixture_sites):
    assert "--gpus-per-node=6" in directives(render("test-lsf-power9", scheduler="slurm"), "#SBATCH")
    select = next(x for x in directives(render("test-lsf-power9", scheduler="pbs"), "#PBS") if "select" in x)
    assert select.endswith(":ngpus=6")


@pytest.mark.parametrize("scheduler, lines, requeue", [
    ("slurm", ["#SBATCH --requeue", "#SBATCH --signal=B:USR1@600"], 'scontrol requeue "$HPCDL_JOB_ID"'),
    ("lsf", ["#BSUB -r", "#BSUB -wa USR1", "#BSUB -wt 10"], 'brequeue -r "$HPCDL_JOB_ID"'),
    ("pbs", ["#PBS -r y"], 'qrerun "$HPCDL_JOB_ID"'),
])
def test_requeue_asks_for_a_warning_forwards_it_and_requeues(scheduler, lines, requeue, fixture_sites):
    text = render("test-lsf-power9", scheduler=scheduler, requeue=True, warning_seconds=600)
    for line in lines:
        assert line in text.splitlines()
    assert requeue in text
    assert "trap 'hpcdl_signal=USR1;" in text and "trap 'hpcdl_signal=TERM;" in text
    plain = render("test-lsf-power9", scheduler=scheduler)
    assert requeue not in plain and "--signal" not in plain


def test_a_warning_longer_than_the_time_limit_is_refused(fixture_sites):
    with pytest.raises(HpcdlError, match="time"):
        render("ci-slurm", time="00:05:00", requeue=True, warning_seconds=600)


def test_staging_copies_once_per_node_with_the_scheduler_launcher_and_points_the_recipe_at_it(fixture_sites):
    recipe = load_recipe(RECIPES / "digits-quick.yaml").model_dump(mode="json")
    recipe["data"].update(stage=True, path="/gpfs/alpine/data/imagenet")
    text = render("test-lsf-power9", recipe=recipe)
    assert 'HPCDL_STAGE_DIR=/mnt/bb/"${USER}"/hpcdl-data-"$HPCDL_JOB_ID"' in text
    assert 'jsrun -n2 -r1 -a1 -c1 hpcdl stage /gpfs/alpine/data/imagenet "$HPCDL_STAGE_DIR"' in text
    assert 'hpcdl stage --no-copy --recipe recipe.json /gpfs/alpine/data/imagenet "$HPCDL_STAGE_DIR"' in text
    slurm = render("ci-slurm", recipe=recipe)
    assert "srun --nodes=2 --ntasks=2 --ntasks-per-node=1 hpcdl stage" in slurm
    # staging happens before the ranks start
    assert slurm.index("hpcdl stage") < slurm.index("hpcdl train")


def test_staging_without_a_data_path_or_node_local_storage_is_refused(fixture_sites, tmp_path):
    recipe = load_recipe(RECIPES / "digits-quick.yaml").model_dump(mode="json")
    recipe["data"]["stage"] = True
    with pytest.raises(HpcdlError, match="data.path"):
        render("ci-slurm", recipe=recipe)


def test_the_lmod_init_is_sourced_before_module_load_and_only_where_the_site_has_modules(fixture_sites):
    text = render("test-pbs-xeon")
    assert text.index("source -- /usr/share/lmod/lmod/init/bash") < text.index("module load openmpi/4.1 apptainer")
    assert "module load" not in render("ci-slurm")


def test_every_rank_gets_the_plans_shared_environment_quoted(fixture_sites):
    text = render("ci-slurm")
    assert "export OMPI_MCA_btl=self,tcp" in text
    assert "export OMP_NUM_THREADS=1" in text


def test_trainer_arguments_follow_the_trainer(fixture_sites):
    text = render("ci-slurm", extra_args=("--max-iter", "5"))
    assert "hpcdl train recipe.json --plan plan.json --results results.jsonl --max-iter 5 &" in text


@pytest.mark.parametrize("text, seconds", [
    ("30", 1800), ("05:30", 330), ("01:00:00", 3600), ("1-00:00:00", 86400), ("2-12", 2 * 86400 + 12 * 3600),
])
def test_time_limits_read_as_slurm_reads_them(text, seconds):
    assert parse_time(text) == seconds


@pytest.mark.parametrize("bad", ["soon", "1:2:3:4", "0", "-5", "10;reboot"])
def test_a_time_limit_that_is_not_one_is_refused_naming_the_field(bad):
    with pytest.raises(HpcdlError, match="time"):
        parse_time(bad)


def test_long_limits_use_slurms_day_form():
    assert slurm_time(2 * 86400 + 3723) == "2-01:02:03"


def test_an_unknown_scheduler_is_refused(fixture_sites):
    with pytest.raises(HpcdlError, match="scheduler"):
        render("ci-slurm", scheduler="condor")


def test_render_writes_the_file_atomically_and_prints_without_o(tmp_path, fixture_sites):
    out = tmp_path / "job.sh"
    proc = hpcdl("render", "--site", "ci-slurm", RECIPES / "digits-quick.yaml", "-o", out,
                 env={"HPCDL_SITE_PATH": str(fixture_sites)})
    assert proc.returncode == 0 and out.read_text().startswith("#!/bin/bash\n#SBATCH")
    assert out.stat().st_mode & 0o100
    printed = hpcdl("render", "--site", "ci-slurm", RECIPES / "digits-quick.yaml",
                    env={"HPCDL_SITE_PATH": str(fixture_sites)}).stdout
    assert printed == out.read_text()


def test_an_option_typo_is_an_error_not_a_trainer_argument(tmp_path, fixture_sites):
    proc = hpcdl("render", "--site", "ci-slurm", RECIPES / "digits-quick.yaml", "--acount", "x",
                 env={"HPCDL_SITE_PATH": str(fixture_sites)})
    assert proc.returncode == 2 and "--acount" in proc.stderr


def test_a_site_profile_with_a_site_wide_time_uses_it(tmp_path):
    sites = tmp_path / "sites"
    sites.mkdir()
    (sites / "tiny.yaml").write_text(yaml.safe_dump({
        "name": "tiny", "scheduler": "slurm", "launcher": "srun",
        "node_kinds": {"n": {"sockets": 1, "cores_per_socket": 2, "memory_gb": 4}},
        "defaults": {"time": "1-00:00:00", "exclusive": False},
    }))
    proc = hpcdl("render", "--site", "tiny", RECIPES / "digits-quick.yaml", env={"HPCDL_SITE_PATH": str(sites)})
    assert "#SBATCH --time=1-00:00:00" in proc.stdout.splitlines()


def test_lsf_rounds_a_limit_up_to_whole_minutes(fixture_sites):
    assert "-W 1:00" in directives(render("test-lsf-power9", time="59:30"), "#BSUB")


def test_alloc_flags_are_only_for_csm_lsf(fixture_sites):
    assert not any("alloc_flags" in x for x in directives(render("test-pbs-xeon", scheduler="lsf"), "#BSUB"))


def test_lsf_constraints_keep_their_select_syntax(fixture_sites):
    d = directives(render("test-pbs-xeon", scheduler="lsf", constraint="skx&(ib|opa)"), "#BSUB")
    assert '-R "select[skx&(ib|opa)]"' in d
    with pytest.raises(HpcdlError, match="constraint"):
        render("test-pbs-xeon", scheduler="lsf", constraint='a"b')


def test_a_pbs_queue_that_fixes_a_nodes_cpus_gets_chunks_naming_only_the_processes():
    # AIST ABCI 3.0: "-l select=num[:ncpus=num_cpus:mpiprocs=num_mpi:ompthreads=num_omp] ... The number of CPU cores
    # corresponding to the resource type specified by -q option is set to ncpus by default and the user cannot
    # change it"; its lines write "-l select=2:mpiprocs=8". One rank a node of 48 cores must not ask ncpus=96.
    from hpcdl.sites.schema import Site

    data = load_site("abci3").model_dump(exclude_unset=True)
    site = Site.model_validate({**data, "defaults": {**data["defaults"], "pbs_request": "processes"}})
    recipe = load_recipe(RECIPES / "digits-quick.yaml").model_dump(mode="json")
    for ranks, threads in ((8, 12), (1, 48)):
        plan = make_plan(site, JobRequest(nodes=2, ranks_per_node=ranks))
        d = directives(render_job_script(site, plan, recipe, JobOptions(name="r", account="g")), "#PBS")
        assert f"-l select=2:mpiprocs={ranks}:ompthreads={threads}" in d, d
        assert not any("ncpus=" in x or "ngpus=" in x for x in d), d

"""Node-local storage a Slurm job must ask as a generic resource before it can stage data there.

CSC's Puhti guide (https://github.com/CSCfi/csc-user-guide/blob/0fb19abfa205b069e551cfa6bd40aa8af5bf294c/docs/computing/running/creating-job-scripts-puhti.md):
"Request local storage using the --gres flag in the job submission: --gres=nvme:<local_storage_space_per_node>",
"The amount of space is given in GB (with a maximum of 3600 GB per node)", "Use the environment variable
$LOCAL_SCRATCH", and beside the GPUs in one list: "--gres=gpu:v100:<number_of_gpus_per_node>,nvme:<local_storage_space_per_node>".
Its machine-learning data guide (https://github.com/CSCfi/csc-user-guide/blob/6cdb834aa13dd2cd427205fc11a6b36cfcd49349/docs/support/tutorials/ml-data.md)
stages a data set so: "#SBATCH --gres=gpu:v100:1,nvme:100", then "tar xf ... -C $LOCAL_SCRATCH".
"""

from __future__ import annotations


import pytest
import yaml

from conftest import RECIPES, ROOT
from hpcdl.errors import HpcdlError
from hpcdl.plan import JobRequest, make_plan
from hpcdl.render import JobOptions, render_job_script
from hpcdl.sites import load_site
from hpcdl.sites.registry import load_site_file
from hpcdl.train.recipe import load_recipe


def recipe(stage: bool) -> dict:
    r = load_recipe(RECIPES / "digits-quick.yaml").model_dump(mode="json")
    r["data"].update(stage=stage, path="/scratch/project_2001234/data.tar")
    return r


def sbatch(site, stage=True, **request) -> list[str]:
    plan = make_plan(site, JobRequest(**request))
    text = render_job_script(site, plan, recipe(stage), JobOptions(name="job", account="project_2001234"))
    return [line[len("#SBATCH "):] for line in text.splitlines() if line.startswith("#SBATCH ")]


def gres(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("--gres")]


def test_a_puhti_job_staging_its_data_asks_the_nvme_in_the_same_gres_list_as_its_gpus():
    site = load_site("puhti-gpu")
    # two whole nodes: each node's NVMe, beside its four V100 (CSC: one --gres list, per node)
    assert gres(sbatch(site, nodes=2)) == ["--gres=gpu:v100:4,nvme:3600"]
    # one V100 of a node other jobs share: its GPU's share of the node's 3600 GB
    assert gres(sbatch(site, nodes=1, ranks_per_node=1)) == ["--gres=gpu:v100:1,nvme:900"]
    # no staging, no NVMe asked (and nothing else in the header changes)
    assert gres(sbatch(site, stage=False, nodes=2)) == ["--gres=gpu:v100:4"]
    assert [d for d in sbatch(site, nodes=2) if not d.startswith("--gres")] == \
        [d for d in sbatch(site, stage=False, nodes=2) if not d.startswith("--gres")]


def test_a_mahti_job_of_one_a100_asks_a_quarter_of_the_nodes_nvme_as_csc_writes_it():
    # CSC's Mahti page (https://github.com/CSCfi/csc-user-guide/blob/4e78abe0ecbea6836b233b5cced2c01d5a5f49b1/docs/computing/running/creating-job-scripts-mahti.md):
    # "one GPU and 32 cores ... also 950 GB local fast disk storage (1/4 of the total amount of local disk on a
    # node)", "#SBATCH --gres=gpu:a100:1,nvme:950"; "with a maximum of 3800 GB per node"
    site = load_site("mahti")
    lines = sbatch(site, nodes=1, ranks_per_node=1)
    assert gres(lines) == ["--gres=gpu:a100:1,nvme:950"] and "--cpus-per-task=32" in lines
    assert gres(sbatch(site, nodes=2)) == ["--gres=gpu:a100:4,nvme:3800"]


def test_the_staging_job_writes_to_the_storage_it_asked_for():
    site = load_site("puhti-gpu")
    plan = make_plan(site, JobRequest(nodes=2))
    text = render_job_script(site, plan, recipe(True), JobOptions(name="job", account="project_2001234"))
    assert 'HPCDL_STAGE_DIR="${LOCAL_SCRATCH}"/hpcdl-data-"$HPCDL_JOB_ID"' in text
    # ... once on each node, as CSC's multi-node job does: "srun --ntasks=$SLURM_NNODES --ntasks-per-node=1 tar xf
    # /scratch/<your-project>/your-dataset.tar -C $LOCAL_SCRATCH" (ml-data.md)
    assert "\nsrun --nodes=2 --ntasks=2 --ntasks-per-node=1 hpcdl stage /scratch/project_2001234/data.tar" in text


def test_a_site_asking_gpus_another_way_asks_the_storage_in_its_own_gres(tmp_path):
    # the same request where the GPUs are not a --gres (a site asking --gpus-per-node): the one --gres is the storage's
    data = yaml.safe_load(load_site("puhti-gpu").model_dump_json(exclude_none=True))
    data["name"] = "gres-elsewhere"
    data["defaults"]["gpu_request"] = "gpus-per-node"
    path = tmp_path / "gres-elsewhere.yaml"
    path.write_text(yaml.safe_dump(data))
    site = load_site_file(path)
    lines = sbatch(site, nodes=2)
    assert gres(lines) == ["--gres=nvme:3600"] and "--gpus-per-node=v100:4" in lines


@pytest.mark.parametrize("change, field", [
    ({"filesystems": {"node_local_gres": {"name": "nvme", "per_node": 100}}}, "node_local"),
    ({"filesystems": {"node_local": "/tmp", "node_local_gres": {"name": "nvme,gpu", "per_node": 100}}},
     "node_local_gres.name"),
    ({"filesystems": {"node_local": "/tmp", "node_local_gres": {"name": "nvme", "per_node": 0}}},
     "node_local_gres.per_node"),
])
def test_a_node_local_gres_that_cannot_be_asked_is_refused_naming_the_field(tmp_path, change, field):
    data = yaml.safe_load(load_site("puhti-gpu").model_dump_json(exclude_none=True))
    data.update(name="bad", **change)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(HpcdlError, match=field.replace(".", r"\.")) as err:
        load_site_file(path)
    assert "\n" not in str(err.value)


def test_a_node_local_gres_is_refused_beside_a_scheduler_other_than_slurm(tmp_path):
    data = yaml.safe_load((ROOT / "platform/hpcdl/sites/profiles/gadi.yaml").read_text())
    data["name"] = "pbs-gres"
    data.setdefault("filesystems", {})["node_local_gres"] = {"name": "nvme", "per_node": 100}
    path = tmp_path / "pbs-gres.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(HpcdlError, match=r"filesystems\.node_local_gres: --gres is Slurm's request"):
        load_site_file(path)


def test_a_slurm_posing_puhtis_gpu_node_with_its_nvme_allocates_the_staging_job_and_refuses_more_than_it_holds(
        slurm_clusters, tmp_path):
    # the node as CSC publishes it (tests/published/puhti-gpu.yaml), holding "a maximum of 3600 GB per node" of NVMe
    from dataclasses import replace

    from slurm_cluster import NodeShape

    site = load_site("puhti-gpu")
    facts = yaml.safe_load((ROOT / "tests/published/puhti-gpu.yaml").read_text())["slurm_nodes"]["gpu"]
    shape = replace(NodeShape.from_published(site, "gpu", facts), count_gres=(("nvme", 3600),))
    cluster = slurm_clusters.ensure(2, shape)

    def test_only(text: str):
        script = tmp_path / "job.sh"
        script.write_text(text)
        return cluster.sbatch("--test-only", script, cwd=tmp_path)

    for request, asked in (({"nodes": 2}, "gpu:v100:4,nvme:3600"), ({"nodes": 1, "ranks_per_node": 1}, "gpu:v100:1,nvme:900")):
        plan = make_plan(site, JobRequest(**request))
        text = render_job_script(site, plan, recipe(True), JobOptions(name="job", account="project_2001234"))
        assert f"\n#SBATCH --gres={asked}\n" in text
        proc = test_only(text)
        assert proc.returncode == 0 and "to start at" in proc.stderr, proc.stderr
        # one GB more than the node holds: refused, so the posed node judges the storage asked
        proc = test_only(text.replace(f"--gres={asked}", f"--gres={asked.split(',')[0]},nvme:3601"))
        assert proc.returncode != 0 and "Requested node configuration is not available" in proc.stderr, proc.stderr

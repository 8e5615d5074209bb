"""Per-node-kind scheduler settings and the NUMA-domain core split, as data (no scheduler needed).

A machine with several node kinds reaches each through its own constraint or partition (NERSC
Perlmutter: `-C gpu` / `-C cpu`; JSC JUWELS: `--partition=booster`); a socket whose GPUs sit on
only some of its NUMA domains shares all its cores among its ranks (JSC JUWELS Booster: 12 cores
per GPU task, not the 6 of one domain).
"""

from __future__ import annotations

import pytest
import yaml

from hpcdl.errors import HpcdlError
from hpcdl.plan import JobRequest, make_plan
from hpcdl.render.jobscript import JobOptions, render_job_script
from hpcdl.sites import load_site
from hpcdl.sites.registry import load_site_file

TWO_KINDS = """
name: twokinds
scheduler: slurm
launcher: srun
node_kinds:
  gpu:
    sockets: 1
    cores_per_socket: 8
    memory_gb: 64
    gpus: [{model: A100, socket: 0}, {model: A100, socket: 0}]
  cpu:
    sockets: 2
    cores_per_socket: 8
    memory_gb: 64
    defaults: {constraint: cpu, partition: cpuq, qos: low, directives: ["--mem-per-cpu=1G"]}
defaults: {constraint: gpu, partition: gpuq, qos: normal, directives: ["--network=x"]}
"""


def _site(tmp_path, text=TWO_KINDS):
    path = tmp_path / "twokinds.yaml"
    path.write_text(text)
    return load_site_file(path)


def _directives(site, kind, **request):
    plan = make_plan(site, JobRequest(nodes=1, node_kind=kind, **request))
    script = render_job_script(site, plan, {}, JobOptions())
    return [line[len("#SBATCH "):] for line in script.splitlines() if line.startswith("#SBATCH ")]


def test_a_node_kind_asks_for_its_own_constraint_partition_qos_and_directives(tmp_path):
    site = _site(tmp_path)
    gpu = _directives(site, "gpu")
    assert {"--constraint=gpu", "--partition=gpuq", "--qos=normal", "--network=x"} <= set(gpu)
    cpu = _directives(site, "cpu", use_gpus=False)
    assert {"--constraint=cpu", "--partition=cpuq", "--qos=low", "--mem-per-cpu=1G"} <= set(cpu)
    assert not {"--constraint=gpu", "--partition=gpuq", "--network=x"} & set(cpu)


def test_perlmutter_cpu_nodes_ask_for_cpu_nodes():
    site = load_site("perlmutter")
    assert "--constraint=cpu" in _directives(site, "cpu", use_gpus=False)
    assert "--constraint=gpu" in _directives(site, "gpu")


def test_a_bad_node_kind_directive_is_refused_with_its_field_named(tmp_path):
    data = yaml.safe_load(TWO_KINDS)
    data["node_kinds"]["cpu"]["defaults"]["directives"] = ["--x=1; rm -rf /"]
    with pytest.raises((HpcdlError, ValueError), match=r"node_kinds\.cpu\.defaults\.directives\[0\]"):
        _site(tmp_path, yaml.safe_dump(data))


def _numa_site(tmp_path, gpu_domains):
    data = {
        "name": "twokinds", "scheduler": "slurm", "launcher": "srun",
        "node_kinds": {"n": {
            "sockets": 2, "cores_per_socket": 24, "domains_per_socket": 4, "memory_gb": 64,
            "gpus": [{"model": "A100", "socket": d // 4, "domain": d} for d in gpu_domains],
        }},
    }
    return _site(tmp_path, yaml.safe_dump(data))


def test_gpus_on_half_the_domains_share_the_whole_socket_in_domain_order(tmp_path):
    # JUWELS Booster: GPUs on NUMA domains 3, 1, 7, 5 of 8 domains of 6 cores
    plan = make_plan(_numa_site(tmp_path, [3, 1, 7, 5]), JobRequest(nodes=1))
    cores = [r.cores for r in plan.local_ranks()]
    assert cores == [tuple(range(12, 24)), tuple(range(0, 12)), tuple(range(36, 48)), tuple(range(24, 36))]


def test_every_domain_with_a_gpu_keeps_each_rank_in_its_own_domain(tmp_path):
    plan = make_plan(_numa_site(tmp_path, [3, 2, 1, 0, 7, 6, 5, 4]), JobRequest(nodes=1))
    assert [r.cores for r in plan.local_ranks()][:2] == [tuple(range(18, 24)), tuple(range(12, 18))]


def test_blocks_that_would_miss_a_rank_s_domain_keep_to_the_domains(tmp_path):
    # both GPUs of socket 0 on domains 2 and 3: half-socket blocks would put one rank on domains 0-1
    plan = make_plan(_numa_site(tmp_path, [2, 3]), JobRequest(nodes=1))
    assert [r.cores for r in plan.local_ranks()] == [tuple(range(12, 18)), tuple(range(18, 24))]


def test_a_site_that_needs_an_account_refuses_a_job_without_one(tmp_path):
    data = yaml.safe_load(TWO_KINDS)
    data["defaults"]["account_required"] = True
    site = _site(tmp_path, yaml.safe_dump(data))
    plan = make_plan(site, JobRequest(nodes=1, node_kind="gpu"))
    with pytest.raises(HpcdlError, match=r"^account: .*defaults.account_required"):
        render_job_script(site, plan, {}, JobOptions())
    assert "#SBATCH --account=abc" in render_job_script(site, plan, {}, JobOptions(account="abc"))

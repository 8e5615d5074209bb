"""launch.gpu_bind: closest writes the centre's `--gpu-bind=closest` where Slurm's nearest GPUs are the plan's.

Pawsey's Setonix line is `srun -N 1 -n 8 -c 8 --gres=gpu:8 --gpus-per-task=1 --gpu-bind=closest`, NCSA's
Delta sample `#SBATCH --gpu-bind=closest  # select a cpu close to gpu on pci bus topology`: Slurm, not the
job, names each task's GPU, the one beside the task's cores (srun(1): "closest: Bind each task to the
GPU(s) which are closest"). The line says so only where that GPU is the plan's, one for one.
"""

from __future__ import annotations

import pytest

from hpcdl.launchers import launcher_for
from hpcdl.plan import JobRequest, make_plan
from hpcdl.sites import load_site
from hpcdl.sites.schema import Site


def _perlmutter(**launch) -> Site:
    """Perlmutter's GPU node (GPU i beside NUMA domain 3-i), each task seeing its own GPU."""
    data = load_site("perlmutter").model_dump(exclude_unset=True)
    data["launch"] = {**data.get("launch", {}), "gpu_visibility": "per-rank", **launch}
    return Site.model_validate(data)


def test_closest_writes_the_centres_words_where_the_nearest_gpu_is_each_ranks_own():
    site = _perlmutter(gpu_bind="closest", rank_order="cores")
    plan = make_plan(site, JobRequest(nodes=2))
    assert [r.gpus for r in plan.local_ranks()] == [(3,), (2,), (1,), (0,)]  # rank 0 on cores 0-15, NUMA 0
    argv = launcher_for("srun").command(plan, site)
    assert "--gpu-bind=closest" in argv
    assert not any(a.startswith("--gpu-bind=map_gpu") for a in argv)


def test_where_two_gpus_sit_beside_one_ranks_cores_the_plans_map_is_written_and_said():
    # LUMI-G: GCDs 0 and 1 both beside NUMA domain 3, where local rank 0 (cores 49-55) drives GCD 0 only:
    # which of the two Slurm calls closest is not the plan's to say, so the line names the plan's own
    data = load_site("lumi-g").model_dump(exclude_unset=True)
    data["launch"] = {**data.get("launch", {}), "gpu_bind": "closest"}
    site = Site.model_validate(data)
    plan = make_plan(site, JobRequest(nodes=1))
    assert "--gpu-bind=map_gpu:0,1,2,3,4,5,6,7" in plan.launcher_argv
    assert "--gpu-bind=closest" not in plan.launcher_argv
    assert any(n.startswith("launch.gpu_bind: closest would not give this plan's GPUs (local rank 0 on cores 49-55 "
                            "drives GPU(s) 0, but the GPU(s) of its NUMA domain are 0,1)") for n in plan.notes), plan.notes


def test_one_rank_on_every_core_driving_one_gpu_is_bound_by_the_plans_map():
    # a single rank over the node's 64 cores has all four GPUs beside it; Slurm's closest would hand it all four
    site = _perlmutter(gpu_bind="closest", rank_order="cores")
    plan = make_plan(site, JobRequest(nodes=1, ranks_per_node=1))
    assert plan.ranks[0].gpus == (3,) and "--gpu-bind=map_gpu:3" in plan.launcher_argv


def test_the_plans_map_is_still_written_by_default():
    site = _perlmutter(rank_order="cores")
    argv = launcher_for("srun").command(make_plan(site, JobRequest(nodes=1)), site)
    assert "--gpu-bind=map_gpu:3,2,1,0" in argv


@pytest.mark.parametrize("update,field", [
    ({"launch": {"gpu_bind": "closest", "gpu_visibility": "node"}}, "launch.gpu_bind"),
    ({"launch": {"gpu_bind": "closest"}, "defaults": {"gpu_request": "none"}}, "launch.gpu_bind"),
])
def test_closest_beside_a_setting_that_contradicts_it_is_refused_at_load(update, field):
    data = load_site("perlmutter").model_dump(exclude_unset=True)
    for key, value in update.items():
        data[key] = {**data.get(key, {}), **value}
    with pytest.raises(ValueError, match=field):
        Site.model_validate(data)


def test_a_node_not_filled_takes_the_gpus_beside_its_first_cores_where_slurm_binds_by_them():
    # Pawsey: three allocation-packs run on chiplets 2, 0, 1 beside GCDs C9, D1, D6; two tasks of -c 8 with no
    # --cpu-bind are bound to cores 0-7 and 8-15 by Slurm, so their GPUs are the ones beside those cores
    site = _perlmutter(gpu_bind="closest", rank_order="cores", cpu_bind_default="auto")
    plan = make_plan(site, JobRequest(nodes=1, ranks_per_node=2))
    assert [(r.cores[0], r.gpus) for r in plan.local_ranks()] == [(0, (3,)), (16, (2,))]
    assert "--gpu-bind=closest" in plan.launcher_argv and not any(a.startswith("--cpu-bind") for a in plan.launcher_argv)

"""launch.gpu_bind: wrapper, a centre whose launch wrapper binds each rank's GPU itself.

EPCC's Tursa job starts every GPU rank as `srun --nodes=4 --ntasks-per-node=4 --cpus-per-task=8 --hint=nomultithread
--distribution=block:block gpu_launch.sh ${application} ${options}` and "You must use the gpu_launch.sh wrapper script
to get the correct biniding of GPU to MPI processes": the wrapper sets `lrank=$((SLURM_PROCID %
SLURM_NTASKS_PER_NODE))`, `CUDA_VISIBLE_DEVICES=${lrank}`, `UCX_NET_DEVICES=mlx5_${lrank}:1`
(https://github.com/EPCCed/dirac-docs/blob/00273247bee0ec5a2fbc5c24b179b6d63b9c46f0/docs/tursa-user-guide/scheduler.md).
The line names no --gpu-bind, and what the wrapper sets wins over plan.json (a rank takes plan.json's settings only
where none is set), so the plan must give local rank i GPU i: a node not filled drives its first GPUs.
"""

from __future__ import annotations

import pytest

from hpcdl.errors import HpcdlError
from hpcdl.plan import JobRequest, make_plan
from hpcdl.sites import load_site
from hpcdl.sites.schema import Site


def _site(**launch) -> Site:
    """The generic two-socket Volta node (GPUs 0-1 on socket 0, 2-3 on socket 1) with a centre's GPU wrapper."""
    data = load_site("volta-x86").model_dump(exclude_unset=True)
    data["launch"] = {**data.get("launch", {}), "gpu_wrapper": ["gpu_launch.sh"], **launch}
    return Site.model_validate(data)


def test_the_wrapper_binds_and_the_line_names_no_gpu_bind():
    plan = make_plan(_site(gpu_bind="wrapper"), JobRequest(nodes=2))
    argv = list(plan.launcher_argv)
    assert not any(a.startswith("--gpu-bind") for a in argv), argv
    assert argv[-1] == "gpu_launch.sh"
    assert [r.gpus for r in plan.local_ranks()] == [(0,), (1,), (2,), (3,)]
    # the plan's map is still written where the profile says nothing of the wrapper's binding
    assert "--gpu-bind=map_gpu:0,1,2,3" in make_plan(_site(), JobRequest(nodes=2)).launcher_argv


def test_a_node_not_filled_drives_the_gpus_the_wrapper_gives_its_local_ranks():
    plan = make_plan(_site(gpu_bind="wrapper"), JobRequest(nodes=1, ranks_per_node=2))
    assert [r.gpus for r in plan.local_ranks()] == [(0,), (1,)]  # not 0 and 2, spread over the sockets
    assert [r.cores[0] for r in plan.local_ranks()] == [0, 10]  # each on its GPU's socket
    assert any("the centre's wrapper gives local rank i GPU i" in n for n in plan.notes), plan.notes


def test_a_rank_of_several_gpus_is_refused_naming_the_field():
    with pytest.raises(HpcdlError, match=r"^launch\.gpu_bind: wrapper: .* local rank 0 GPU\(s\) 0,1"):
        make_plan(_site(gpu_bind="wrapper"), JobRequest(nodes=1, mode="per-socket"))


@pytest.mark.parametrize("launch,message", [
    ({"gpu_bind": "wrapper", "gpu_wrapper": []}, "launch.gpu_bind: wrapper says the centre's launch wrapper"),
    ({"gpu_bind": "wrapper", "gpu_visibility": "node"}, "launch.gpu_bind: wrapper binds each task"),
])
def test_a_wrapper_binding_beside_a_setting_that_contradicts_it_is_refused_at_load(launch, message):
    with pytest.raises(ValueError, match=message):
        _site(**launch)

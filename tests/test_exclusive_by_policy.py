"""Whole nodes by the batch system's policy (`defaults.exclusive_by: policy`): planned as whole nodes, asked for
as the centre's scripts ask, with no exclusive request (LuxProvide MeluXina, https://docs.lxp.lu/first-steps/quick_start/:
"job scheduling is done with full nodes. Requesting one task on one compute node will give you access to the
complete node"; its GPU jobs name no --exclusive)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from conftest import RECIPES
from hpcdl.plan import JobRequest, make_plan
from hpcdl.render import JobOptions, render_job_script
from hpcdl.sites import load_site
from hpcdl.sites.schema import Site
from hpcdl.train.recipe import load_recipe


def with_defaults(name, **defaults):
    data = load_site(name).model_dump(exclude_unset=True)
    return Site.model_validate({**data, "defaults": {**data.get("defaults", {}), **defaults}})


def script(site, nodes=2, scheduler=None, ranks_per_node=None):
    recipe = load_recipe(RECIPES / "digits-quick.yaml").model_dump(mode="json")
    plan = make_plan(site, JobRequest(nodes=nodes, ranks_per_node=ranks_per_node))
    return plan, render_job_script(site, plan, recipe, JobOptions(name="r", account="p1"), scheduler=scheduler)


@pytest.mark.parametrize("scheduler, request_line", [("slurm", "#SBATCH --exclusive"), ("lsf", "#BSUB -x"),
                                                    ("pbs", "place=scatter:excl")])
def test_a_policy_of_whole_nodes_asks_for_none_in_any_scheduler(scheduler, request_line):
    asked = script(with_defaults("volta-x86", exclusive=True), scheduler=scheduler)[1]
    assert request_line in asked
    policy = script(with_defaults("volta-x86", exclusive=True, exclusive_by="policy"), scheduler=scheduler)[1]
    assert request_line not in policy
    assert "exclusive" not in policy.lower().replace("exclusive_process", "")


def test_a_policy_of_whole_nodes_still_plans_whole_nodes():
    # two ranks on a 4-GPU two-socket node the job holds whole spread over the sockets, each with a socket's cores;
    # on a node the job shares they would take the first two GPUs with their share of the cores
    site = with_defaults("volta-x86", exclusive=True, exclusive_by="policy")
    plan = script(site, ranks_per_node=2)[0]
    assert [r.socket for r in plan.ranks[:2]] == [0, 1]
    assert [len(r.cores) for r in plan.ranks[:2]] == [20, 20]


def test_a_policy_of_whole_nodes_on_jobs_planned_as_shared_is_refused():
    with pytest.raises(ValidationError, match="exclusive_by: policy"):
        with_defaults("volta-x86", exclusive=False, exclusive_by="policy")

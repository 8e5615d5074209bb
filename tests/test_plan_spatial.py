"""The plan's spatial layout: data-parallel groups x spatial groups, each group inside a node."""

from __future__ import annotations

import json

import pytest

from hpcdl.errors import HpcdlError
from hpcdl.plan import JobRequest, Plan, make_plan
from hpcdl.sites import load_site


def test_summit_three_way_groups_are_the_nvlink_triads_of_each_socket():
    plan = make_plan(load_site("summit"), JobRequest(nodes=2, spatial_ways=3))
    s = plan.spatial
    assert (s.ways, s.grid, s.data_parallel_groups) == (3, (3, 1), 4)
    assert s.groups == ((0, 1, 2), (3, 4, 5), (6, 7, 8), (9, 10, 11))
    sockets = {r.rank: (r.node, r.socket) for r in plan.ranks}
    assert all(len({sockets[m] for m in g}) == 1 for g in s.groups)  # one socket of one node each


def test_rows_and_columns_lay_four_ranks_as_a_two_by_two_grid():
    plan = make_plan(load_site("lassen"), JobRequest(nodes=1, spatial_ways=4, spatial_split="rows_and_columns"))
    assert plan.spatial.grid == (2, 2)
    assert plan.spatial.group_of(3) == (0, 3)


def test_a_spatial_group_that_would_leave_its_node_is_refused_naming_the_field():
    with pytest.raises(HpcdlError, match="spatial_ways"):
        make_plan(load_site("summit"), JobRequest(nodes=2, spatial_ways=4))


def test_plans_without_spatial_parallelism_keep_their_json_and_spatial_ones_round_trip():
    assert "spatial" not in make_plan(load_site("summit"), JobRequest(nodes=1)).to_dict()
    plan = make_plan(load_site("summit"), JobRequest(nodes=2, spatial_ways=2))
    assert Plan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan
    assert any("spatial parallelism" in n for n in plan.notes)


def test_render_lays_out_the_recipes_spatial_groups_and_refuses_groups_that_leave_a_node(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).parent.parent
    env = {"PYTHONPATH": str(root / "platform"), "PATH": "/usr/bin:/bin"}
    recipe = root / "recipes" / "mesh-spatial.yaml"
    # no hpcdl image runs on Lassen's POWER9 (the runtime decision refuses): the user's own image, as LBANN's users run
    ok = subprocess.run([sys.executable, "-m", "hpcdl", "render", str(recipe), "-s", "lassen", "-N", "2",
                         "--image", "/usr/workspace/$USER/my-image.sif"], capture_output=True, text=True, env=env)
    assert ok.returncode == 0, ok.stderr
    assert '"groups": [[0, 1, 2, 3], [4, 5, 6, 7]]' in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "hpcdl", "render", str(recipe), "-s", "summit", "-N", "2"],
                         capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "spatial.ways" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_the_trainer_refuses_a_recipe_that_disagrees_with_its_plan():
    from hpcdl.train.backends.pytorch.spatial.loop import _check_plan

    _check_plan(None, 4, "rows")
    _check_plan({"ways": 4, "split": "rows"}, 4, "rows")
    with pytest.raises(HpcdlError, match="render the job from this recipe"):
        _check_plan({"ways": 2, "split": "rows"}, 4, "rows")

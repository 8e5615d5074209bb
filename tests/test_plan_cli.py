"""`hpcdl plan`: the node map, environment and launch line; --json; --picture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import ROOT, hpcdl

DOC_PICTURES = {"summit": "docs/summit-node.png", "stampede2-knl": "docs/stampede2-knl-node.png"}


def test_plan_prints_the_node_map_environment_and_launch_line():
    out = hpcdl("plan", "--site", "summit", "--nodes", "2", check=True).stdout
    for column in ("rank", "node", "socket", "cores", "GPU", "NIC", "threads"):
        assert column in out
    assert "0-6" in out and "mlx5_0:1" in out
    assert "OMP_NUM_THREADS=7" in out
    assert "rank 3: HPCDL_GPU=3 NCCL_IB_HCA==mlx5_3:1" in out
    assert "launch: jsrun -n2 -a6 -c42 -g6 -r1 -bpacked:7" in out


def test_plan_json_carries_every_rank_with_its_placement_env_and_launcher_argv():
    data = json.loads(hpcdl("plan", "-s", "summit", "-N", "2", "--mode", "per-nic", "--json", check=True).stdout)
    assert len(data["ranks"]) == 8
    first = data["ranks"][0]
    assert {k: first[k] for k in ("rank", "node", "local_rank", "socket", "gpus", "nic", "omp_num_threads")} == {
        "rank": 0, "node": 0, "local_rank": 0, "socket": 0, "gpus": [0, 1], "nic": "mlx5_0:1", "omp_num_threads": 10}
    assert first["cores"] == list(range(10))
    assert data["launcher_argv"][0] == "jsrun" and "OMP_NUM_THREADS" in data["env"]


def test_plan_refuses_an_impossible_request_with_one_line_and_no_picture(tmp_path):
    picture = tmp_path / "node.png"
    proc = hpcdl("plan", "-s", "summit", "-r", "7", "--picture", picture)
    assert proc.returncode == 2
    assert proc.stderr.startswith("hpcdl: error: ranks_per_node: 7 ranks do not fit one rank per GPU")
    assert proc.stderr.count("\n") == 1
    assert not picture.exists() and list(tmp_path.iterdir()) == []


def test_plan_refuses_gpus_on_a_cpu_only_site():
    proc = hpcdl("plan", "-s", "stampede2-knl", "--gpus")
    assert proc.returncode == 2 and "has none" in proc.stderr


def test_plan_picture_draws_a_png(tmp_path):
    picture = tmp_path / "frontier.png"
    hpcdl("plan", "-s", "frontier", "--picture", picture, check=True)
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["frontier.png"]


@pytest.mark.parametrize("site", sorted(DOC_PICTURES))
def test_the_pictures_in_the_site_guide_are_what_hpcdl_draws_now(site, tmp_path):
    from matplotlib.testing.compare import compare_images

    from hpcdl.plan import JobRequest, make_plan
    from hpcdl.plan.picture import draw_node
    from hpcdl.sites import load_site

    s = load_site(site)
    fresh = draw_node(s, make_plan(s, JobRequest()), tmp_path / f"{site}.png")
    checked_in = ROOT / DOC_PICTURES[site]
    assert f"]({Path(DOC_PICTURES[site]).name})" in (ROOT / "docs" / "sites.md").read_text()
    problem = compare_images(str(checked_in), str(fresh), tol=2)
    assert problem is None, f"{problem}\nredraw with: hpcdl plan --site {site} --picture {DOC_PICTURES[site]}"

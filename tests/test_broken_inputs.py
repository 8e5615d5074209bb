"""Broken input and misuse get one line and a refusal, never a traceback or a damaged file (#17)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
import yaml

from conftest import FIXTURE_SITES, RECIPES, hpcdl
from hpcdl.errors import HpcdlError
from hpcdl.files import claim_run_folder, write_atomically

SITES = {"HPCDL_SITE_PATH": str(FIXTURE_SITES)}


def one_line_error(proc, *words):
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("hpcdl"), proc.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


# --- item 4: run folders -------------------------------------------------------------------


def test_runs_started_in_the_same_second_get_their_own_folders(tmp_path):
    a = claim_run_folder(None, "{time}-job", parent=tmp_path / "runs")
    b = claim_run_folder(None, "{time}-job", parent=tmp_path / "runs")
    assert a != b and a.is_dir() and b.is_dir()
    assert b.name.startswith(a.name) or a.name.startswith(b.name.rsplit("-", 1)[0])


def test_a_folder_in_use_by_another_run_is_refused_and_free_once_it_ends(tmp_path):
    folder = tmp_path / "out"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from hpcdl.files import claim_run_folder; "
         f"claim_run_folder(__import__('pathlib').Path({str(folder)!r}), 'x'); print('held', flush=True); "
         "sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(HpcdlError, match="another hpcdl run is using this folder"):
        claim_run_folder(folder, "x")
    holder.communicate("")
    assert claim_run_folder(folder, "x") == folder.resolve()  # reused once free: a resume


def test_two_submits_in_the_same_second_write_two_job_folders(tmp_path):
    argv = [sys.executable, "-m", "hpcdl", "submit", "--dry-run", "--site", "ci-slurm", str(RECIPES / "digits-quick.yaml")]
    procs = [subprocess.Popen(argv, cwd=tmp_path, env={**os.environ, **SITES}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    folders = sorted((tmp_path / "runs").iterdir())
    assert len(folders) == 3 and all((f / "job.sh").is_file() for f in folders)


# --- item 6: -o and links or devices -----------------------------------------------------------


def test_o_writes_through_a_symbolic_link(tmp_path):
    target = tmp_path / "target.sh"
    target.write_text("old\n")
    link = tmp_path / "link.sh"
    link.symlink_to(target)
    proc = hpcdl("render", "--site", "ci-slurm", RECIPES / "digits-quick.yaml", "-o", link, env=SITES)
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink() and target.read_text().startswith("#!/bin/bash")


def test_o_never_replaces_a_device_a_fifo_or_a_folder(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (fifo, tmp_path, "/dev/null"):
        proc = hpcdl("render", "--site", "ci-slurm", RECIPES / "digits-quick.yaml", "-o", path, env=SITES)
        one_line_error(proc, str(path))
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_write_atomically_leaves_the_device_alone(tmp_path):
    link = tmp_path / "null"
    link.symlink_to("/dev/null")
    with pytest.raises(HpcdlError, match="not a regular file"):
        write_atomically(link, "x")
    assert link.is_symlink() and stat.S_ISCHR(os.stat("/dev/null").st_mode)


# --- item 9: one-line errors -------------------------------------------------------------------


def test_a_profile_or_recipe_that_is_not_utf8_is_one_line(tmp_path):
    sites = tmp_path / "sites"
    sites.mkdir()
    (sites / "latin.yaml").write_bytes((FIXTURE_SITES / "ci-slurm.yaml").read_bytes().replace(
        b"name: ci-slurm", b"name: latin\ndescription: caf\xe9"))
    proc = hpcdl("render", "--site", "latin", RECIPES / "digits-quick.yaml", env={"HPCDL_SITE_PATH": str(sites)})
    one_line_error(proc, "latin.yaml", "UTF-8")
    recipe = tmp_path / "r.yaml"
    recipe.write_bytes((RECIPES / "digits-quick.yaml").read_bytes() + b"\n# caf\xe9\n")
    proc = hpcdl("render", "--site", "ci-slurm", recipe, env=SITES)
    one_line_error(proc, "r.yaml", "UTF-8")


def test_a_key_given_twice_in_a_profile_or_recipe_is_one_line(tmp_path):
    """YAML keys are unique; PyYAML keeps the last of two silently, so a profile with a second `launch:`
    block lost the first's settings (a merge left Jean Zay's threads_request behind that way)."""
    sites = tmp_path / "sites"
    sites.mkdir()
    text = (FIXTURE_SITES / "ci-slurm.yaml").read_text().replace("name: ci-slurm", "name: twice")
    (sites / "twice.yaml").write_text(text + "\nlaunch:\n  args: [--exclusive]\nlaunch:\n  args: []\n")
    proc = hpcdl("render", "--site", "twice", RECIPES / "digits-quick.yaml", env={"HPCDL_SITE_PATH": str(sites)})
    one_line_error(proc, "twice.yaml", "key 'launch' given twice")
    recipe = tmp_path / "r.yaml"
    recipe.write_text((RECIPES / "digits-quick.yaml").read_text() + "\nmax_iter: 10\nmax_iter: 20\n")
    proc = hpcdl("render", "--site", "ci-slurm", recipe, env=SITES)
    one_line_error(proc, "r.yaml", "key 'max_iter' given twice")


@pytest.mark.parametrize("where", ["parent-is-a-file", "too-long", "dotdot"])
def test_bad_output_paths_are_one_line(tmp_path, where):
    (tmp_path / "job.sh").write_text("x")
    path = {"parent-is-a-file": tmp_path / "job.sh" / "x.sh", "too-long": tmp_path / ("n" * 300),
            "dotdot": tmp_path / ".."}[where]
    proc = hpcdl("render", "--site", "ci-slurm", RECIPES / "digits-quick.yaml", "-o", path, env=SITES)
    one_line_error(proc)


def test_plan_picture_and_modulefiles_out_under_a_file_are_one_line(tmp_path):
    (tmp_path / "f").write_text("x")
    proc = hpcdl("plan", "--site", "ci-slurm", "--picture", tmp_path / "f" / "p.png", env=SITES)
    one_line_error(proc)
    proc = hpcdl("modulefiles", "render", "--out", tmp_path / "f" / "tree", env=SITES)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_launch_of_a_missing_program_is_one_line():
    proc = hpcdl("launch", "-n", "2", "--", "/nonexistent/program")
    one_line_error(proc, "/nonexistent/program")


@pytest.mark.parametrize("plan", ["missing", "broken"])
def test_a_missing_or_broken_plan_is_one_line(tmp_path, plan):
    path = tmp_path / "plan.json"
    if plan == "broken":
        path.write_text('{"ranks": [')
    proc = hpcdl("train", RECIPES / "digits-quick.yaml", "--plan", path)
    one_line_error(proc, "plan.json")


# --- item 10: refused at render ---------------------------------------------------------------


@pytest.mark.parametrize("change, field", [
    ({"net": "vgg99"}, "net"),
    ({"net": "../../../../tmp/evilnet"}, "net"),
    ({"data": {"source": "cifar10"}}, "data"),
    ({"data": {"source": "synthetic", "image_size": 100000}}, "image_size"),
    ({"base_lr": float("inf")}, "base_lr"),
    ({"momentum": float("nan")}, "momentum"),
])
def test_recipes_that_can_only_fail_on_the_compute_node_are_refused_at_render(tmp_path, change, field):
    recipe = yaml.safe_load((RECIPES / "digits-quick.yaml").read_text())
    recipe.update(change)
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(recipe))
    out = tmp_path / "job.sh"
    proc = hpcdl("render", "--site", "ci-slurm", path, "-o", out, env=SITES)
    one_line_error(proc, field)
    assert not out.exists()


# --- item 5: sizes -----------------------------------------------------------------------------


def site_with(tmp_path, **node):
    sites = tmp_path / "sites"
    sites.mkdir(exist_ok=True)
    data = yaml.safe_load((FIXTURE_SITES / "ci-slurm.yaml").read_text())
    data["name"] = "big"
    kind = next(iter(data["node_kinds"].values()))
    kind.update(node)
    (sites / "big.yaml").write_text(yaml.safe_dump(data))
    return {"HPCDL_SITE_PATH": str(sites)}


@pytest.mark.parametrize("field, value", [("cores_per_socket", 50_000_000), ("sockets", 2_000_000),
                                          ("threads_per_core", 1000), ("count", 10**12)])
def test_impossible_node_sizes_are_refused_in_one_line(tmp_path, field, value):
    proc = hpcdl("plan", "--site", "big", env=site_with(tmp_path, **{field: value}), timeout=60)
    one_line_error(proc, field)


def test_more_nodes_than_the_site_has_is_refused_in_one_line(tmp_path):
    proc = hpcdl("render", "--site", "lassen", "-N", "100000", RECIPES / "digits-quick.yaml", "-o",
                 tmp_path / "big.sh", timeout=60)
    one_line_error(proc, "nodes", "795")
    assert not (tmp_path / "big.sh").exists()
    proc = hpcdl("plan", "--site", "volta-x86", "-N", "1000000000", timeout=60)
    one_line_error(proc, "nodes")


def test_a_job_name_or_argument_longer_than_a_command_line_is_refused_at_render(tmp_path):
    proc = hpcdl("render", "--site", "ci-slurm", RECIPES / "digits-quick.yaml", "--name", "n" * 100_000, env=SITES)
    one_line_error(proc, "name")
    proc = hpcdl("render", "--site", "ci-slurm", RECIPES / "digits-quick.yaml", "--", "a" * 100_000, env=SITES)
    one_line_error(proc, "launch line")


# --- item 12: profile fields reach the job ----------------------------------------------------


def render_site(site, *args, scheduler=None):
    from hpcdl.plan import JobRequest, make_plan
    from hpcdl.render import JobOptions, render_job_script
    from hpcdl.train.recipe import load_recipe

    recipe = load_recipe(RECIPES / "digits-quick.yaml")
    plan = make_plan(site, JobRequest(nodes=1))
    return render_job_script(site, plan, recipe.model_dump(mode="json"), JobOptions(name="q", time=args[0] if args else None),
                             scheduler=scheduler)


def test_a_sites_qos_reaches_slurm():
    from hpcdl.sites import load_site

    # NERSC's job scripts ask for it: `#SBATCH -q regular` (docs.nersc.gov, Perlmutter example scripts)
    assert "#SBATCH --qos=regular\n" in render_site(load_site("perlmutter"))


def test_a_time_beyond_the_sites_max_time_is_refused():
    from hpcdl.sites import load_site

    site = load_site("summit")  # max_time 24:00:00
    assert "#BSUB -W 24:00" in render_site(site, "24:00:00")
    with pytest.raises(HpcdlError, match="time: 30:00:00 is longer than .*max_time 24:00:00"):
        render_site(site, "30:00:00")


def test_the_profiles_alloc_flags_reach_lsf():
    from hpcdl.sites import load_site

    site = load_site("summit")
    site = site.model_copy(update={"defaults": site.defaults.model_copy(update={"alloc_flags": ("gpumps", "smt1")})})
    text = render_site(site)
    assert '#BSUB -alloc_flags "nvme smt1 gpumps"' in text or '#BSUB -alloc_flags "nvme gpumps smt1"' in text


def test_the_centres_framework_module_is_loaded_when_there_is_no_container(fixture_sites):
    from hpcdl.sites import load_site

    site = load_site("ci-slurm")
    site = site.model_copy(update={
        "runtime": "none",
        "modules": site.modules.model_copy(update={"system": "lmod", "frameworks": {"pytorch": "pytorch/2.1"}}),
    })
    assert "pytorch/2.1" in [line for line in render_site(site).splitlines() if line.startswith("module load")][0]

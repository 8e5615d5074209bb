"""Mistakes refused when the script is rendered, not inside the job after the queue wait (issue 16),
and a job script that says only what it does."""

from __future__ import annotations

import pytest

from conftest import RECIPES, hpcdl


def one_line(proc, *words):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("hpcdl: error: "), proc.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_an_unknown_net_is_refused_at_render_and_submit(tmp_path):
    bad = tmp_path / "badnet.yaml"
    bad.write_text((RECIPES / "digits-quick.yaml").read_text().replace("net: cifar10_quick", "net: nosuchnet"))
    one_line(hpcdl("render", "-s", "summit", bad, "-o", tmp_path / "job.sh"), "badnet.yaml", "nosuchnet", "cifar10_quick")
    assert not (tmp_path / "job.sh").exists()
    one_line(hpcdl("submit", "-s", "summit", bad, "--dry-run", "-o", tmp_path / "job"), "nosuchnet")
    assert not (tmp_path / "job").exists()


@pytest.mark.parametrize("verb", ["plan", "render"])
def test_tensorflow_with_horovod_is_refused_before_anything_runs(verb, tmp_path):
    args = [verb, "-s", "summit", "-f", "tensorflow", "--dist", "horovod"]
    if verb == "render":
        args.append(RECIPES / "digits-quick.yaml")
    one_line(hpcdl(*args), "horovod#4290", "--dist auto")


@pytest.mark.parametrize("site, scheduler", [("volta-x86", "lsf"), ("summit", "slurm"), ("perlmutter", "pbs")])
def test_a_scheduler_the_sites_launcher_cannot_run_under_is_refused(site, scheduler, tmp_path):
    proc = hpcdl("render", "-s", site, "--scheduler", scheduler, RECIPES / "digits-quick.yaml", "-o", tmp_path / "j.sh")
    one_line(proc, "--scheduler", scheduler)
    assert not (tmp_path / "j.sh").exists()


def test_a_scheduler_an_mpirun_site_can_use_is_still_fine():
    text = hpcdl("render", "-s", "local", "--scheduler", "slurm", RECIPES / "digits-quick.yaml", check=True).stdout
    assert "#SBATCH" in text and "mpirun" in text


def test_the_module_comment_claims_a_source_line_only_where_there_is_one(fixture_sites):
    # no hpcdl image runs on Stampede2's KNL under Intel MPI: the user's own image
    knl = hpcdl("render", "-s", "stampede2-knl", "--image", "/work/me/my.sif", RECIPES / "digits-quick.yaml",
                check=True).stdout
    assert "module load tacc-singularity" in knl
    assert "source " not in knl and "comes from\n# the init script" not in knl
    assert "inherits from the submitting shell" in knl
    pbs = hpcdl("render", "-s", "test-pbs-xeon", RECIPES / "digits-quick.yaml", check=True).stdout
    assert "from\n# the init script" in pbs and "source -- /usr/share/lmod/lmod/init/bash" in pbs

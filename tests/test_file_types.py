"""Files that never end, and names the system cannot take (#29): hpcdl reads whole only regular
files of a bounded size, stages only regular files and folders, and says so in one line."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import FIXTURE_SITES, RECIPES, hpcdl

RECIPE = str(RECIPES / "cifar10-quick.yaml")


def one_line_refusal(proc, *words):
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "nested"])
def test_a_shared_site_folder_entry_that_never_ends_is_one_line(tmp_path, kind):
    """A FIFO in a shared HPCDL_SITE_PATH folder hung every user's render naming it; a link to
    /dev/zero ran out of memory; 20,000 nested brackets ended in RecursionError."""
    sites = tmp_path / "sites"
    sites.mkdir()
    profile = sites / "aud.yaml"
    if kind == "fifo":
        os.mkfifo(profile)
    elif kind == "dev-zero":
        os.symlink("/dev/zero", profile)
    else:
        profile.write_text("[" * 20000 + "\n")
    proc = hpcdl("render", RECIPE, "-s", "aud", "-o", str(tmp_path / "job.sh"), timeout=30,
                 env={"HPCDL_SITE_PATH": str(sites)})
    one_line_refusal(proc, str(profile))
    assert not (tmp_path / "job.sh").exists()


def test_a_recipe_larger_than_any_recipe_is_refused_unread(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("name: big\n" + "#" * (5 * 2**20) + "\n")
    one_line_refusal(hpcdl("render", str(big), "-s", "local", "-o", str(tmp_path / "j.sh"), timeout=30),
                     "more than the")


def test_stage_refuses_a_device_and_a_folder_holding_one(tmp_path):
    """`hpcdl stage /dev/zero DEST` wrote 2.4 GB in 20 s and never ended."""
    dest = tmp_path / "dest"
    one_line_refusal(hpcdl("stage", "/dev/zero", str(dest), timeout=30), "/dev/zero", "not a regular file")
    source = tmp_path / "data"
    source.mkdir()
    (source / "a.bin").write_bytes(b"x")
    os.symlink("/dev/zero", source / "z.bin")
    one_line_refusal(hpcdl("stage", str(source), str(dest), timeout=30), "z.bin", "not a regular file")
    assert os.listdir(dest) == []  # no partial copy left


def test_stage_onto_an_existing_file_is_one_line(tmp_path):
    (tmp_path / "f").write_text("x")
    one_line_refusal(hpcdl("stage", str(tmp_path / "f"), str(tmp_path / "f"), timeout=30), "must be a folder")


def test_a_stage_stopped_mid_copy_leaves_no_partial_file(tmp_path):
    """Stopped by `timeout` (SIGTERM), stage left its 2.4 GB `.zero.partial-<pid>` behind."""
    source, dest = tmp_path / "data", tmp_path / "dest"
    source.mkdir()
    for n in range(3):
        (source / f"{n}.bin").write_bytes(b"x" * 1000)
    program = textwrap.dedent(f"""
        import os, shutil, signal
        from hpcdl.executors import staging
        real = shutil.copy2
        def copy2(src, dst, **kw):
            real(src, dst, **kw)
            os.kill(os.getpid(), signal.SIGTERM)  # the job's time ran out mid-copy
        staging.shutil.copy2 = copy2
        staging.stage({str(source)!r}, {str(dest)!r})
    """)
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 128 + 15, proc.stderr
    assert os.listdir(dest) == []


@pytest.mark.parametrize("name", ["a" * 10_000, "a/" * 5_000 + "job.sh"])
def test_an_output_path_longer_than_the_system_takes_is_one_line(tmp_path, name):
    one_line_refusal(hpcdl("render", RECIPE, "-s", "local", "-o", f"{tmp_path}/{name}", timeout=30),
                     "-o", "too long")


# --- sizes the site or the scheduler cannot take ---

@pytest.mark.parametrize("site, nodes, limit", [
    ("volta-x86", "5000", "4 MiB sbatch takes"), ("volta-x86", "100000", "4 MiB sbatch takes"),
    ("volta-x86", "1000000", "4 MiB sbatch takes"), ("test-pbs-xeon", "1000000", "100 MiB qsub takes"),
])
def test_a_script_larger_than_the_scheduler_takes_is_refused_before_the_plan_is_built(
        tmp_path, monkeypatch, capsys, site, nodes, limit):
    """volta-x86 names no node count: -N 100000 rendered a 140 MB script in 81 s that sbatch, whose
    max_script_size is 4 MB by default (slurm.conf(5)), could never take; then it was refused, but
    only after ~30 s of planning every rank. PBS's jobscript_max_size is 100 MB by default
    (OpenPBS, DFLT_JOBSCRIPT_MAX_SIZE). The refusal now comes from the plan of one node: the plan
    of them all is never built."""
    built = plans_built(monkeypatch)
    monkeypatch.setenv("HPCDL_SITE_PATH", str(FIXTURE_SITES))
    err = render_refused(capsys, tmp_path, "-s", site, "-N", nodes)
    assert err.startswith("hpcdl: error: nodes: ") and limit in err, err
    assert built == [1], f"plans of {built} node(s) were built before the refusal"


def test_a_scheduler_the_sites_launcher_cannot_run_under_is_refused_before_the_plan_is_built(
        tmp_path, monkeypatch, capsys):
    """--scheduler local on an srun site was refused only after the script was rendered: with
    -N 999999 that was minutes of planning (the local scheduler has no script size limit)."""
    built = plans_built(monkeypatch)
    err = render_refused(capsys, tmp_path, "-s", "volta-x86", "--scheduler", "local", "-N", "999999")
    assert err.startswith("hpcdl: error: --scheduler: srun") and "not under local" in err, err
    assert built == []


def plans_built(monkeypatch) -> list[int]:
    """The node count of every plan render builds from now on."""
    import hpcdl.cli.jobs as jobs

    built: list[int] = []
    real_make_plan = jobs.make_plan

    def make_plan(site, request):
        built.append(request.nodes)
        return real_make_plan(site, request)

    monkeypatch.setattr(jobs, "make_plan", make_plan)
    return built


def render_refused(capsys, tmp_path, *args) -> str:
    """`hpcdl render` in this process: refused with status 2 in one line, leaving no file."""
    from hpcdl.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["render", RECIPE, *args, "-o", str(tmp_path / "job.sh")])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exit_.value.code == 2 and len(err) == 1, err
    assert not list(tmp_path.iterdir())
    return err[0]


def test_a_slurm_script_sbatch_takes_is_still_rendered(tmp_path):
    """The bound from one node's plan refuses only what sbatch could not take: 64 nodes render."""
    out = tmp_path / "job.sh"
    assert hpcdl("render", RECIPE, "-s", "volta-x86", "-N", "64", "-o", str(out), timeout=120).returncode == 0
    assert out.stat().st_size < 4 * 2**20


def test_launch_starts_no_more_ranks_than_cores_unless_asked_to_oversubscribe(tmp_path):
    """`hpcdl launch -n 100000` started ranks without bound: one typo, a fork bomb on a login node."""
    from hpcdl.launch import usable_cores

    one_line_refusal(hpcdl("launch", "-n", "100000", "--", "true", timeout=30), "--nproc", "--oversubscribe")
    one_line_refusal(hpcdl("launch", "-n", str(usable_cores() + 1), "--", "true", timeout=30), "core(s)")
    assert hpcdl("launch", "-n", str(usable_cores() + 1), "--oversubscribe", "--", "true", timeout=60).returncode == 0


def test_running_out_of_memory_is_one_line(monkeypatch, capsys):
    """NumPy's MemoryError (its own subclass, 'Unable to allocate 8.00 TiB') escaped as a traceback
    where a request did not fit the node: main() says so in one line naming the node."""
    import numpy as np

    import hpcdl.cli.jobs as jobs
    from hpcdl.cli import main

    def load_recipe(path):
        return np.empty(2**40, dtype=np.float64)  # 8 TiB: more than any node's memory and address space

    monkeypatch.setattr(jobs, "load_recipe", load_recipe)
    with pytest.raises(SystemExit) as exit_:
        main(["render", RECIPE, "-s", "volta-x86"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exit_.value.code == 1 and len(err) == 1, err
    assert err[0].startswith(f"hpcdl: error: out of memory on {os.uname().nodename}") and "8.00 TiB" in err[0], err


@pytest.mark.parametrize("flag", ["--name", "--account", "--partition", "--time", "--image", "--constraint",
                                  "--output-dir", "--node-kind", "--framework", "--scheduler", "--qos"])
@pytest.mark.parametrize("value", ["", "   "])
def test_an_empty_option_is_refused_not_taken_for_the_default(tmp_path, capsys, flag, value):
    """`-A "$ACCOUNT"` with ACCOUNT unset rendered the site's default account, and `--scheduler ''`
    the site's scheduler, without a word (the audit kit's render pass): an option given is used
    or refused, never silently dropped."""
    err = render_refused(capsys, tmp_path, "-s", "volta-x86", flag, value)
    assert err.startswith(f"hpcdl: error: {flag}: "), err


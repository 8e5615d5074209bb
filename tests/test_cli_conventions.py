"""Command-line conventions a newcomer expects (issue 16): --version, completion, $HPCDL_SITE as the
default site, one error style, --json on every listing verb, lines that stay whole in a pipe."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import RECIPES, hpcdl
from hpcdl import __version__


def one_line_error(proc, *words, code=2):
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("hpcdl: error: "), proc.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def test_version():
    for flag in ("--version", "-V"):
        proc = hpcdl(flag, check=True)
        assert proc.stdout.strip() == f"hpcdl {__version__}"


def test_shell_completion_is_offered():
    out = hpcdl("--help", check=True).stdout
    assert "--install-completion" in out and "--show-completion" in out
    # --show-completion writes the script for the shell it is typed in (Typer asks shellingham, which
    # walks up the parent processes): typed in bash, as a user does, not under whatever started pytest
    proc = subprocess.run(["bash", "-c", '"$0" -m hpcdl --show-completion; status=$?; exit "$status"', sys.executable],
                          capture_output=True, text=True, timeout=120, env=os.environ.copy())
    assert proc.returncode == 0 and "_HPCDL_COMPLETE" in proc.stdout, proc.stdout + proc.stderr
    # what bash asks when the user presses TAB after `hpcdl pl`
    proc = hpcdl(env={"_HPCDL_COMPLETE": "complete_bash", "COMP_WORDS": "hpcdl pl", "COMP_CWORD": "1"}, check=True)
    assert proc.stdout.split() == ["plan"]


def test_hpcdl_site_is_the_default_site_for_every_verb(tmp_path):
    env = {"HPCDL_SITE": "local"}
    plan = json.loads(hpcdl("plan", "--json", env=env, check=True).stdout)
    assert plan["site"] == "local"
    assert hpcdl("render", RECIPES / "digits-quick.yaml", env=env, check=True).stdout.startswith("#!")
    proc = hpcdl("submit", RECIPES / "digits-quick.yaml", "--dry-run", "-o", tmp_path / "job", env=env, check=True)
    assert "would run" in proc.stdout
    # the command line still wins over the environment
    proc = hpcdl("plan", "--json", "--site", "no-such-machine", env=env)
    one_line_error(proc, "no-such-machine")
    assert hpcdl("sites", "show", env={"HPCDL_SITE": "summit"}, check=True).stdout.startswith("name: summit")
    # and without either, the message says both ways
    proc = hpcdl("plan", env={"HPCDL_SITE": ""})
    one_line_error(proc, "--site", "HPCDL_SITE")


def test_click_usage_errors_have_hpcdl_s_error_style():
    one_line_error(hpcdl("plan", "--site", "local", "--bogus"), "--bogus", "hpcdl plan --help")
    one_line_error(hpcdl("plax"), "Did you mean 'plan'")
    one_line_error(hpcdl("plan", "--site", "local", "--nodes", "zero"), "--nodes")


def test_sites_json_lists_every_site():
    rows = json.loads(hpcdl("sites", "--json", check=True).stdout)
    by_name = {r["name"]: r for r in rows}
    assert {"local", "summit", "perlmutter"} <= set(by_name)
    assert by_name["summit"]["scheduler"] == "lsf" and by_name["summit"]["from"] == "shipped"
    assert by_name["summit"]["node_kinds"][0]["gpus"] == 6


def test_launch_line_is_one_line_in_a_narrow_pipe():
    proc = hpcdl("plan", "--site", "perlmutter", "-N", "2", env={"COLUMNS": "60"}, check=True)
    launch = [line for line in proc.stdout.splitlines() if line.startswith("launch: ")]
    assert len(launch) == 1
    following = proc.stdout.split(launch[0], 1)[1].splitlines()[1:2]
    assert all(line.startswith("  - ") or not line for line in following), following
    assert launch[0].rstrip().endswith(json.loads(
        hpcdl("plan", "--site", "perlmutter", "-N", "2", "--json", check=True).stdout)["launcher_argv"][-1])


def test_tables_fit_the_terminal_width():
    proc = hpcdl("sites", env={"COLUMNS": "80"}, check=True)
    widths = {len(line) for line in proc.stdout.splitlines()}
    assert max(widths) <= 80, max(widths)
    assert "stampede2-knl" in proc.stdout  # names are never cut


def test_help_shows_no_python_type_names():
    for verb in (["report"], ["images", "render"], ["images", "compat"], ["plan"], ["render"], ["validate"], ["run"]):
        out = hpcdl(*verb, "--help", env={"COLUMNS": "200"}, check=True).stdout
        for leak in ("list[", "<str>", "<int", "Path]", "<path>", "<bool>"):
            assert leak not in out, (verb, leak)


def test_outputs_never_create_parent_folders_a_typo_made_up(tmp_path):
    missing = tmp_path / "no" / "such"
    proc = hpcdl("render", "-s", "local", RECIPES / "digits-quick.yaml", "-o", missing / "job.sh")
    one_line_error(proc, "-o", str(missing))
    proc = hpcdl("plan", "-s", "local", "--picture", missing / "node.png")
    one_line_error(proc, "--picture", str(missing))
    proc = hpcdl("submit", "-s", "local", RECIPES / "digits-quick.yaml", "--dry-run", "-o", missing / "job")
    one_line_error(proc, "-o")
    proc = hpcdl("sites", "detect", "-o", missing / "mybox.yaml")
    one_line_error(proc, "-o")
    assert not (tmp_path / "no").exists()
    # the one folder named is made; its parent must be there
    hpcdl("submit", "-s", "local", RECIPES / "digits-quick.yaml", "--dry-run", "-o", tmp_path / "job", check=True)
    assert (tmp_path / "job" / "job.sh").exists()


def test_the_picture_format_follows_its_extension(tmp_path):
    hpcdl("plan", "-s", "local", "--picture", tmp_path / "node.svg", check=True)
    assert (tmp_path / "node.svg").read_text().lstrip().startswith(("<?xml", "<svg"))
    hpcdl("plan", "-s", "local", "--picture", tmp_path / "node.png", check=True)
    assert (tmp_path / "node.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    one_line_error(hpcdl("plan", "-s", "local", "--picture", tmp_path / "node.gif"), "--picture", ".svg")
    assert not (tmp_path / "node.gif").exists()

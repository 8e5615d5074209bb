"""Hostile job names, paths, accounts and trainer arguments appear literally and run nothing.

The proof is a canary: every hostile string tries to create the file CANARY (its absolute
path in $HPCDL_CANARY), through $(...), backticks, ';', '&&', '|', quotes that try to close the quoting, and a
newline. The local variant of the script is rendered with all of them at once and executed
with bash; the canary must not exist afterwards, and the strings must have arrived intact.
"""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml
from conftest import FIXTURE_SITES, RECIPES, hpcdl, shellcheck

from hpcdl.errors import HpcdlError
from hpcdl.executors.local import job_environment
from hpcdl.shell import (
    leading_variable,
    path_in_double_quotes,
    path_with_variables,
    slurm_directive_value,
    variables_in,
    with_braces,
)


def payloads() -> list[str]:
    # the canary's path comes from the environment, so the strings hold no '/' and can name files too
    c = "$HPCDL_CANARY"
    return [
        f"$(touch {c})",
        f"`touch {c}`",
        f"; touch {c}",
        f"' ; touch {c} ; '",
        f'" ; touch {c} ; "',
        f"&& touch {c}",
        f"| tee {c}",
        f"> {c}",
        f"$'\\x3b' touch {c}",
        f"${{IFS}}touch${{IFS}}{c}",
        "spaces  and\ttabs",
        "back\\slash # hash ! bang * star ~ tilde %j",
        "ünïcødé 名前",
    ]


def hostile_site(folder, node_local):
    """A local site whose node-local path is itself hostile (site profiles are input too)."""
    sites = folder / "sites"
    sites.mkdir()
    (sites / "hostile-local.yaml").write_text(yaml.safe_dump({
        "name": "hostile-local", "scheduler": "local", "launcher": "local", "runtime": "none", "mpi": "none",
        "node_kinds": {"node": {"sockets": 1, "cores_per_socket": 2, "memory_gb": 4, "default_ranks_per_socket": 2}},
        "filesystems": {"node_local": str(node_local), "node_local_kind": "tmpfs"},
        "modules": {"system": "none"},
    }))
    return sites


def test_hostile_strings_everywhere_run_nothing_in_the_local_script(tmp_path):
    canary = tmp_path / "CANARY"
    evil = payloads()
    name = " ".join(evil[:6])
    account = evil[6] + evil[0]
    data = tmp_path / f"data {evil[0]} {evil[1]} {evil[4]}"
    data.mkdir()
    (data / f"file {evil[2]}.bin").write_bytes(b"x" * 1000)
    (data / "nested").mkdir()
    (data / "nested" / "b.bin").write_bytes(b"y" * 10)
    # site paths expand $VARIABLES by design (/mnt/bb/$USER), so this one is hostile without '$'
    node_local = tmp_path / "node local ' ; touch CANARY ; ' `touch CANARY` \" ; touch CANARY"
    sites = hostile_site(tmp_path, node_local)
    recipe = yaml.safe_load((RECIPES / "digits-quick.yaml").read_text())
    recipe["data"].update(stage=True, path=str(data))
    recipe_file = tmp_path / "recipe.yaml"
    recipe_file.write_text(yaml.safe_dump(recipe))
    script = tmp_path / "job.sh"
    extra = [f"--max-iter={evil[0]}", evil[1], evil[3], evil[4]]
    proc = hpcdl("render", "--site", "hostile-local", recipe_file, "--name", name, "--account", account,
                 "--partition", evil[7], "--image", evil[8], "--output-dir", evil[9], "-o", script, "--", *extra,
                 env={"HPCDL_SITE_PATH": str(sites)})
    assert proc.returncode == 0, proc.stderr
    shellcheck(script)
    job_dir = tmp_path / "job dir"
    run = subprocess.run(["bash", str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=300,
                         env=job_environment(job_dir, HPCDL_JOB_ID="7", HPCDL_CANARY=str(canary)))
    assert not canary.exists() and not list(tmp_path.rglob("CANARY")), "a hostile string ran a command"
    # the trainer refused the hostile arguments (they arrived as arguments, not as commands)
    assert run.returncode != 0
    assert evil[0] in run.stderr or evil[1] in run.stderr or "--max-iter" in run.stderr, run.stderr
    # the data set with its hostile name was staged literally under the hostile node-local path
    staged = node_local / "hpcdl-data-7" / data.name
    assert (staged / f"file {evil[2]}.bin").read_bytes() == b"x" * 1000
    assert (staged / "nested" / "b.bin").exists()
    assert json.loads((job_dir / "recipe.json").read_text())["data"]["path"] == str(staged)
    # and the job's own name is the literal string
    names = subprocess.run(["bash", "-c", 'grep "^HPCDL_JOB_NAME=" "$1" | head -n 1', "_", str(script)],
                           capture_output=True, text=True).stdout
    value = subprocess.run(["bash", "-c", names.strip() + '\nprintf %s "$HPCDL_JOB_NAME"'],
                           capture_output=True, text=True).stdout
    assert value == name
    assert not canary.exists()


@pytest.mark.parametrize("scheduler", ["slurm", "lsf", "pbs", "local"])
def test_a_newline_in_a_job_name_is_refused_naming_the_field_and_leaves_no_file(scheduler, tmp_path, fixture_sites):
    out = tmp_path / "job.sh"
    out.write_text("previous\n")
    # a site whose launcher (mpirun) runs under every scheduler: srun's is refused under any but Slurm first
    proc = hpcdl("render", "--site", "test-pbs-xeon", "--scheduler", scheduler, RECIPES / "digits-quick.yaml",
                 "--name", "two\nlines", "-o", out, env={"HPCDL_SITE_PATH": str(FIXTURE_SITES)})
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "name" in lines[0] and "newline" in lines[0]
    assert out.read_text() == "previous\n"  # untouched: written atomically or not at all
    assert [p.name for p in tmp_path.iterdir()] == ["job.sh"]


@pytest.mark.parametrize("field", ["--account", "--partition", "--constraint", "--time"])
def test_a_newline_in_any_directive_value_is_refused(field, tmp_path, fixture_sites):
    proc = hpcdl("render", "--site", "ci-slurm", RECIPES / "digits-quick.yaml", field, "x\ntouch y",
                 env={"HPCDL_SITE_PATH": str(FIXTURE_SITES)})
    assert proc.returncode == 2
    assert field.lstrip("-") in proc.stderr


def test_lsf_and_pbs_refuse_accounts_their_directives_cannot_carry(tmp_path, fixture_sites):
    for site in ("test-lsf-power9", "test-pbs-xeon"):
        proc = hpcdl("render", "--site", site, RECIPES / "digits-quick.yaml", "--account", "abc; rm -rf",
                     env={"HPCDL_SITE_PATH": str(FIXTURE_SITES)})
        assert proc.returncode == 2
        assert "account" in proc.stderr and "directive" in proc.stderr


def test_an_environment_name_that_is_not_a_shell_name_is_refused(tmp_path):
    sites = tmp_path / "sites"
    sites.mkdir()
    (sites / "badenv.yaml").write_text(yaml.safe_dump({
        "name": "badenv", "scheduler": "local", "launcher": "local",
        "node_kinds": {"node": {"sockets": 1, "cores_per_socket": 2, "memory_gb": 4}},
        "env": {"X;touch /tmp/owned": "1"},
    }))
    proc = hpcdl("render", "--site", "badenv", RECIPES / "digits-quick.yaml", env={"HPCDL_SITE_PATH": str(sites)})
    assert proc.returncode == 2 and "not a valid shell name" in proc.stderr


def test_site_paths_expand_variables_and_nothing_else():
    assert path_with_variables("/mnt/bb/$USER") == '/mnt/bb/"${USER}"'
    assert path_with_variables("/a/${HOME}/b c") == "/a/\"${HOME}\"'/b c'"
    word = path_with_variables("/x/$(touch y)/`id`/$")
    out = subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True, text=True).stdout
    assert out == "/x/$(touch y)/`id`/$"
    with pytest.raises(HpcdlError):
        path_with_variables("/a\nb")


def test_a_site_path_inside_a_double_quoted_word_expands_its_variables_and_nothing_else():
    assert path_in_double_quotes("/scratch/$USER") == "/scratch/${USER}"
    hostile = '/x/$(touch y)/`id`/"\\$(id)/$'
    word = '"' + path_in_double_quotes(hostile + "/${HOME}") + '/runs"'
    out = subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True, text=True,
                         env={"HOME": "/home/u", "PATH": "/usr/bin:/bin"}).stdout
    assert out == hostile + "//home/u/runs"
    with pytest.raises(HpcdlError):
        path_in_double_quotes("/a\nb")


def test_one_spelling_of_a_variable_reference_is_read_everywhere():
    """The profile's checks, the job script's quoting and the Container Engine's EDF read $NAME, ${NAME} and
    ${NAME%word} alike; a $( or a lone $ is no variable."""
    assert variables_in("$SCRATCH/${USER}/${SLURM_JOB_ACCOUNT%-gpu}/$(id)/$") == ["SCRATCH", "USER", "SLURM_JOB_ACCOUNT"]
    assert leading_variable("$RCAC_SCRATCH/runs") == leading_variable("${RCAC_SCRATCH}") == "RCAC_SCRATCH"
    assert leading_variable("$RCAC_SCRATCHES") == "RCAC_SCRATCHES"
    assert leading_variable("${RCAC_SCRATCH}x/runs") is None
    assert leading_variable("/scratch/$USER") is None
    assert leading_variable("${RCAC_SCRATCH%/x}/runs") is None
    assert with_braces("/mnt/bb/$USER/${HOME}/${A%-gpu}/$") == "/mnt/bb/${USER}/${HOME}/${A%-gpu}/$"


def test_slurm_directive_values_keep_plain_words_bare_and_quote_the_rest():
    assert slurm_directive_value("quad,cache") == "quad,cache"
    assert slurm_directive_value('a "b" \\ c') == '"a \\"b\\" \\\\ c"'


def test_hostile_image_and_trainer_arguments_reach_the_container_runtime_as_literal_words(tmp_path):
    """The launch line's words, as the runtime receives them: recorded by a stand-in `apptainer`
    first on PATH (a recorder written by this test, so the launch line itself is what is tested)."""
    canary = tmp_path / "CANARY"
    evil = payloads()
    sites = tmp_path / "sites"
    sites.mkdir()
    (sites / "hostile-apptainer.yaml").write_text(yaml.safe_dump({
        "name": "hostile-apptainer", "scheduler": "local", "launcher": "local", "runtime": "apptainer",
        "node_kinds": {"node": {"sockets": 1, "cores_per_socket": 2, "memory_gb": 4, "default_ranks_per_socket": 1}},
        "filesystems": {"scratch": str(tmp_path / "scratch ; touch CANARY")}, "modules": {"system": "none"},
    }))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    recorder = bin_dir / "apptainer"
    recorder.write_text('#!/bin/bash\nprintf "%s\\0" "$@" > "$APPTAINER_ARGV"\n')
    recorder.chmod(0o755)
    image = f"img {evil[0]} {evil[4]}.sif"
    extra = [evil[1], evil[3], evil[9], "two\nlines"]
    script = tmp_path / "job.sh"
    proc = hpcdl("render", "--site", "hostile-apptainer", RECIPES / "digits-quick.yaml", "--image", image,
                 "-o", script, "--", *extra, env={"HPCDL_SITE_PATH": str(sites)})
    assert proc.returncode == 0, proc.stderr
    shellcheck(script)
    env = job_environment(tmp_path / "job", HPCDL_CANARY=str(canary), APPTAINER_ARGV=str(tmp_path / "argv"))
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    run = subprocess.run(["bash", str(script)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    assert not canary.exists() and not list(tmp_path.rglob("CANARY"))
    argv = (tmp_path / "argv").read_text().split("\0")[:-1]
    assert argv[:4] == ["exec", "--bind", str(tmp_path / "scratch ; touch CANARY"), image]
    assert argv[4:] == ["hpcdl", "train", "recipe.json", "--plan", "plan.json", "--results", "results.jsonl", *extra]

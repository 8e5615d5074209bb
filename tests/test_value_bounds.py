"""Values that can only fail later, or never end, are refused where they are read (#29): one line
naming the field. Each case here was accepted with exit 0 by `hpcdl render` before."""

from __future__ import annotations

import pytest
import yaml

from conftest import FIXTURE_SITES, RECIPES, hpcdl
from hpcdl.errors import HpcdlError
from hpcdl.shell import one_line
from hpcdl.sites.registry import load_site_file
from hpcdl.train.recipe import recipe_from_dict

BASE_RECIPE = {"name": "r", "net": "cifar10_quick", "batch_size": 16, "base_lr": 0.01, "max_iter": 10}


@pytest.mark.parametrize("field, value", [
    ("batch_size", 10**25), ("max_iter", 10**29), ("test_iter", 10**20), ("iter_size", 10**12),
    ("collective_timeout_s", 1e308), ("bucket_cap_mb", 1e308), ("random_seed", 10**26),
    ("data.num_classes", 10**12), ("data.num_classes", 10**9), ("data.synthetic_samples", 10**15),
    ("data.synthetic_samples", 10**12), ("data.workers", 10**6), ("weights", "/dev/zero"),
])
def test_a_recipe_value_beyond_any_run_is_refused_naming_its_field(field, value):
    data = {**BASE_RECIPE, "data": {"source": "synthetic", "image_size": 32}}
    if field.startswith("data."):
        data["data"][field.removeprefix("data.")] = value
    else:
        data[field] = value
    with pytest.raises(HpcdlError) as exc:
        recipe_from_dict(data, "r.yaml")
    assert field.split(".")[-1] in str(exc.value) and "\n" not in str(exc.value)


def test_the_shipped_recipes_stay_within_the_bounds():
    from hpcdl.train.recipe import load_recipe

    for path in sorted((RECIPES).glob("*.yaml")):
        load_recipe(path)


def site_file(tmp_path, change):
    data = yaml.safe_load((FIXTURE_SITES / "test-slurm-a100.yaml").read_text())
    data["name"] = "bad"
    change(data, next(iter(data["node_kinds"].values())))
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


PROFILE_CASES = {
    "sockets": lambda d, k: k.update(sockets=True),
    "memory_gb": lambda d, k: k.update(memory_gb=float("inf")),
    "port": lambda d, k: k["nics"][0].update(port=10**20),
    "default_threads_per_rank": lambda d, k: k.update(default_threads_per_rank=100_000_000),
    "nodes_per_host": lambda d, k: k.update(nodes_per_host=10**12),
}


@pytest.mark.parametrize("field", PROFILE_CASES)
def test_a_profile_value_no_node_has_is_refused_naming_its_field(tmp_path, field):
    with pytest.raises(HpcdlError, match=field):
        load_site_file(site_file(tmp_path, PROFILE_CASES[field]))


@pytest.mark.parametrize("where", ["--time", "defaults.time"])
def test_a_time_limit_beyond_a_year_is_refused(tmp_path, where):
    recipe = str(RECIPES / "cifar10-quick.yaml")
    if where == "--time":
        proc = hpcdl("render", recipe, "-s", "volta-x86", "--time", "99999999999999999", "-o", str(tmp_path / "j.sh"))
    else:
        path = site_file(tmp_path, lambda d, k: d["defaults"].update(time="99999999999999:00:00"))
        proc = hpcdl("render", recipe, "-s", "bad", "-o", str(tmp_path / "j.sh"), env={"HPCDL_SITE_PATH": str(path.parent)})
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "time:" in lines[0] and "a year" in lines[0], proc.stderr


@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\u202e", "\u200b", "\x1b"])
def test_line_separators_and_text_direction_overrides_never_reach_a_directive(char):
    """bash and sbatch ignore them, but an editor shows a line break or reversed text, hiding what a
    reviewed script asks for (Trojan Source, CVE-2021-42574)."""
    with pytest.raises(HpcdlError, match=f"U\\+{ord(char):04X}"):
        one_line("name", f"x{char}touch y")
    assert one_line("name", "résumé-日本") == "résumé-日本"  # printable text in any script is fine


def test_a_percent_in_the_output_folder_reaches_slurm_as_a_literal_percent(tmp_path):
    """sbatch expands %j, %u ... in --output; "%%" is its "%" (sbatch(1), filename pattern)."""
    out = tmp_path / "j.sh"
    proc = hpcdl("render", str(RECIPES / "cifar10-quick.yaml"), "-s", "volta-x86", "--output-dir", "runs/%j%u",
                 "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    line = next(line for line in out.read_text().splitlines() if line.startswith("#SBATCH --output="))
    assert line.startswith("#SBATCH --output=runs/%%j%%u/") and line.endswith("-%j.out"), line


def test_modules_init_must_be_absolute_and_is_sourced_after_double_dash(tmp_path):
    """A relative init resolved against the job folder (../../../../etc/passwd was sourced); a value
    starting with '-' was taken as an option of `source`."""
    with pytest.raises(HpcdlError, match="modules.init"):
        load_site_file(site_file(tmp_path, lambda d, k: d["modules"].update(init="../../../../etc/passwd")))
    out = tmp_path / "j.sh"
    proc = hpcdl("render", str(RECIPES / "cifar10-quick.yaml"), "-s", "test-slurm-a100", "-o", str(out),
                 env={"HPCDL_SITE_PATH": str(FIXTURE_SITES)})
    assert proc.returncode == 0, proc.stderr
    assert "source -- /usr/share/lmod/lmod/init/bash" in out.read_text()


def test_a_modules_init_under_a_variable_is_sourced_from_where_the_variable_points(tmp_path, monkeypatch):
    """The schema took `modules.init: $HOME/...` (absolute once its variable expands), but the job
    script quoted it whole, so bash sourced a file literally named '$HOME/...' and the job failed
    (the audit kit's exec pass); `$(touch x)`, which is no variable, passed as one too."""
    import subprocess

    from hpcdl.cli import main

    for bad in ("$(touch x)/init/bash", "$NOT_SET_ANYWHERE/init/bash"):
        with pytest.raises(HpcdlError, match="modules.init"):
            load_site_file(site_file(tmp_path, lambda d, k: d["modules"].update(init=bad)))
    sites, out, home = tmp_path / "sites", tmp_path / "j.sh", tmp_path / "home"
    sites.mkdir()
    monkeypatch.setenv("HPCDL_SITE_PATH", str(sites))

    def source_line(init: str) -> str:
        """The job script's `source` line for this modules.init, run by bash with HOME set."""
        site_file(tmp_path, lambda d, k: d["modules"].update(init=init)).rename(sites / "bad.yaml")
        with pytest.raises(SystemExit) as done:
            main(["render", str(RECIPES / "cifar10-quick.yaml"), "-s", "bad", "-o", str(out)])
        assert done.value.code == 0
        line = next(line for line in out.read_text().splitlines() if line.startswith("source -- "))
        return subprocess.run(["bash", "-c", line], env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
                              capture_output=True, text=True).stdout

    init = home / "lmod init" / "bash"
    init.parent.mkdir(parents=True)
    init.write_text("echo sourced")
    assert source_line("${HOME}/lmod init/bash") == "sourced\n"
    # only the leading variable expands: what follows it stays literal text
    canary = tmp_path / "CANARY"
    for hostile in (f"${{HOME}}/$(touch {canary})/`touch {canary}`", f"/opt/x';touch {canary};'\"$(touch {canary})"):
        source_line(hostile)
        assert not canary.exists(), hostile


def test_nothing_hpcdl_writes_is_world_writable_under_umask_000(tmp_path):
    import os
    import subprocess
    import sys

    proc = subprocess.run(f"umask 000; exec {sys.executable} -m hpcdl submit --dry-run -s local "
                          f"{RECIPES / 'cifar10-quick.yaml'}", shell=True, cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    written = [p for p in tmp_path.rglob("*")]
    assert written and not [p for p in written if os.stat(p).st_mode & 0o002], written


def test_the_cluster_bring_up_lock_is_never_another_users_file(tmp_path, monkeypatch):
    """The lock's fixed name in the shared temporary folder: another user could create it first (or
    make it a FIFO) and `hpcdl cluster up` would wait forever."""
    import os

    from hpcdl import cluster

    shared = tmp_path / "hpcdl-slurm-harness.lock"
    os.mkfifo(shared)
    monkeypatch.setattr(cluster, "BRING_UP_LOCK", shared)
    with cluster._bring_up_lock():  # would block on the FIFO's open before
        pass
    assert (tmp_path / f"hpcdl-slurm-harness-{os.geteuid()}.lock").is_file()
    shared.unlink()
    os.symlink(tmp_path / "elsewhere", shared)
    with cluster._bring_up_lock():
        pass
    assert not (tmp_path / "elsewhere").exists()  # the link was not followed


@pytest.mark.parametrize("name", ["none.caffemodel", "A" * 10_000])
def test_weights_that_are_not_there_are_refused_at_render(tmp_path, name):
    """Refused only by `train` on the compute node before, after the queue wait."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({**BASE_RECIPE, "weights": str(tmp_path / name)}))
    proc = hpcdl("render", str(recipe), "-s", "local", "-o", str(tmp_path / "j.sh"))
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "weights:" in lines[0], proc.stderr
    assert not (tmp_path / "j.sh").exists()


def test_an_empty_modulefiles_prefix_is_refused_not_taken_for_the_default(tmp_path, capsys):
    """`--prefix ''` (an unset shell variable, say) silently became the install running the
    command: modulefiles pointing at this machine's venv (the audit kit's modulefile pass)."""
    from hpcdl.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["modulefiles", "render", "-s", "volta-x86", "--prefix", "", "--allow-missing-prefix",
              "-o", str(tmp_path / "mods")])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exit_.value.code == 2 and len(err) == 1 and "--prefix" in err[0], err
    assert not (tmp_path / "mods").exists()


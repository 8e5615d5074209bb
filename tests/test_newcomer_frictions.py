"""A newcomer's frictions (issue 28): each test fails on the code before its fix."""

from __future__ import annotations

import re

import pytest

from conftest import RECIPES, hpcdl


def one_error_line(proc) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("hpcdl: error: "), proc.stderr
    return lines[0]


# --- item 9: a refusal recommends only what the same verb accepts ----------------------------------

@pytest.mark.parametrize("verb", ["plan", "render", "submit"])
def test_the_tensorflow_horovod_refusal_advises_only_a_dist_the_same_verb_takes(verb, tmp_path):
    args = [verb, "-s", "local", "-f", "tensorflow"]
    if verb != "plan":
        args.append(RECIPES / "digits-quick.yaml")
    if verb == "submit":
        args += ["--dry-run", "-o", tmp_path / "job"]
    message = one_error_line(hpcdl(*args, "--dist", "horovod"))
    advised = re.findall(r"--dist[ =](\w+)", message)
    assert advised, message  # it says what to use instead
    for value in advised:
        if verb == "submit":
            args[-1] = tmp_path / f"job-{value}"
        proc = hpcdl(*args, "--dist", value)
        assert proc.returncode == 0, (message, proc.stderr)


# --- item 10: a shipped recipe is taken by its name wherever a recipe file is taken ---------------

@pytest.mark.parametrize("args", [
    ["render", "-s", "local", "digits-quick"],
    ["submit", "-s", "local", "digits-quick", "--dry-run", "-o", "job"],
    ["plan", "-s", "local", "--recipe", "digits-quick"],
    ["predict", "-s", "local", "-N", "1", "digits-quick"],
], ids=lambda a: a[0])
def test_a_shipped_recipe_is_taken_by_name_outside_a_checkout(args, tmp_path):
    proc = hpcdl(*args, cwd=tmp_path)  # no recipes/ folder here, as for a module user
    assert proc.returncode == 0, proc.stderr


def test_a_name_that_is_neither_a_file_nor_shipped_says_both_and_where_to_look(tmp_path):
    message = one_error_line(hpcdl("render", "-s", "local", "digits-quik", cwd=tmp_path))
    assert "no such file" in message and "digits-quick" in message and "hpcdl recipes" in message


def test_a_file_of_the_same_name_wins_over_the_shipped_recipe(tmp_path):
    (tmp_path / "digits-quick.yaml").write_text(
        (RECIPES / "digits-quick.yaml").read_text().replace("batch_size: 32 ", "batch_size: 48 "))
    text = hpcdl("render", "-s", "local", "digits-quick.yaml", cwd=tmp_path, check=True).stdout
    assert '"batch_size": 48' in text


def test_recipes_list_is_a_verb_and_lists_the_same_as_recipes():
    listed = hpcdl("recipes", "list", check=True).stdout
    assert listed == hpcdl("recipes", check=True).stdout and "digits-quick" in listed


# --- item 12: what a local run can check is checked before launching; 2 stays the usage code ------

FIRST = """name: first
net: cifar10_quick
data: {source: %s, path: %s, image_size: 32}
batch_size: 32
base_lr: 0.01
max_iter: 2
test_interval: 2
"""


def test_a_missing_data_path_is_one_line_before_any_rank_starts(tmp_path):
    (tmp_path / "bad.yaml").write_text(FIRST % ("imagefolder", "/nonexistent/data"))
    proc = hpcdl("run", "-s", "local", "bad.yaml", "-o", "r", cwd=tmp_path)
    assert "data.path" in one_error_line(proc) and "/nonexistent/data" in proc.stderr
    assert not (tmp_path / "r").exists()  # nothing launched, no run folder


def test_a_missing_framework_is_one_line_before_any_rank_starts(tmp_path):
    from hpcdl.train.preflight import check_before_launch
    from hpcdl.train.recipe import load_recipe
    from hpcdl.errors import HpcdlError

    recipe = load_recipe(RECIPES / "digits-quick.yaml")
    with pytest.raises(HpcdlError, match="mxnet is not installed here"):
        check_before_launch(recipe, "mxnet", "auto")  # the main venv has no MXNet (it has its own)
    check_before_launch(recipe, "pytorch", "auto")
    check_before_launch(recipe, "mxnet", "auto", frameworks_here=False)  # ranks in an image: its own MXNet


@pytest.mark.slow
def test_a_job_that_fails_at_start_makes_run_exit_1_not_the_usage_code(tmp_path):
    (tmp_path / "empty").mkdir()  # there, so the check before launch passes; no CIFAR-10 files in it
    (tmp_path / "bad.yaml").write_text(FIRST % ("cifar10", tmp_path / "empty"))
    proc = hpcdl("run", "-s", "local", "bad.yaml", "-o", "r", cwd=tmp_path, timeout=300)
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
    assert "data_batch" in (tmp_path / "r" / "output.log").read_text()


# --- item 11: the environment check names the framework that is missing ----------------------------

def test_the_environment_check_names_a_missing_framework_in_its_row(tmp_path):
    import json

    # Python's own way to make an import fail, as on an install without torch: None in sys.modules
    (tmp_path / "notorch").mkdir()
    (tmp_path / "notorch" / "sitecustomize.py").write_text("import sys\nsys.modules['torch'] = None\n")
    import os

    path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(tmp_path / "notorch")) if p)
    proc = hpcdl("validate", "--site", "local", "--checks", "environment", "--no-history", "-o", tmp_path / "v",
                 env={"PYTHONPATH": path}, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    verdicts = {r["name"]: r for r in map(json.loads, (tmp_path / "v" / "results.jsonl").read_text().splitlines())
                if r.get("event") == "verdict"}
    assert "environment/job" not in verdicts  # the job itself ended normally
    row = verdicts["environment/pytorch"]
    assert row["result"] == "fail" and "pytorch is not installed" in row["message"] and "torch" in row["message"]


# --- item 17: the tutorial says what good output looks like after its 40 iterations ----------------

def test_the_tutorial_says_what_the_first_runs_output_should_look_like():
    from conftest import ROOT

    text = (ROOT / "docs" / "tutorial.md").read_text()
    step5 = text.split("## 5.", 1)[1].split("## 6.", 1)[0]
    assert "What good output looks like" in step5 and "chance" in step5 and "expected" in step5
    assert "digits-quick" in step5  # and which shipped recipe shows real learning


# --- item 15: help and message text -----------------------------------------------------------------

@pytest.mark.parametrize("verb", ["plan", "render", "run", "predict", "validate"])
def test_an_option_hpcdl_site_can_give_is_not_marked_required(verb):
    text = hpcdl(verb, "--help", env={"COLUMNS": "80"}, check=True).stdout
    site = text.split("--site", 1)[1].split("\n  -", 1)[0]
    assert "HPCDL_SITE" in site and "required" not in site, site


def test_a_missing_site_is_still_refused_in_one_line(tmp_path):
    import os

    env = {k: v for k, v in os.environ.items() if k != "HPCDL_SITE"}
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "hpcdl", "plan"], capture_output=True, text=True, env=env)
    assert "--site" in one_error_line(proc) and "HPCDL_SITE" in proc.stderr


@pytest.mark.parametrize("verb", ["render", "run"])
def test_the_help_example_is_not_wrapped_inside_a_word(verb):
    for width in ("60", "80", "120"):
        text = hpcdl(verb, "--help", env={"COLUMNS": width}, check=True).stdout
        example = next(line for line in text.splitlines() if "-- --max-iter" in line)
        assert example.strip().startswith(f"hpcdl {verb} -s "), example


def test_one_file_is_one_file(tmp_path):
    proc = hpcdl("modulefiles", "render", "--site", "summit", "--prefix", "/opt/hpcdl", "--allow-missing-prefix",
                 "-o", tmp_path, check=True)
    assert "wrote 1 file to" in proc.stdout


def test_a_node_kind_called_node_is_not_named_twice():
    message = one_error_line(hpcdl("plan", "--site", "local", "-r", "4096"))
    assert "node node" not in message and "a local node has" in message


# --- item 16: completion completes values -----------------------------------------------------------

def complete(line: str) -> list[str]:
    """What `hpcdl --install-completion`'s bash function gets for the last word of `line`."""
    words = line.split(" ")
    proc = hpcdl(env={"_HPCDL_COMPLETE": "complete_bash", "COMP_WORDS": line, "COMP_CWORD": str(len(words) - 1)},
                 check=True)
    return proc.stdout.split()


def test_site_names_complete():
    names = complete("hpcdl plan --site s")
    assert {"summit", "stampede2-knl"} <= set(names) and all(n.startswith("s") for n in names)
    assert "perlmutter" in complete("hpcdl validate -s p") and "local" in complete("hpcdl sites show l")


def test_checks_complete_the_last_item_of_the_list():
    assert complete("hpcdl validate --checks environment,c") == ["environment,collectives", "environment,convergence"]


def test_node_kinds_are_those_of_the_site_on_the_line():
    assert sorted(complete("hpcdl plan --site perlmutter --node-kind ")) == ["cpu", "gpu"]
    assert complete("hpcdl plan --site nosuchsite --node-kind ") == []


def test_recipe_and_image_names_complete():
    assert complete("hpcdl run -s local digits") == ["digits-quick"]
    assert complete("hpcdl recipes copy cifar") == ["cifar10-quick"]
    assert complete("hpcdl images compat hop") == ["hopper-cuda"]
    assert "volta-cuda" in complete("hpcdl plan --image v")


# --- item 19: the docs say what the program does ----------------------------------------------------

def test_modules_md_names_only_the_wrappers_a_framework_module_has():
    from conftest import ROOT
    from hpcdl.modules.generator import FRAMEWORK_COMMANDS

    line = next(l for l in (ROOT / "docs" / "modules.md").read_text().splitlines() if l.startswith("module load pytorch"))
    said = line.split("#", 1)[1].split("that run")[0]
    assert set(re.findall(r"\w+", said)) - {"and"} == set(FRAMEWORK_COMMANDS["pytorch"]), line


def test_getting_started_names_the_nodes_cluster_up_makes():
    from conftest import ROOT
    from hpcdl.cluster import SlurmCluster

    text = (ROOT / "docs" / "getting-started.md").read_text()
    section = text.split("`hpcdl cluster up` starts", 1)[1].split("on this machine,", 1)[0] + \
        text.split("`hpcdl cluster up` starts", 1)[1].split("\n\n", 1)[0]
    for nodes in (1, 2):
        names = SlurmCluster("/nonexistent", nodes).node_names
        assert f"--nodes {nodes}" in section and all(f"`{n}`" in section for n in names), (nodes, names)


# --- item 20: validation job names put their distinguishing part first -------------------------------

@pytest.mark.parametrize("site", ["perlmutter", "summit", "stampede2-knl"])
def test_squeues_8_character_name_column_tells_the_validation_jobs_apart(site):
    listed = hpcdl("validate", "--site", site, "--nodes", "1,2", "--list", check=True).stdout.splitlines()[1:]
    shapes: dict[str, set] = {}
    for line in listed:
        name, rest = line.strip().split(": ", 1)
        assert not name.startswith("validate"), name
        shape = re.search(r"(\d+) node\(s\) x (\d+) rank\(s\)(?: x (\d+) thread)?", rest).groups()
        kind = "probe" if rest.startswith(("environment", "collectives")) else "train"
        shapes.setdefault(name[:8], set()).add((kind, *shape))
    # one shape per 8 characters: what squeue shows is where and how the job runs
    assert all(len(s) == 1 for s in shapes.values()), shapes


# --- item 8: sites detect names the profile after its file; nets import takes -o/--out -----------------

def test_a_detected_profile_written_to_a_file_loads_under_that_files_name(tmp_path):
    (tmp_path / "sites").mkdir()
    hpcdl("sites", "detect", "-o", tmp_path / "sites" / "mybox.yaml", check=True)
    plan = hpcdl("plan", "--site", "mybox", "--json", env={"HPCDL_SITE_PATH": str(tmp_path / "sites")}, check=True)
    assert '"site": "mybox"' in plan.stdout
    message = one_error_line(hpcdl("sites", "detect", "--name", "other", "-o", tmp_path / "sites" / "x.yaml"))
    assert "x.yaml" in message and not (tmp_path / "sites" / "x.yaml").exists()


@pytest.mark.parametrize("verb", [["nets", "import"], ["nets", "export"], ["recipes", "import"]], ids=" ".join)
def test_the_verbs_that_write_a_file_take_o_out_and_keep_output_hidden(verb):
    text = hpcdl(*verb, "--help", env={"COLUMNS": "120"}, check=True).stdout
    assert "-o, --out PATH" in text and "--output" not in text


def test_nets_import_writes_with_out_and_with_the_old_output(tmp_path):
    prototxt = tmp_path / "cifar10_quick.prototxt"
    hpcdl("nets", "export", "cifar10_quick", "--deploy", "-o", prototxt, check=True)
    for flag in ("--out", "--output"):
        proc = hpcdl("nets", "import", prototxt, flag, tmp_path / f"net{flag}.yaml")
        assert proc.returncode == 0 and (tmp_path / f"net{flag}.yaml").is_file(), proc.stderr


# --- item 6: the heavy parts are extras, and a missing one is one line naming it ----------------------

def test_the_login_node_cli_does_not_pull_in_scikit_learn_or_matplotlib():
    import tomllib

    from conftest import ROOT

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = " ".join(project["dependencies"])
    assert "scikit-learn" not in core and "matplotlib" not in core
    assert project["optional-dependencies"]["digits"] and project["optional-dependencies"]["reports"]
    makefile = (ROOT / "Makefile").read_text()
    extras = re.search(r"^PIP_EXTRAS := (.*)$", makefile, flags=re.M).group(1).split(",")
    assert {"digits", "reports"} <= set(extras)  # make setup still installs what the tests need


@pytest.fixture
def without_heavy_extras(tmp_path):
    """Python's own way to make an import fail, as on a plain install: None in sys.modules."""
    import os

    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "sitecustomize.py").write_text(
        "import sys\nfor m in ('sklearn', 'matplotlib'):\n    sys.modules[m] = None\n")
    return {"PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(tmp_path / "plain")) if p)}


def test_without_scikit_learn_the_digits_are_one_line_naming_the_extra(without_heavy_extras, tmp_path):
    proc = hpcdl("run", "-s", "local", "digits-quick", "-o", tmp_path / "r", env=without_heavy_extras)
    message = one_error_line(proc)
    assert "scikit-learn" in message and "hpcdl[digits]" in message and not (tmp_path / "r").exists()


def test_without_matplotlib_pictures_are_one_line_and_reports_keep_their_tables(without_heavy_extras, tmp_path):
    from conftest import ROOT

    message = one_error_line(hpcdl("plan", "-s", "local", "--picture", tmp_path / "n.png", env=without_heavy_extras))
    assert "hpcdl[reports]" in message
    example = ROOT / "docs" / "validation-example" / "results.jsonl"
    proc = hpcdl("report", example, "-o", tmp_path / "rep", env={**without_heavy_extras, "HPCDL_HISTORY": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    html = (tmp_path / "rep" / "index.html").read_text()
    assert "hpcdl[reports]" in html and "<h2>Summary</h2>" in html and not list((tmp_path / "rep").glob("*.png"))

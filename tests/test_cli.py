"""The command line: verbs are there, and bad input gets one clear line and exit status 2."""

from __future__ import annotations

from conftest import RECIPES, hpcdl


def assert_one_line_error(proc, *words):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_help_lists_the_verbs():
    out = hpcdl("--help", check=True).stdout
    for verb in ("sites", "plan", "render", "run", "train", "nets"):
        assert verb in out


def test_an_unknown_site_is_one_line_and_exit_2():
    proc = hpcdl("plan", "--site", "no-such-machine")
    assert_one_line_error(proc, "unknown site", "no-such-machine")


def test_a_recipe_that_does_not_exist_is_one_line_and_exit_2(tmp_path):
    proc = hpcdl("render", "--site", "local", str(tmp_path / "missing.yaml"))
    assert_one_line_error(proc, "missing.yaml", "no such file")


def test_a_malformed_recipe_names_the_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((RECIPES / "digits-quick.yaml").read_text().replace("base_lr: 0.01", "base_lr: fast"))
    proc = hpcdl("render", "--site", "local", str(bad))
    assert_one_line_error(proc, "bad.yaml", "base_lr")


def test_a_recipe_with_an_unknown_field_is_refused(tmp_path):
    bad = tmp_path / "typo.yaml"
    bad.write_text((RECIPES / "digits-quick.yaml").read_text() + "max_iters: 5\n")
    assert_one_line_error(hpcdl("train", str(bad)), "max_iters", "unknown field")


def test_a_recipe_that_is_not_yaml_is_refused(tmp_path):
    bad = tmp_path / "broken.yaml"
    bad.write_text("net: [cifar10_quick\n")
    assert_one_line_error(hpcdl("render", "--site", "local", str(bad)), "broken.yaml", "YAML")


def test_an_impossible_request_is_one_line_and_exit_2():
    proc = hpcdl("plan", "--site", "local", "--ranks-per-node", "999")
    assert_one_line_error(proc, "ranks_per_node", "999")


def test_nets_json_lists_cifar10_quick_with_its_published_count():
    import json

    nets = {n["name"]: n for n in json.loads(hpcdl("nets", "--json", check=True).stdout)}
    assert nets["cifar10_quick"]["parameters"] == 145_578

"""Published practice as the measure of correct: each centre's own launch line, directives,
environment and modules (tests/published/<site>.yaml, every check citing its URL), checked
against the job script hpcdl renders for that site. Golden files only guard against drift;
these say whether a plan is what the centre itself publishes.

A case names a shipped site, or a profile of its own (`profile:`) for a machine hpcdl does not
ship, written from the centre's guide with no code change (docs/sites.md). A machine outside hpcdl's
scope (ALCF Aurora's Intel GPUs) is a case whose profile must be `refused:` with one message naming
the field (`matching`, a regular expression) and a non-zero exit.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from hpcdl.errors import HpcdlError
from hpcdl.plan.planner import make_plan
from hpcdl.plan.request import JobRequest
from hpcdl.render.jobscript import JobOptions, render_job_script
from hpcdl.sites import load_site
from hpcdl.sites.registry import SHIPPED, load_site_file

PUBLISHED = Path(__file__).parent / "published"
CASES = sorted(PUBLISHED.glob("*.yaml"))
CHECK_KEYS = {
    "what", "centre", "source", "request", "options", "launcher", "launch", "launch_absent", "runtime",
    "directives", "directive_matching", "env", "env_absent", "modules", "rank_env", "script_absent",
    "script_matching", "known_mismatch",
}
DIRECTIVE_PREFIX = {"slurm": "#SBATCH ", "lsf": "#BSUB ", "pbs": "#PBS "}


def _case(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _checks():
    for path in CASES:
        for i, check in enumerate(_case(path)["checks"]):
            marks = [pytest.mark.xfail(reason=check["known_mismatch"], strict=True)] if "known_mismatch" in check else []
            yield pytest.param(path, i, id=f"{path.stem}-{i}-{check['what'][:40]}", marks=marks)


def _site(case: dict):
    return load_site_file(PUBLISHED / case["profile"]) if "profile" in case else load_site(case["site"])


class Rendered:
    def __init__(self, site, script: str):
        self.site, self.script = site, script
        lines = script.splitlines()
        prefix = DIRECTIVE_PREFIX.get(site.scheduler, "#")
        self.directives = [line[len(prefix):] for line in lines if line.startswith(prefix)]
        self.exports = {}
        for line in lines:
            if line.startswith("export ") and "=" in line:
                words = shlex.split(line[len("export "):])
                for w in words:
                    name, _, value = w.partition("=")
                    self.exports[name] = value
        self.modules = [w for line in lines if line.startswith("module load ") for w in shlex.split(line)[2:]]
        launch = [line for line in lines if line.endswith(" &") and " train " in line]
        assert len(launch) == 1, "one launch line"
        self.argv = shlex.split(launch[0][:-2])
        plan_json = script.split("<<'HPCDL_PLAN_JSON'\n", 1)[1].split("\nHPCDL_PLAN_JSON", 1)[0]
        import json

        self.plan = json.loads(plan_json)


def _has_option(argv: list[str], option: str, value) -> bool:
    value = None if value is None else str(value)
    for i, word in enumerate(argv):
        if value is None and (word == option or word.startswith(option + "=")):
            return True
        if word == f"{option}={value}" or (word == option and argv[i + 1 : i + 2] == [value]):
            return True
        if len(option) == 2 and option.startswith("-") and word == option + value:  # jsrun -n12, -bpacked:7
            return True
    return False


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_every_case_cites_the_centre_for_every_check(path):
    case = _case(path)
    assert case.get("sources"), f"{path.name}: sources: name the centre pages"
    for key, url in case["sources"].items():
        assert str(url).startswith("https://"), f"{path.name}: sources.{key} is not a URL"
    refused = case.get("refused")
    if refused:
        assert set(refused) == {"what", "centre", "source", "matching"}, f"{path.name}: refused: what, centre, source, matching"
        assert refused["source"] in case["sources"], f"{path.name}: refused.source is not in sources"
        assert not case["checks"], f"{path.name}: a refused profile has no checks"
    else:
        assert case["checks"], f"{path.name}: checks: at least one"
    for i, check in enumerate(case["checks"]):
        assert set(check) <= CHECK_KEYS, f"{path.name}: checks[{i}]: unknown {sorted(set(check) - CHECK_KEYS)}"
        assert check.get("centre"), f"{path.name}: checks[{i}]: quote the centre's own line under centre"
        assert check.get("source") in case["sources"], f"{path.name}: checks[{i}].source is not in sources"


def test_every_shipped_site_has_published_practice():
    shipped = {p.stem for p in SHIPPED.glob("*.yaml")}
    covered = {_case(p).get("site") for p in CASES}
    assert shipped <= covered, f"no tests/published/<site>.yaml for {sorted(shipped - covered)}"


REFUSED = [p for p in CASES if _case(p).get("refused")]


@pytest.mark.parametrize("path", REFUSED, ids=[p.stem for p in REFUSED])
def test_machine_outside_scope_is_refused_naming_the_field(path):
    case = _case(path)
    with pytest.raises(HpcdlError) as err:
        load_site_file(PUBLISHED / case["profile"])
    message = str(err.value)
    assert err.value.exit_code != 0
    assert "\n" not in message, "one line"
    assert re.search(case["refused"]["matching"], message), f"{path.name}: {message}"


@pytest.mark.parametrize("path,index", list(_checks()))
def test_rendered_job_follows_published_practice(path, index):
    case = _case(path)
    check = case["checks"][index]
    site = _site(case)
    request = JobRequest(**{**case.get("request", {}), **check.get("request", {})})
    options = JobOptions(**{**case.get("options", {}), **check.get("options", {})})
    plan = make_plan(site, request)
    job = Rendered(site, render_job_script(site, plan, {}, options))
    where = f"{path.name} [{check['source']}: {check['centre']}]"

    if "launcher" in check:
        assert job.argv[0] == check["launcher"], f"{where}: launcher {job.argv[0]}"
    for option, value in (check.get("launch") or {}).items():
        assert _has_option(job.argv, option, value), f"{where}: {option} {value} not in {' '.join(job.argv)}"
    for prefix in check.get("launch_absent", ()):
        assert not any(w.startswith(prefix) for w in job.argv), f"{where}: {prefix} in {' '.join(job.argv)}"
    for word in check.get("runtime", ()):
        assert word in job.argv or word in " ".join(job.argv), f"{where}: {word} not in {' '.join(job.argv)}"
    for directive in check.get("directives", ()):
        assert directive in job.directives, f"{where}: no directive {directive!r} in {job.directives}"
    for pattern in check.get("directive_matching", ()):
        assert any(re.fullmatch(pattern, d) for d in job.directives), f"{where}: no directive like {pattern!r}"
    for name, value in (check.get("env") or {}).items():
        assert job.exports.get(name) == str(value), f"{where}: {name}={job.exports.get(name)!r}, not {value!r}"
    for name in check.get("env_absent", ()):
        assert name not in job.exports, f"{where}: {name} is set"
    for module in check.get("modules", ()):
        assert module in job.modules, f"{where}: module {module} not loaded ({job.modules})"
    for local_rank, env in (check.get("rank_env") or {}).items():
        rank = next(r for r in job.plan["ranks"] if r["node"] == 0 and r["local_rank"] == int(local_rank))
        for name, value in env.items():
            assert rank["env"].get(name) == str(value), f"{where}: local rank {local_rank}: {name}={rank['env'].get(name)!r}"
    for text in check.get("script_absent", ()):
        assert text not in job.script, f"{where}: the script holds {text!r}"
    for pattern in check.get("script_matching", ()):
        assert re.search(pattern, job.script, re.M), f"{where}: nothing in the script matches {pattern!r}"

"""Published practice as the measure of correct: each centre's own launch line, directives,
environment and modules (tests/published/<site>.yaml, every check citing its URL), checked
against the job script hpcdl renders for that site. Golden files only guard against drift;
these say whether a plan is what the centre itself publishes.

A case names a shipped site, or a profile of its own (`profile:`) for a machine hpcdl does not
ship, written from the centre's guide with no code change (docs/sites.md). A machine outside hpcdl's
scope (ALCF Aurora's Intel GPUs) is a case whose profile must be `refused:` with one message naming
the field (`matching`, a regular expression) and a non-zero exit.

Matching is exact and reads only what runs: the launch line is split into argv (shlex) and cut into
the launcher's own options, the runtime's words and the program; `launch` matches whole option
tokens of the launcher's part (`--flag=value`, `--flag value`, jsrun's `-n4`), `runtime` whole
tokens of the runtime's part, `env` exact `KEY=value` of what the script exports; comments never
count. `placement` reads the plan each rank applies (its cores, the Linux CPU ids it binds to, GPUs, NIC). The mutation test
(test_published_mutations.py) breaks each plan in the ways a wrong plan would be wrong and asserts
that these checks notice.
"""

from __future__ import annotations

import copy
import functools
import json
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
    "what", "centre", "source", "request", "options", "launcher", "launch", "launch_only", "launch_absent", "runtime",
    "directives", "directive_matching", "env", "env_absent", "modules", "rank_env", "placement", "script_absent",
    "script_matching", "known_mismatch", "spawner", "spawn",
}
PLACEMENT_KEYS = {"cores", "cpus", "gpus", "nic", "socket"}
DIRECTIVE_PREFIX = {"slurm": "#SBATCH ", "lsf": "#BSUB ", "pbs": "#PBS "}
PROGRAM = ["hpcdl", "train"]  # the trainer's first words: what follows the runtime on the launch line
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


@functools.lru_cache(maxsize=None)
def _case_file(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _case(path: Path) -> dict:
    return copy.deepcopy(_case_file(path))


def _checks():
    for path in CASES:
        for i, check in enumerate(_case(path)["checks"]):
            marks = [pytest.mark.xfail(reason=check["known_mismatch"], strict=True)] if "known_mismatch" in check else []
            yield pytest.param(path, i, id=f"{path.stem}-{i}-{check['what'][:40]}", marks=marks)


def _site(case: dict):
    return _site_of(case.get("profile"), case.get("site"))


@functools.lru_cache(maxsize=None)
def _site_of(profile: str | None, name: str | None):
    return load_site_file(PUBLISHED / profile) if profile else load_site(name)


_PLANS: dict = {}


def _plan(site, request: dict):
    """The plan for a request, made once per site and request (the checks of a case share most)."""
    key = (id(site), json.dumps(request, sort_keys=True))
    if key not in _PLANS:
        _PLANS[key] = (site, make_plan(site, JobRequest(**request)))
    return _PLANS[key][1]


def launcher_options(words: list[str]) -> list[list[str]]:
    """The launcher's options after its name, one list of tokens per option: `--flag=value` and `-n4`
    alone, `--flag value` / `-n 16` / `-x NAME` as a pair (a value never starts with '-'). A `--` ends the
    options and is none itself ("The first -- argument that is not an option-argument should be accepted as a
    delimiter indicating the end of options", POSIX Utility Syntax Guideline 10): `hpcdl launch -n 8 -- PROGRAM`."""
    options, i = [], 1
    while i < len(words):
        word = words[i]
        if word == "--":
            break
        takes_value = word.startswith("-") and "=" not in word and i + 1 < len(words) and not words[i + 1].startswith("-")
        options.append(words[i : i + 2] if takes_value else [word])
        i += 2 if takes_value else 1
    return options


def test_the_end_of_options_is_no_option():
    assert launcher_options(["hpcdl", "--nproc", "8", "--nnodes", "1", "--"]) == [["--nproc", "8"], ["--nnodes", "1"]]
    assert launcher_options(["srun", "--nodes=2", "-n", "8"]) == [["--nodes=2"], ["-n", "8"]]


def option_is(tokens: list[str], option: str, value=None) -> bool:
    """Whether one launcher option (its tokens) is `option`, with exactly `value` where given."""
    first = tokens[0]
    if len(tokens) == 2:
        return first == option and (value is None or tokens[1] == str(value))
    if first == option:
        return value is None
    if first.startswith(option + "="):
        return value is None or first == f"{option}={value}"
    if len(option) == 2 and option[0] == "-" and option[1] != "-" and first.startswith(option) and "=" not in first:
        return value is None or first == option + str(value)  # jsrun -n12, -bpacked:7
    return False


class Rendered:
    """A rendered job as it runs: directives, exported variables, modules, and the launch line cut
    into the launcher's options, the runtime's words and the program. Comments are not read."""

    def __init__(self, site, script: str):
        self.site, self.script = site, script
        lines = script.splitlines()
        prefix = DIRECTIVE_PREFIX.get(site.scheduler, "#")
        self.directives = [line[len(prefix):] for line in lines if line.startswith(prefix)]
        code = [line for line in lines if not line.lstrip().startswith("#")]
        self.code = "\n".join(code)  # what a shell runs (and the plan it writes), with directives
        self.code_and_directives = "\n".join(line for line in lines if line.startswith(prefix)
                                             or not line.lstrip().startswith("#"))
        assigned, self.exports = {}, {}
        for line in code:
            try:
                words = shlex.split(line, comments=True) if line and not line.startswith((" ", "\t")) else []
            except ValueError:  # a line of a here-document, not a command
                continue
            if words[:1] == ["export"]:
                for word in words[1:]:
                    name, eq, value = word.partition("=")
                    self.exports[name] = value if eq else assigned.get(name, self.exports.get(name))
            elif len(words) == 1 and ASSIGNMENT.match(words[0]):
                name, _, value = words[0].partition("=")
                assigned[name] = value
        self.exports = {k: v for k, v in self.exports.items() if v is not None}
        self.modules = [w for line in code if line.startswith("module load ") for w in shlex.split(line)[2:]]
        launch = [line for line in code if line.endswith(" &") and " train " in line]
        assert len(launch) == 1, "one launch line"
        self.argv = split_line(launch[0][:-2])
        plan_json = script.split("<<'HPCDL_PLAN_JSON'\n", 1)[1].split("\nHPCDL_PLAN_JSON", 1)[0]
        self.plan = json.loads(plan_json)
        launcher = self.plan["launcher_argv"]
        assert self.argv[: len(launcher)] == launcher, f"the launch line does not start with the plan's {launcher}"
        program = max(i for i in range(len(self.argv)) if self.argv[i : i + len(PROGRAM)] == PROGRAM)
        self.launcher = self.argv[: len(launcher)]
        self.options = launcher_options(self.launcher)
        # a per-node spawner's words (launch.spawner: torchrun ...) sit between the runtime's and the program
        spawner = self.plan.get("spawner_argv", [])
        start = program - len(spawner)
        assert self.argv[start:program] == spawner, f"the launch line does not hold the plan's spawner {spawner}"
        self.runtime = self.argv[len(launcher) : start]
        self.spawner = self.argv[start:program]
        self.spawn_options = spawner_options(self.spawner)
        self.program = self.argv[program:]


ANSI_C = re.compile(r"\$'((?:[^'\\]|\\.)*)'")


def split_line(line: str) -> list[str]:
    """A launch line's words as bash reads them: shlex's, with each of bash's $'...' words (hpcdl.shell.quote writes a
    word holding quotes or `$` so) read as bash reads it, its escapes decoded."""
    return shlex.split(ANSI_C.sub(lambda m: shlex.quote(m.group(1).encode().decode("unicode_escape")), line))


def spawner_words(words: list[str]) -> list[str]:
    """The spawner's own words: those of the command a node's bash runs where the spawner reads its node's values
    there (launch.spawner_rendezvous: static, `/bin/bash -c 'exec torchrun ... --node_rank="${SLURM_NODEID}" ...
    "$@"' bash`), as that bash splits them (the variables left as the centre writes them), else the words as they are."""
    if words[:2] == ["/bin/bash", "-c"] and len(words) == 4 and words[3] == "bash":
        inner = shlex.split(words[2])
        assert inner[0] == "exec" and inner[-1] == "$@", f"a spawner's bash runs one command on the program: {words[2]}"
        return inner[1:-1]
    return words


def spawner_options(words: list[str]) -> list[list[str]]:
    """A spawner's options after its name (torchrun, or hpcdl launch), one list of tokens per option."""
    words = spawner_words(words)
    return launcher_options(words[1:] if words[:2] == ["hpcdl", "launch"] else words)


def self_word(spawner: list[str]) -> str | None:
    """The per-node spawner's name (torchrun; `hpcdl launch` as hpcdl), None where the launcher starts every rank."""
    spawner = spawner_words(spawner) if spawner else spawner
    if not spawner:
        return None
    return "hpcdl" if spawner[:2] == ["hpcdl", "launch"] else spawner[0]


def _has_option(job: Rendered, option: str, value) -> bool:
    values = value if isinstance(value, list) else [value]
    return all(any(option_is(tokens, option, None if v is None else str(v)) for tokens in job.options) for v in values)


def _cores(text) -> list[int]:
    """`[1, 2, 3]` or "1-7" or "1-7,9" or "0-54:2" (every second, as taskset's CPU lists write a stride):
    the cores or CPUs a placement check names."""
    if isinstance(text, list):
        return [int(c) for c in text]
    out = []
    for part in str(text).split(","):
        span, _, step = part.partition(":")
        a, _, b = span.partition("-")
        out += list(range(int(a), int(b or a) + 1, int(step or 1)))
    return out


def _socket(job: "Rendered", rank: dict, want):
    """The socket a placement check names for a rank: a number, or `gpu`, the socket its GPUs hang off in the
    profile (where a centre says each task sits on its own GPU's socket and not which socket that is)."""
    if want != "gpu":
        return int(want)
    _, kind = job.site.node_kind(job.plan["node_kind"])
    sockets = {kind.gpus[g].socket for g in rank["gpus"]}
    assert len(sockets) == 1, f"placement socket: gpu: rank {rank['rank']}'s GPUs {rank['gpus']} are on sockets {sockets}"
    return sockets.pop()


def effective_request(case: dict, check: dict) -> dict:
    return {**case.get("request", {}), **check.get("request", {})}


def checks_of_plan(case: dict, site, plan) -> list[dict]:
    """The case's checks that ask about this plan (a check's own request may well give the same)."""
    return [c for c in case["checks"] if _plan(site, effective_request(case, c)) == plan]


def named_options(checks: list[dict]) -> set[str]:
    """The launcher options these checks (of one plan) name: with `launch_only`, the launcher may
    take no other (each is there because a centre's line has it)."""
    return {o for c in checks for o in (c.get("launch") or {})}


def judge(check: dict, job: Rendered, where: str = "", named: set[str] = frozenset()) -> list[str]:
    """What in the rendered job differs from the check: one line per difference (empty: it follows).
    named: the options the case's other checks name (for `launch_only`)."""
    wrong = []
    line = " ".join(job.launcher)
    if "launcher" in check and job.argv[0] != check["launcher"]:
        wrong.append(f"{where}: launcher {job.argv[0]}")
    for option, value in (check.get("launch") or {}).items():
        if not _has_option(job, option, value):
            wrong.append(f"{where}: {option} {value} not among the launcher's options: {line}")
    if check.get("launch_only"):
        named = {*named, *(check.get("launch") or {})}
        foreign = [" ".join(t) for t in job.options if not any(option_is(t, o) for o in named)]
        if foreign:
            wrong.append(f"{where}: launcher options beyond the centre's: {foreign}")
    if "spawner" in check and self_word(job.spawner) != check["spawner"]:
        wrong.append(f"{where}: spawner {self_word(job.spawner)}, not {check['spawner']}")
    for option, value in (check.get("spawn") or {}).items():
        values = value if isinstance(value, list) else [value]
        if not all(any(option_is(t, option, None if v is None else str(v)) for t in job.spawn_options) for v in values):
            wrong.append(f"{where}: {option} {value} not among the spawner's options: {' '.join(job.spawner)}")
    for prefix in check.get("launch_absent", ()):
        if any(option_is(t, prefix) or t[0].startswith(prefix) for t in job.options):
            wrong.append(f"{where}: {prefix} in {line}")
    for word in check.get("runtime", ()):
        if word not in job.runtime:
            wrong.append(f"{where}: {word} is not a word of the runtime's part {job.runtime}")
    for directive in check.get("directives", ()):
        if directive not in job.directives:
            wrong.append(f"{where}: no directive {directive!r} in {job.directives}")
    for pattern in check.get("directive_matching", ()):
        if not any(re.fullmatch(pattern, d) for d in job.directives):
            wrong.append(f"{where}: no directive like {pattern!r}")
    for name, value in (check.get("env") or {}).items():
        if job.exports.get(name) != str(value):
            wrong.append(f"{where}: {name}={job.exports.get(name)!r}, not {value!r}")
    for name in check.get("env_absent", ()):
        if name in job.exports:
            wrong.append(f"{where}: {name} is set")
    for module in check.get("modules", ()):
        if module not in job.modules:
            wrong.append(f"{where}: module {module} not loaded ({job.modules})")
    for local_rank, env in (check.get("rank_env") or {}).items():
        for rank in (r for r in job.plan["ranks"] if r["local_rank"] == int(local_rank)):
            for name, value in env.items():  # a null value: the rank sets no such variable of its own
                if rank["env"].get(name) != (None if value is None else str(value)):
                    wrong.append(f"{where}: rank {rank['rank']}: {name}={rank['env'].get(name)!r}, not {value!r}")
    for local_rank, want in (check.get("placement") or {}).items():
        assert set(want) <= PLACEMENT_KEYS, f"{where}: placement: {sorted(set(want) - PLACEMENT_KEYS)}"
        for rank in (r for r in job.plan["ranks"] if r["local_rank"] == int(local_rank)):
            # the CPUs a rank binds to are a set (the plan lists them core by core, each core's threads together)
            got = {"cores": rank["cores"], "cpus": sorted(rank["cpus"]), "gpus": rank["gpus"], "nic": rank["nic"],
                   "socket": rank["socket"]}
            expected = {"cores": _cores(want["cores"]) if "cores" in want else None,
                        "cpus": sorted(_cores(want["cpus"])) if "cpus" in want else None,
                        "gpus": [int(g) for g in want["gpus"]] if "gpus" in want else None, "nic": want.get("nic"),
                        "socket": _socket(job, rank, want["socket"]) if "socket" in want else None}
            for key in want:
                if got[key] != expected[key]:
                    wrong.append(f"{where}: rank {rank['rank']} {key} {got[key]}, not {expected[key]}")
    for text in check.get("script_absent", ()):
        if text in job.code_and_directives:
            wrong.append(f"{where}: the script holds {text!r}")
    for pattern in check.get("script_matching", ()):
        if not re.search(pattern, job.code_and_directives, re.M):
            wrong.append(f"{where}: nothing the script runs matches {pattern!r}")
    return wrong


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


def render_case(path: Path, check: dict | None = None, plan_of=None):
    """The site, and the job it renders for the case's request (and the check's own, if any).
    plan_of: given the site and the plan, the plan to render instead (the mutation test's)."""
    case = _case(path)
    check = check or {}
    site = _site(case)
    options = JobOptions(**{**case.get("options", {}), **check.get("options", {})})
    plan = _plan(site, effective_request(case, check))
    if plan_of is not None:
        plan = plan_of(site, plan)
    return site, Rendered(site, render_job_script(site, plan, {}, options))


@pytest.mark.parametrize("path,index", list(_checks()))
def test_rendered_job_follows_published_practice(path, index):
    case = _case(path)
    check = case["checks"][index]
    site, job = render_case(path, check)
    named = named_options(checks_of_plan(case, site, _plan(site, effective_request(case, check))))
    wrong = judge(check, job, f"{path.name} [{check['source']}: {check['centre']}]", named)
    assert not wrong, "\n".join(wrong)


NUMBERINGS = ("thread-major", "core-major", "socket-interleaved")
CPU_CHECKS = [(p, i) for p in CASES for i, c in enumerate(_case(p)["checks"])
              if "known_mismatch" not in c and any("cpus" in want for want in (c.get("placement") or {}).values())]


@pytest.mark.parametrize("path,index", CPU_CHECKS, ids=[f"{p.stem}-{i}" for p, i in CPU_CHECKS])
def test_a_check_naming_cpus_fails_on_every_other_numbering(path, index):
    """A check that names the CPUs ranks bind to holds the centre's numbering: the profile numbering
    the node any other way that moves a CPU (TACC Frontera's socket-interleaved proc-ids read as
    consecutive, a POWER node read as x86) fails it."""
    case = _case(path)
    check = case["checks"][index]
    site = _site(case)
    request = effective_request(case, check)
    kind = _plan(site, request).node_kind
    node = site.node_kinds[kind]
    options = JobOptions(**{**case.get("options", {}), **check.get("options", {})})
    moved = []
    for numbering in NUMBERINGS:
        other = node.model_copy(update={"cpu_numbering": numbering})
        if all(other.cpus_of_core(c) == node.cpus_of_core(c) for c in range(node.cores)):
            continue  # the same CPUs (one socket, or the node's own numbering)
        wrong = site.model_copy(update={"node_kinds": {**site.node_kinds, kind: other}})
        job = Rendered(wrong, render_job_script(wrong, make_plan(wrong, JobRequest(**request)), {}, options))
        assert judge(check, job, path.stem), f"{path.stem}: checks[{index}] passes with cpu_numbering: {numbering}"
        moved.append(numbering)
    assert moved, f"{path.stem}: checks[{index}]: no other numbering moves a CPU of node kind {kind}"


def test_matching_is_exact_and_reads_no_comments():
    """The matcher itself: a flag inside another flag, a word of the trainer, a comment and a
    variable's prefix are not the thing a check names."""
    from types import SimpleNamespace

    script = "\n".join([
        "#!/bin/bash", "#SBATCH --nodes=2", "# srun --gpu ignore=me NCCL_NET=x", "export NCCL_NET='AWS Libfabric'",
        "export FI_A=1 FI_B=2", "MASTER_ADDR=$(hostname)", "export MASTER_ADDR",
        "cat > plan.json <<'HPCDL_PLAN_JSON'",
        json.dumps({"launcher_argv": ["srun", "--gpus-per-node=4", "-n", "8", "--cpu-bind=cores"], "ranks": []}),
        "HPCDL_PLAN_JSON",
        "srun --gpus-per-node=4 -n 8 --cpu-bind=cores podman-hpc run --gpus hpcdl train r.json --gpu-bind none &",
    ])
    job = Rendered(SimpleNamespace(scheduler="slurm"), script)
    assert job.launcher == ["srun", "--gpus-per-node=4", "-n", "8", "--cpu-bind=cores"]
    assert job.runtime == ["podman-hpc", "run", "--gpus"] and job.program[:2] == ["hpcdl", "train"]
    assert job.exports == {"NCCL_NET": "AWS Libfabric", "FI_A": "1", "FI_B": "2", "MASTER_ADDR": "$(hostname)"}
    assert judge({"runtime": ["--gpus"], "launch": {"-n": 8, "--gpus-per-node": 4, "--cpu-bind": "cores"},
                  "launch_only": True}, job) == []
    assert judge({"runtime": ["--gpu"]}, job)  # a prefix of --gpus is not --gpu
    assert judge({"launch": {"--gpu": None}}, job)  # nor of --gpus-per-node
    assert judge({"launch": {"--gpu-bind": "none"}}, job)  # the trainer's words are not the launcher's
    assert judge({"launch": {"-n": 8}, "launch_only": True}, job)  # two options beyond it
    assert judge({"env": {"FI_A": "12"}}, job) and judge({"env": {"ignore": "me"}}, job)
    assert judge({"script_matching": ["ignore=me"]}, job)  # comments never count
    assert judge({"script_matching": ["^#SBATCH --nodes=2$"]}, job) == []


# ---- the Slurm node each centre publishes (slurm_nodes:), posed by tests/test_slurm_shapes.py

NODE_FACTS = {"source", "says", "sockets", "cores_per_socket", "threads_per_core", "cpus", "spec_cores", "gpus",
              "gpu_type"}
# Slurm sites whose node no centre page read here describes: posed from the profile, and said so
UNPUBLISHED_NODES: dict[str, str] = {}


def slurm_node_facts(case: dict) -> dict:
    return case.get("slurm_nodes") or {}


SLURM_CASES = [p for p in CASES if not _case(p).get("refused") and _site(_case(p)).scheduler == "slurm"]
SLURM_KINDS = [(p, kind) for p in SLURM_CASES for kind in _site(_case(p)).node_kinds]


@pytest.mark.parametrize("path", SLURM_CASES, ids=[p.stem for p in SLURM_CASES])
def test_every_slurm_site_poses_the_node_its_centre_publishes(path):
    case = _case(path)
    facts = slurm_node_facts(case)
    if path.stem in UNPUBLISHED_NODES:
        assert not facts, f"{path.stem}: has slurm_nodes; take it off UNPUBLISHED_NODES"
        return
    assert set(facts) == set(_site(case).node_kinds), f"{path.name}: slurm_nodes: one per node kind"
    for kind, node in facts.items():
        assert set(node) <= NODE_FACTS and {"source", "says", "sockets", "cores_per_socket", "threads_per_core",
                                            "cpus"} <= set(node), f"{path.name}: slurm_nodes.{kind}: {sorted(node)}"
        sources = node["source"] if isinstance(node["source"], list) else [node["source"]]
        assert set(sources) <= set(case["sources"]), f"{path.name}: slurm_nodes.{kind}.source is not in sources"


def slurm_refuses(facts: dict, plan, job: Rendered) -> str | None:
    """Why a Slurm shaped like the published node would not run the job as the plan means it: a
    task gets the cores `-c` buys there (CPUs per core as the centre's Slurm counts them, or one
    where the job asks --threads-per-core=1 or --hint=nomultithread, which "[don't] use extra threads
    with in-core multi-threading", srun(1)); they must be the plan's and fit beside the system's
    cores (None: it runs as planned)."""
    cores = facts["sockets"] * facts["cores_per_socket"]
    per_core = facts["cpus"] // cores
    options = {t[0].split("=", 1)[0]: (t[0].split("=", 1) + [None])[1] for t in job.options if len(t) == 1}
    directives = dict(d.split("=", 1) for d in job.directives if d.startswith("--") and "=" in d)
    if (options.get("--threads-per-core") or directives.get("--threads-per-core")) == "1" or \
            "nomultithread" in (options.get("--hint"), directives.get("--hint")):
        per_core = 1
    asked = options.get("--cpus-per-task") or directives.get("--cpus-per-task")
    if asked is None:
        return None  # ibrun and the like: the launcher places the ranks, Slurm gives whole nodes
    planned = len(plan.local_ranks()[0].cores)
    tasks = plan.ranks_per_node
    if plan.spawner:
        planned, tasks = planned * plan.ranks_per_node, 1  # one task per node holds its ranks' cores (launch.spawner)
    given = -(-int(asked) // per_core)
    header_tasks = directives.get("--ntasks-per-node")
    if "--cpus-per-task" not in options and header_tasks and int(header_tasks) != tasks:
        # a header of the job's cores as one-CPU tasks (defaults.batch_request: cores) under a launcher that lays the
        # ranks over them itself (Open MPI's mpirun: CU Boulder Alpine's "--ntasks=50 --gres=gpu:2", "mpirun -np
        # 4"): the node's CPUs it buys must hold the ranks' cores
        bought = -(-int(header_tasks) * int(asked) // per_core)
        if bought != planned * tasks:
            return (f"--ntasks-per-node={header_tasks} x -c {asked} buys {bought} core(s) a node on the published node "
                    f"({per_core} CPU(s) per core), the plan means {tasks} x {planned}")
        given = planned
    if given != planned:
        return (f"-c {asked} buys {given} core(s) per task on the published node ({per_core} CPU(s) per core), "
                f"the plan means {planned}")
    kept = set(facts.get("spec_cores", ())) & {c for r in plan.local_ranks() for c in r.cores}
    if kept:
        return f"the plan puts ranks on cores {sorted(kept)}, which Slurm keeps for the system there"
    free = cores - len(facts.get("spec_cores", ()))
    if tasks * given > free:
        return f"{tasks} tasks x {given} cores is more than the {free} cores Slurm gives jobs"
    return None


def _kind_job(site, case: dict, kind: str):
    request = {**case.get("request", {}), "node_kind": kind}
    node = site.node_kinds[kind]
    request["use_gpus"] = bool(node.gpus)
    plan = make_plan(site, JobRequest(**request))
    return plan, Rendered(site, render_job_script(site, plan, {}, JobOptions(**case.get("options", {}))))


PUBLISHED_KINDS = [(p, k) for p, k in SLURM_KINDS if k in slurm_node_facts(_case(p))]


@pytest.mark.parametrize("path,kind", PUBLISHED_KINDS, ids=[f"{p.stem}-{k}" for p, k in PUBLISHED_KINDS])
def test_the_plan_runs_as_planned_on_the_published_node(path, kind):
    case = _case(path)
    site = _site(case)
    plan, job = _kind_job(site, case, kind)
    assert slurm_refuses(case["slurm_nodes"][kind], plan, job) is None


@pytest.mark.parametrize("path,kind", PUBLISHED_KINDS, ids=[f"{p.stem}-{k}" for p, k in PUBLISHED_KINDS])
def test_a_profile_counting_cpus_wrongly_is_refused_on_the_published_node(path, kind):
    """The profile says Slurm counts twice the CPUs per core the centre's Slurm does (a hardware
    thread too many, as a profile written without `scontrol show node` would): its -c buys twice
    the cores on the real node, more than the node holds."""
    case = _case(path)
    site = _site(case)
    facts = case["slurm_nodes"][kind]
    counted = 2 * facts["cpus"] // (facts["sockets"] * facts["cores_per_socket"])
    node = site.node_kinds[kind]
    wrong = node.model_copy(update={"threads_per_core": max(node.threads_per_core, counted),
                                    "scheduler_cpus_per_core": counted})
    site = site.model_copy(update={"node_kinds": {**site.node_kinds, kind: wrong}})
    plan, job = _kind_job(site, case, kind)
    if not any(t[0].startswith("--cpus-per-task") for t in job.options) and \
            not any(d.startswith("--cpus-per-task") for d in job.directives):
        # whole nodes, or a node's share by its GPUs (N8 CIR Bede: "--gres=gpu:1 ... plus 25% of node CPU"): no CPU
        # count reaches Slurm, so none can be wrong; the launcher places the ranks
        pytest.skip(f"{site.launcher}: Slurm is asked for no CPUs, the launcher places the ranks")
    assert slurm_refuses(facts, plan, job), f"{path.stem} {kind}: the wrong counting passes"

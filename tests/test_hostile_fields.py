"""Every field a profile, a recipe or the command line gives to a job script runs nothing.

The fields are not a hand-picked list: they are enumerated from the site-profile schema
(hpcdl.sites.schema.Site), the recipe schema (hpcdl.train.recipe.Recipe) and the options of
`hpcdl render` itself, so a field added later is covered the day it is added. Each field gets
a few representative hostile values (command substitution, quote breakouts, a Lua breakout,
a newline with a command, injected batch directives); each is rendered under every scheduler.
A value is either refused with one line (status 2) or rendered into a script that passes
`bash -n`, carries batch directives only in its header, and, executed with stand-in launchers
and scheduler commands first on PATH, leaves no canary file behind.
"""

from __future__ import annotations

import copy
import subprocess
import typing
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from conftest import RECIPES
from hpcdl.errors import HpcdlError
from hpcdl.render.jobscript import SCHEDULERS
from hpcdl.sites.schema import Site
from hpcdl.train.recipe import Recipe

C = "$HPCDL_CANARY"
PAYLOADS = {
    "substitution": (f"a$(touch {C})`touch {C}`';touch {C};'\";touch {C};\""
                     "]]..os.execute('touch '..os.getenv('HPCDL_CANARY'))..[[\"..os.execute('touch '..os.getenv('HPCDL_CANARY')).."
                     "]==]..os.execute('touch '..os.getenv('HPCDL_CANARY'))..[==["),
    "newline": f"x\ntouch {C} #",
    "directives": f"x\r\n#SBATCH --output=y\n#BSUB -o y\n#PBS -o y\n#DW jobdw x\ntouch {C}",
}

BASE_SITE = {
    "name": "hostile",
    "description": "the base every hostile field is put into",
    "sources": ["https://example.org/guide"],
    "scheduler": "slurm", "launcher": "mpirun", "runtime": "apptainer", "mpi": "openmpi",
    "node_kinds": {"node": {
        "description": "a node", "cpu_model": "cpu", "cpu_target": "x86_64",
        "sockets": 2, "cores_per_socket": 4, "memory_gb": 64,
        "gpus": [{"model": "V100", "socket": 0}, {"model": "V100", "socket": 1}],
        "nics": [{"kind": "infiniband", "device": "mlx5_0", "socket": 0, "netdev": "ib0"},
                 {"kind": "infiniband", "device": "mlx5_1", "socket": 1, "netdev": "ib1"}],
    }},
    "default_node_kind": "node",
    "filesystems": {"scratch": "/scratch/$USER", "node_local": "NODE_LOCAL", "node_local_kind": "nvme"},
    "modules": {"system": "lmod", "init": "MODULE_INIT", "load": ["openmpi/4.1"], "runtime": "apptainer",
                "frameworks": {"pytorch": "pytorch/2.1"}},
    "defaults": {"partition": "gpu", "account": "abc", "qos": "regular", "time": "00:30:00",
                 "constraint": "v100", "alloc_flags": ["smt4"], "max_nodes": 4, "max_time": "12:00:00",
                 "image": "img.sif", "image_dir": "/images"},
    "env": {"NCCL_DEBUG": "WARN"},
}

STUBS = ["srun", "mpirun", "mpiexec", "jsrun", "aprun", "ibrun", "apptainer", "singularity", "shifter",
         "podman-hpc", "ch-run", "hpcdl", "blaunch", "pbsdsh", "scontrol", "brequeue", "qrerun", "module"]
DIRECTIVES = ("#SBATCH", "#BSUB", "#PBS", "#DW")


def _unwrap(tp):
    """The type inside Optional/Annotated."""
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            strs = [a for a in args if _is_text(a)]
            tp = strs[0] if strs else args[0]
        else:
            return tp


def _is_text(tp) -> bool:
    tp = _unwrap(tp) if typing.get_origin(tp) is typing.Annotated else tp
    return tp is str or (typing.get_origin(tp) is typing.Literal and all(isinstance(a, str) for a in typing.get_args(tp)))


def text_fields(model: type[BaseModel], base: dict, prefix: tuple = ()) -> list[tuple]:
    """Paths to every text value in `model`: ('a', 'b') is base['a']['b'], ('env', KEY) a key itself."""
    found = []
    for name, info in model.model_fields.items():
        tp = _unwrap(info.annotation)
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        here = (*prefix, name)
        sub = base.get(name) if isinstance(base, dict) else None
        if _is_text(tp):
            found.append(here)
        elif origin is tuple and args:
            inner = _unwrap(args[0])
            if _is_text(inner):
                found.append((*here, 0))
            elif isinstance(inner, type) and issubclass(inner, BaseModel):
                found += text_fields(inner, (sub or [{}])[0], (*here, 0))
        elif origin is dict:
            key = next(iter(sub)) if sub else "KEY"
            found.append((*here, KEY, key))
            inner = _unwrap(args[1])
            if _is_text(inner):
                found.append((*here, key))
            elif isinstance(inner, type) and issubclass(inner, BaseModel):
                found += text_fields(inner, (sub or {}).get(key, {}), (*here, key))
        elif isinstance(tp, type) and issubclass(tp, BaseModel):
            found += text_fields(tp, sub or {}, here)
    return found


KEY = object()  # marks a path whose last step is a mapping key to rename


def put(data: dict, path: tuple, value: str) -> dict:
    data = copy.deepcopy(data)
    *parents, last = path
    if len(parents) >= 1 and parents[-1] is KEY:
        node = data
        for p in parents[:-1]:
            node = node.setdefault(p, {})
        node[value] = node.pop(last, "x")
        return data
    node = data
    for p, nxt in zip(parents, [*parents[1:], last]):
        if isinstance(node, list):
            while len(node) <= p:
                node.append({})
            node = node[p]
        else:
            node = node.setdefault(p, [] if isinstance(nxt, int) else {})
    if isinstance(last, int):
        node[:] = [value]
    else:
        node[last] = value
    return data


def label(path: tuple) -> str:
    return ".".join("<key>" if p is KEY else str(p) for p in path)


def cli_fields() -> list[str]:
    """The text options of `hpcdl render`, from the command itself."""
    import typer.main

    from hpcdl.cli import app

    command = typer.main.get_command(app).commands["render"]
    return [p.opts[0] if p.opts[0].startswith("-") else p.name for p in command.params
            if _unwrap(p.type_descriptor.annotation) in (str, Path)]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    stubs = root / "stubs"
    stubs.mkdir()
    for name in STUBS:
        (stubs / name).write_text("#!/bin/bash\nexit 0\n")
        (stubs / name).chmod(0o755)
    init = root / "lmod-init.sh"
    init.write_text("module() { :; }\n")
    (root / "hosts").write_text("n1\nn2\n")
    base = put(put(BASE_SITE, ("modules", "init"), str(init)), ("filesystems", "node_local"), str(root / "nl"))
    recipe = yaml.safe_load((RECIPES / "digits-quick.yaml").read_text())
    recipe["data"].update(stage=True, path=str(root / "data"), source="cifar10")
    recipe.update(snapshot_prefix=str(root / "snaps" / "s"), snapshot=10)
    return {"root": root, "stubs": stubs, "site": base, "recipe": recipe}


def render(world, capsys, monkeypatch, site: dict, recipe: dict, args: list[str], scheduler: str,
           recipe_name: str = "recipe.yaml", out_name: str = "job.sh") -> tuple[int, str, Path]:
    from hpcdl.cli import main

    case = world["root"] / f"case-{render.n}"
    render.n += 1
    (case / "sites").mkdir(parents=True)
    (case / "sites" / "hostile.yaml").write_text(yaml.safe_dump(site))
    recipe_file = case / recipe_name
    recipe_file.write_text(yaml.safe_dump(recipe))
    out = case / out_name
    monkeypatch.setenv("HPCDL_SITE_PATH", str(case / "sites"))
    capsys.readouterr()
    argv = ["render", str(recipe_file), "--site", "hostile", "--scheduler", scheduler, "-o", str(out), *args]
    try:
        main(argv)
        status = 0
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else 1
    return status, capsys.readouterr().err, out


render.n = 0


def check_script(world, out: Path, scheduler: str, where: str) -> None:
    """bash -n, directives only in the header, and executed with stand-ins: no canary."""
    text = out.read_text()
    lines = text.splitlines()
    header_end = next(i for i, line in enumerate(lines[1:], 1) if not line.startswith(DIRECTIVES))
    stray = [line for line in lines[header_end:] if line.startswith(DIRECTIVES)]
    assert not stray, f"{where}: directive lines outside the header: {stray}"
    syntax = subprocess.run(["bash", "-n", str(out)], capture_output=True, text=True)
    assert syntax.returncode == 0, f"{where}: bash -n: {syntax.stderr}"
    root = world["root"]
    canary = out.parent / "CANARY"
    env = {
        "PATH": f"{world['stubs']}:/usr/bin:/bin", "HOME": str(root), "USER": "u", "HPCDL_CANARY": str(canary),
        "HPCDL_JOB_DIR": str(out.parent / "job"), "HPCDL_JOB_ID": "7", "HPCDL_IMAGE_DIR": str(root),
        "SLURM_JOB_ID": "7", "SLURM_SUBMIT_DIR": str(out.parent),
        "LSB_JOBID": "7", "LS_SUBCWD": str(out.parent), "LSB_DJOB_HOSTFILE": str(root / "hosts"),
        "PBS_JOBID": "7.server", "PBS_O_WORKDIR": str(out.parent), "PBS_NODEFILE": str(root / "hosts"),
    }
    subprocess.run(["bash", str(out)], capture_output=True, text=True, cwd=out.parent, env=env, timeout=60)
    assert not canary.exists() and not list(out.parent.rglob("CANARY")), f"{where}: the payload ran"


LUA_STUBS = """
-- every Lmod function a modulefile may call, as a no-op; os.execute and io.popen stay real,
-- so a string that broke out of its quotes would run here
setmetatable(_G, {__index = function(_, name) return function() return "" end end})
for _, path in ipairs(arg) do dofile(path) end
"""


def check_modulefiles(world, capsys, monkeypatch, site: dict, where: str, args: list[str] = ()) -> None:
    """`hpcdl modulefiles render` for the site: refused in one line, or every .lua parses and
    loads (Lmod's functions stubbed) and every wrapper runs (runtimes stubbed), and no canary."""
    from conftest import require_tool
    from hpcdl.cli import main

    lua = require_tool("lua5.3")
    case = world["root"] / f"mods-{render.n}"
    render.n += 1
    (case / "sites").mkdir(parents=True)
    (case / "sites" / "hostile.yaml").write_text(yaml.safe_dump(site))
    monkeypatch.setenv("HPCDL_SITE_PATH", str(case / "sites"))
    capsys.readouterr()
    try:
        main(["modulefiles", "render", "--site", "hostile", "--out", str(case / "tree"), *args])
        status = 0
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else 1
    err = capsys.readouterr().err
    if status:
        check_refusal(status, err, where)
        return
    canary = case / "CANARY"
    env = {"PATH": f"{world['stubs']}:/usr/bin:/bin", "HOME": str(world["root"]), "USER": "u",
           "HPCDL_CANARY": str(canary), "HPCDL_IMAGE_DIR": str(world["root"])}
    (case / "stubs.lua").write_text(LUA_STUBS)
    files = [p for p in (case / "tree").rglob("*") if p.is_file()]
    assert files, where
    modules = [str(p) for p in files if p.suffix == ".lua"]
    wrappers = [str(p) for p in files if p.suffix != ".lua"]
    proc = subprocess.run([lua, str(case / "stubs.lua"), *modules], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, f"{where}: {proc.stderr}"
    assert not canary.exists(), f"{where}: loading a modulefile ran the payload"
    for wrapper in wrappers:
        syntax = subprocess.run(["bash", "-n", wrapper], capture_output=True, text=True)
        assert syntax.returncode == 0, f"{where}: {wrapper}: {syntax.stderr}"
    subprocess.run(["bash", "-c", 'for w; do bash "$w" --version; done', "_", *wrappers], capture_output=True,
                   text=True, env=env, timeout=60)
    assert not canary.exists(), f"{where}: a wrapper ran the payload"


def check_refusal(status: int, err: str, where: str) -> None:
    assert status == 2, f"{where}: status {status}: {err}"
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("hpcdl: error:"), f"{where}: not one line: {err}"


def test_the_fields_are_enumerated_from_the_schemas(world):
    site_fields = {label(p) for p in text_fields(Site, world["site"])}
    # a sample of what must be there, so the enumeration itself cannot silently shrink
    for field in ("node_kinds.node.nics.0.device", "defaults.constraint", "modules.load.0", "env.NCCL_DEBUG",
                  "env.<key>.NCCL_DEBUG", "filesystems.node_local", "defaults.qos", "modules.frameworks.pytorch"):
        assert field in site_fields
    assert len(site_fields) >= 35
    assert {"name", "net", "data.path", "snapshot_prefix"} <= {label(p) for p in text_fields(Recipe, world["recipe"])}
    assert {"--image", "--name", "--account", "--constraint", "--output-dir", "recipe"} <= set(cli_fields())


@pytest.mark.parametrize("payload", sorted(PAYLOADS))
def test_every_site_profile_field(world, capsys, monkeypatch, payload):
    value = PAYLOADS[payload]
    for path in text_fields(Site, world["site"]):
        if path == ("name",):
            continue  # the profile's name must match its file name; tested by test_sites
        site = put(world["site"], path, value)
        check_modulefiles(world, capsys, monkeypatch, site, f"modulefiles: site {label(path)} = {payload}")
        for scheduler in SCHEDULERS:
            where = f"site {label(path)} = {payload} ({scheduler})"
            status, err, out = render(world, capsys, monkeypatch, site, world["recipe"], [], scheduler)
            if status:
                check_refusal(status, err, where)
                break  # refused when the profile is read: the same for every scheduler
            check_script(world, out, scheduler, where)


@pytest.mark.parametrize("payload", sorted(PAYLOADS))
def test_every_recipe_field(world, capsys, monkeypatch, payload):
    value = PAYLOADS[payload]
    for path in text_fields(Recipe, world["recipe"]):
        recipe = put(world["recipe"], path, value)
        for scheduler in SCHEDULERS:
            where = f"recipe {label(path)} = {payload} ({scheduler})"
            status, err, out = render(world, capsys, monkeypatch, world["site"], recipe, [], scheduler)
            if status:
                check_refusal(status, err, where)
                continue
            check_script(world, out, scheduler, where)


@pytest.mark.parametrize("payload", sorted(PAYLOADS))
def test_every_command_line_field(world, capsys, monkeypatch, payload):
    value = PAYLOADS[payload]
    fields = [*cli_fields(), "trainer arguments"]
    for field in fields:
        for scheduler in SCHEDULERS:
            where = f"command line {field} = {payload} ({scheduler})"
            recipe_name, out_name, args = "recipe.yaml", "job.sh", []
            if field == "recipe":
                recipe_name = value.replace("/", "_")[:200] + ".yaml"
            elif field in ("-o", "--output"):
                out_name = value.replace("/", "_")[:200]
            elif field == "--scheduler":
                args = []  # the scheduler is chosen below; a hostile one is refused by name
                status, err, _ = render(world, capsys, monkeypatch, world["site"], world["recipe"], [], value)
                check_refusal(status, err, where)
                break
            elif field == "trainer arguments":
                args = ["--", value, f"--max-iter={value}"]
            else:
                args = [field, value]
            status, err, out = render(world, capsys, monkeypatch, world["site"], world["recipe"], args, scheduler,
                                      recipe_name=recipe_name, out_name=out_name)
            if status:
                check_refusal(status, err, where)
                continue
            check_script(world, out, scheduler, where)


def test_a_value_that_slips_past_validation_still_cannot_add_a_line(world):
    """The renderer's backstop: a NIC name with a newline (as a profile held before #17), built
    without validation, is escaped in the rank-layout comment and never starts a line."""
    from hpcdl.plan import JobRequest, make_plan
    from hpcdl.render import JobOptions, render_job_script

    site = Site.model_validate(world["site"])
    kind = site.node_kinds["node"]
    nics = tuple(n.model_copy(update={"device": f"mlx5_{i}\ntouch {C} #"}) for i, n in enumerate(kind.nics))
    site = site.model_copy(update={"node_kinds": {"node": kind.model_copy(update={"nics": nics})}})
    plan = make_plan(site, JobRequest(nodes=1))
    try:
        text = render_job_script(site, plan, world["recipe"], JobOptions(name="x"), scheduler="local")
    except HpcdlError as exc:
        assert "newline" in str(exc)
        return
    assert not [line for line in text.splitlines() if line.startswith("touch")]


def test_a_profile_nic_name_with_a_newline_is_refused_naming_the_field(world, capsys, monkeypatch):
    site = put(world["site"], ("node_kinds", "node", "nics", 0, "device"), "eth0\ntouch x #")
    status, err, _ = render(world, capsys, monkeypatch, site, world["recipe"], [], "local")
    check_refusal(status, err, "nic")
    assert "nics.0.device" in err


def test_an_lsf_site_constraint_with_a_newline_adds_no_directive(world, capsys, monkeypatch):
    site = put(world["site"], ("defaults", "constraint"), "x\n#BSUB -o /tmp/y\ntouch y #")
    status, err, _ = render(world, capsys, monkeypatch, site, world["recipe"], [], "lsf")
    check_refusal(status, err, "constraint")
    assert "defaults.constraint" in err


@pytest.mark.parametrize("payload", sorted(PAYLOADS))
def test_the_modulefiles_prefix_option(world, capsys, monkeypatch, payload):
    check_modulefiles(world, capsys, monkeypatch, world["site"], f"modulefiles --prefix = {payload}",
                      ["--prefix", "/opt/" + PAYLOADS[payload].replace("/", "_")])

"""Golden job scripts for every site, and a lint of every site x scheduler x runtime x requeue.

The golden files under tests/golden/ are what `hpcdl render` writes now for each site
profile (shipped ones and the test profiles in tests/fixtures/sites) with the site's own
scheduler, launcher and runtime. After a deliberate change, regenerate them with

    HPCDL_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_render_golden.py

and read the diff before committing it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import FIXTURE_SITES, RECIPES, ROOT, require_tool
from hpcdl.errors import HpcdlError
from hpcdl.plan import JobRequest, make_plan
from hpcdl.render import JobOptions, render_job_script
from hpcdl.render.jobscript import SCHEDULERS, with_runtime
from hpcdl.runtimes import runtimes
from hpcdl.sites import list_sites, load_site
from hpcdl.train.recipe import load_recipe
from hpcdl.validate.suite import largest_whole_job

GOLDEN = ROOT / "tests" / "golden"
UPDATE = os.environ.get("HPCDL_UPDATE_GOLDEN") == "1"
DETECTED = "detected from this node"


def _with_fixture_sites(fn):
    old = os.environ.get("HPCDL_SITE_PATH")
    os.environ["HPCDL_SITE_PATH"] = str(FIXTURE_SITES)
    try:
        return fn()
    finally:
        if old is None:
            del os.environ["HPCDL_SITE_PATH"]
        else:
            os.environ["HPCDL_SITE_PATH"] = old


def profile_sites() -> list[str]:
    """Every site that comes from a profile file (`local` is detected, so differs per machine)."""
    return _with_fixture_sites(lambda: [n for n, origin in list_sites().items() if origin != DETECTED])


def all_sites() -> list[str]:
    return _with_fixture_sites(lambda: list(list_sites()))


def render_for(site, scheduler=None, requeue=False, nodes=2) -> str:
    recipe = load_recipe(RECIPES / "digits-quick.yaml")
    # the detected local site is one node; queues bounded by the GPUs a job holds (NeSI Mahuika's 6 GPUs a user)
    # take only as many whole nodes as their largest bound holds
    nodes = min(x for x in (nodes, largest_whole_job(site)) if x)
    plan = _plan_for_lint(site, nodes)
    # a site naming folders by project (Frontier's /lustre/orion/{project}) takes the project from the
    # account; only Slurm sets the charged one in the job ($SLURM_JOB_ACCOUNT), so other schedulers need it
    needs_project = "{project}" in f"{site.filesystems.scratch}{site.filesystems.node_local}"
    # a centre that runs no job without a project (Minerva, NCI Gadi's -P) is rendered with one too
    needs_project |= any("{project}" in v for v in site.defaults.job_resources.values())
    account = ("prj123" if (needs_project and (scheduler or site.scheduler) != "slurm")
               or site.defaults.account_required else None)
    options = JobOptions(name=recipe.name, requeue=requeue, account=account)
    return render_job_script(site, plan, recipe.model_dump(mode="json"), options, scheduler=scheduler)


#: what the lint matrix runs where the runtime decision refuses a site x runtime pairing it makes up
#: (tests/test_runtime_authority.py checks the decisions themselves): a user's own image, and the path
#: of the plugin inside it
USER_IMAGE, USER_PLUGIN = "/sw/images/user-own.sif", "/opt/aws-ofi-nccl/lib/libnccl-net.so"


def _plan_for_lint(site, nodes):
    try:
        plan = make_plan(site, JobRequest(nodes=nodes))
    except HpcdlError as exc:
        if not str(exc).startswith("net plugin:"):
            raise
        plan = make_plan(site, JobRequest(nodes=nodes, net_plugin=USER_PLUGIN))
    if plan.runtime.refusal:
        plan = make_plan(site, JobRequest(nodes=nodes, image=USER_IMAGE, net_plugin=USER_PLUGIN))
    return plan


def lint_all(paths: list[Path]) -> None:
    """shellcheck (all warnings, style included) in one call, and bash -n on each."""
    exe = require_tool("shellcheck")
    proc = subprocess.run([exe, "-s", "bash", "-S", "style", *map(str, paths)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for path in paths:
        proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert proc.returncode == 0, f"bash -n {path}: {proc.stderr}"


@pytest.mark.parametrize("site_name", profile_sites())
def test_the_rendered_script_of_each_site_equals_its_golden_file(site_name, fixture_sites, tmp_path):
    site = load_site(site_name)
    text = render_for(site)
    golden = GOLDEN / f"{site_name}.sh"
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"no golden file for {site_name}; make it with HPCDL_UPDATE_GOLDEN=1"
    assert text == golden.read_text(), (
        f"the script for {site_name} differs from {golden.relative_to(ROOT)}; if the change is meant, "
        "regenerate with HPCDL_UPDATE_GOLDEN=1 and review the diff"
    )
    lint_all([golden])


def test_every_golden_file_belongs_to_a_site():
    stale = sorted(p.stem for p in GOLDEN.glob("*.sh") if p.stem not in profile_sites())
    if UPDATE:
        for name in stale:
            (GOLDEN / f"{name}.sh").unlink()
        stale = []
    assert not stale, f"golden files for sites that no longer exist: {stale} (HPCDL_UPDATE_GOLDEN=1 removes them)"


@pytest.mark.parametrize("site_name", all_sites())
def test_every_scheduler_and_runtime_renders_a_clean_script_for(site_name, fixture_sites, tmp_path):
    site = load_site(site_name)
    paths = []
    for scheduler in SCHEDULERS:
        for runtime in runtimes.names():
            for requeue in (False, True):
                try:
                    text = render_for(with_runtime(site, runtime), scheduler=scheduler, requeue=requeue)
                except HpcdlError as exc:  # a value this scheduler cannot carry: the message says which
                    pytest.fail(f"{site_name} {scheduler} {runtime}: {exc}")
                path = tmp_path / f"{scheduler}-{runtime}-{'requeue' if requeue else 'plain'}.sh"
                path.write_text(text)
                paths.append(path)
    assert len(paths) == len(SCHEDULERS) * len(runtimes.names()) * 2
    lint_all(paths)


EPHEMERAL_PORTS = 32768  # Linux's default net.ipv4.ip_local_port_range starts here (kernel ip-sysctl docs)


def test_every_rendered_rendezvous_port_lies_below_the_ephemeral_ports():
    """A MASTER_PORT among the ephemeral ports can be held by any outgoing connection on the batch node
    (a CI job's rank 0 found 35007 taken: EADDRINUSE, and its other rank waited out the job's time)."""
    import re

    found = 0
    for golden in sorted(GOLDEN.glob("*.sh")):
        for base, modulus in re.findall(r"MASTER_PORT=.*?\$\(\((\d+) \+ \S+ % (\d+)\)\)", golden.read_text()):
            found += 1
            assert int(base) + int(modulus) - 1 < EPHEMERAL_PORTS, (golden.name, base, modulus)
    assert found >= 10

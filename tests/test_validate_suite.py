"""The suite's jobs as data, their scripts as rendered for every shipped site, and write-back of the best placement."""

from __future__ import annotations

import importlib.util

import pytest
import yaml
from conftest import hpcdl, shellcheck

from hpcdl.errors import HpcdlError
from hpcdl.sites import Site, list_sites, load_site
from hpcdl.validate.checks import ORDER
from hpcdl.validate.jobs import SUITES, SuiteContext, scaling_points, suite_jobs, thread_sweep_configs
from hpcdl.validate.profile import write_profile
from hpcdl.validate.references import References
from hpcdl.validate.runner import render_validation_job
from hpcdl.validate.suite import build_context, default_nodes, largest_whole_job, parse_nodes, select_checks


def knl_site() -> Site:
    """A Stampede2-like KNL node: 68 cores (4 left to the OS), 4 hardware threads per core."""
    return Site.model_validate({
        "name": "knl-test", "scheduler": "slurm", "launcher": "ibrun", "mpi": "intel-mpi",
        "node_kinds": {"knl": {"sockets": 1, "cores_per_socket": 68, "reserved_cores_per_socket": 4,
                               "threads_per_core": 4,
                               "scheduler_cpus_per_core": 4, "memory_gb": 96, "cpu_target": "knl", "count": 4200,
                               "default_ranks_per_socket": 1}},
    })


def context(site: Site, nodes=(1,), suite="quick") -> SuiteContext:
    return SuiteContext(site, suite, tuple(nodes), References(site.name, {}, {}, "none"), SUITES[suite])


def test_the_knl_thread_sweep_tries_32_64_and_128_openmp_threads_like_the_tacc_study():
    assert thread_sweep_configs(context(knl_site())) == [(1, 32), (1, 64), (1, 128)]


def test_the_local_quick_suite_shares_identical_jobs_between_checks():
    ctx = build_context("local", "quick", None)
    checks = select_checks(None)
    assert [c.name for c in checks] == list(ORDER)
    jobs = suite_jobs(ctx, checks)
    keys = [j.key for j in jobs]
    assert len(keys) == len(set(keys))
    needed = sum(len(c.jobs(ctx)) for c in checks)
    assert len(jobs) < needed  # the sweep's 1-rank and default points are also the scaling points
    assert {j.kind for j in jobs} == {"environment", "collectives", "train"}


def test_validation_finds_every_trainer_backend_whose_framework_imports_here():
    """The throughput check measures each framework the trainer has a backend for: a backend that
    moved (hpcdl.train.tensorflow_backend became hpcdl.train.backends.tensorflow) must not drop out."""
    from hpcdl.train.backends import BACKENDS
    from hpcdl.validate.suite import frameworks_present

    imports_as = {"pytorch": "torch", "tensorflow": "tensorflow", "mxnet": "mxnet"}
    importable = tuple(fw for fw, dist in BACKENDS if dist is None and importlib.util.find_spec(imports_as[fw]))
    assert frameworks_present() == importable


def test_the_full_suite_measures_throughput_per_framework_and_the_quick_one_the_first():
    checks = select_checks("throughput")
    ctx = build_context("local", "full", (1,))
    ctx = SuiteContext(ctx.site, "full", (1,), ctx.references, SUITES["full"], frameworks=("pytorch", "tensorflow"))
    full = {j.request.framework for j in suite_jobs(ctx, checks)}
    assert full == {"pytorch", "tensorflow"}
    quick = SuiteContext(ctx.site, "quick", (1,), ctx.references, SUITES["quick"], frameworks=("pytorch", "tensorflow"))
    assert {j.request.framework for j in suite_jobs(quick, checks)} == {"pytorch"}


def test_the_full_suite_measures_a_further_framework_only_where_the_site_runs_it():
    """An image without TensorFlow (GH200's) leaves TensorFlow's throughput out; it does not make
    the whole suite fail to render. The first framework stays, refused or not, so a site that runs
    none still says why."""
    from hpcdl.plan import make_plan

    checks = select_checks("throughput")
    left_out = 0
    for name in list_sites():
        site = load_site(name)
        ctx = SuiteContext(site, "full", (1,), References(name, {}, {}, "none"), SUITES["full"],
                           frameworks=("pytorch", "tensorflow"))
        jobs = suite_jobs(ctx, checks)
        assert "pytorch" in {j.request.framework for j in jobs}
        for job in jobs:
            runtime = make_plan(site, job.request).runtime
            assert job.request.framework == "pytorch" or runtime is None or not runtime.refusal, (name, job.key)
        left_out += "tensorflow" not in {j.request.framework for j in jobs}
    assert left_out  # some shipped site's image holds no TensorFlow (alps-gh200's ampere-cuda)


def test_one_node_scales_over_its_ranks_and_several_nodes_over_nodes():
    ctx = build_context("local", "quick", None)
    unit, points = scaling_points(ctx)
    top = ctx.default_plan.ranks_per_node
    assert unit == "rank" and points[0] == (1, 1, 1) and points[-1] == (top, 1, top)
    unit, points = scaling_points(context(knl_site(), nodes=(1, 2, 4)))
    assert unit == "node" and [p[:2] for p in points] == [(1, 1), (2, 2), (4, 4)]


def test_collectives_run_across_nodes_only_when_several_nodes_are_asked_for():
    from hpcdl.validate.checks import checks

    one = [j.payload["probe"]["scope"] for j in checks.get("collectives").jobs(context(knl_site(), nodes=(1,)))]
    two = [j.request.nodes for j in checks.get("collectives").jobs(context(knl_site(), nodes=(1, 2)))]
    assert "inter-node" not in one and 2 in two


def test_collectives_across_nodes_ask_every_gpu_of_each_where_a_site_shares_nodes_only_in_one_node_jobs():
    # CSD3 Wilkes-3: "between 1 and 4; must be 4 if nodes>1" (defaults.max_nodes_partial: 1): one rank of one GPU
    # on each of two nodes is refused there, so each node's one rank holds the node's four GPUs
    from hpcdl.plan import make_plan
    from hpcdl.validate.checks import checks

    site = load_site("csd3-ampere")
    across = [j for j in checks.get("collectives").jobs(context(site, nodes=(1, 2))) if j.request.nodes == 2]
    plan = make_plan(site, across[0].request)
    assert plan.ranks_per_node == 1 and plan.ranks[0].gpus == (0, 1, 2, 3)
    # a site that shares nodes at any size keeps one GPU per rank
    other = [j for j in checks.get("collectives").jobs(context(load_site("karolina"), nodes=(1, 2))) if j.request.nodes == 2]
    assert make_plan(load_site("karolina"), other[0].request).ranks[0].gpus == (0,)


def test_a_two_node_point_whose_ranks_all_ran_on_one_node_fails_naming_the_node():
    """Two node names that are one (pretend nodes reporting the host name) must not pass as scaling."""
    from hpcdl.validate.checks import JobOutcome, checks

    ctx = context(knl_site(), nodes=(1, 2))
    scaling = checks.get("scaling")
    final = {"event": "final", "images_per_sec_total": 100.0, "time_to_solution_s": 1.0, "ranks": 1}
    outcomes = {j.key: JobOutcome(j, "COMPLETED", 0, [final], ("c401-001",)) for j in scaling.jobs(ctx)}
    _, verdicts = scaling.evaluate(ctx, outcomes)
    spread = {v.name: v for v in verdicts if v.name.endswith("/nodes")}
    assert set(spread) == {"scaling/weak/2/nodes", "scaling/strong/2/nodes"}
    assert spread["scaling/weak/2/nodes"].result == "fail"
    assert spread["scaling/weak/2/nodes"].message == "asked for 2 node(s), the ranks ran on 1: c401-001"


def test_bad_node_lists_and_check_names_are_refused():
    from hpcdl.errors import HpcdlError

    assert parse_nodes("4,1,2") == (1, 2, 4)
    for text in ("0,1", "one"):
        with pytest.raises(HpcdlError, match="--nodes"):
            parse_nodes(text)
    with pytest.raises(HpcdlError, match="--checks: unknown check 'speed'"):
        select_checks("throughput,speed")
    with pytest.raises(HpcdlError, match="--nodes: 2 nodes"):
        build_context("local", "quick", (1, 2))


def test_the_local_suite_scripts_pass_shellcheck(tmp_path):
    site = load_site("local")
    ctx = build_context("local", "quick", None)
    for job in suite_jobs(ctx, select_checks(None)):
        path = tmp_path / f"{job.key}.sh"
        path.write_text(render_validation_job(site, job))
        shellcheck(path)
        assert "hpcdl probe " + job.kind in path.read_text()


SHIPPED_SITES = [name for name in list_sites() if name != "local"]


def _needs_account(site) -> bool:
    holders = [site.filesystems.scratch, site.filesystems.node_local, *site.defaults.job_resources.values()]
    return site.defaults.account_required or (site.scheduler != "slurm" and any("{project}" in (h or "") for h in holders))
DIRECTIVE = {"slurm": "#SBATCH --nodes=", "lsf": "#BSUB -", "pbs": "#PBS -l "}


def test_the_sites_the_issue_names_are_among_the_shipped_ones_rendered_below():
    # an empty parameter list would skip the test below quietly
    assert {"summit", "stampede2-knl", "perlmutter"} <= set(SHIPPED_SITES)


def test_a_suite_larger_than_the_site_runs_in_one_job_is_refused_naming_the_field():
    # Imperial CX3's GPU jobs are one node ("select=1", defaults.max_nodes: 1): an inter-node point cannot run there
    with pytest.raises(HpcdlError, match=r"^--nodes: 2 nodes asked for but site 'imperial-cx3' takes at most 1 in one "
                                         r"job \(defaults\.max_nodes\)$"):
        build_context("imperial-cx3", "quick", (1, 2))
    assert build_context("imperial-cx3", "quick", None).nodes == (1,)


@pytest.mark.parametrize("site_name", SHIPPED_SITES)
def test_every_shipped_site_renders_the_full_suite_with_its_own_scheduler(site_name, tmp_path):
    """summit, stampede2-knl, perlmutter and the rest: rendered (not run here) and linted."""
    site = load_site(site_name)
    if _needs_account(site) and not site.defaults.account:
        # a centre that runs no job without a project (Minerva) or names its folders by it (Polaris):
        # the suite takes the profile's own defaults.account, as a user's copy of it would set
        site = site.model_copy(update={"defaults": site.defaults.model_copy(update={"account": "prj123"})})
    # across nodes too, where the site runs two nodes of its default kind in one job: Mahidol's MAI HPC has one H100
    # node, and Imperial CX3's GPU queue takes one ("select=1"); the suite refuses --nodes 2 there, naming the field
    most = min(x for x in (largest_whole_job(site), 2) if x)
    nodes = (1, 2) if most >= 2 else (1,)
    ctx = build_context(site_name, "full", nodes)
    jobs = suite_jobs(ctx, select_checks(None))
    assert {j.kind for j in jobs} == {"environment", "collectives", "train"}
    assert any(j.request.nodes == max(nodes) for j in jobs if j.kind == "collectives")
    from hpcdl.errors import HpcdlError
    from hpcdl.plan import make_plan

    for job in jobs:
        path = tmp_path / f"{job.key}.sh"
        refusal = make_plan(site, job.request).runtime.refusal
        if refusal:  # nothing runs there (Stampede2, Cori, Lassen): refused in one line, as `render` is
            with pytest.raises(HpcdlError, match="^runtime: .*what would serve"):
                render_validation_job(site, job)
            continue
        text = render_validation_job(site, job)
        path.write_text(text)
        shellcheck(path)
        assert DIRECTIVE[site.scheduler] in text, f"{site_name}: no {site.scheduler} directives"
        assert f"hpcdl probe {job.kind} recipe.json" in text


def test_the_best_placement_is_written_into_a_profile_keeping_its_comments(tmp_path):
    site = knl_site()
    path = tmp_path / "knl-test.yaml"
    text = yaml.safe_dump(site.model_dump(mode="json", exclude_defaults=True), sort_keys=False)
    text = "# Stampede2 KNL (TACC user guide)\n" + text.replace("threads_per_core: 4", "threads_per_core: 4  # SMT-4")
    path.write_text(text)
    notes = write_profile(path, site, "knl", ranks_per_node=1, threads=64)
    written = path.read_text()
    assert "# Stampede2 KNL (TACC user guide)" in written and "# SMT-4" in written
    node = yaml.safe_load(written)["node_kinds"]["knl"]
    assert node["default_threads_per_rank"] == 64 and node["default_ranks_per_socket"] == 1
    assert notes == []


def test_writing_a_profile_for_the_detected_local_site_creates_a_loadable_file(tmp_path, monkeypatch):
    site = load_site("local")
    kind = site.default_node_kind or next(iter(site.node_kinds))
    path = tmp_path / "local.yaml"
    write_profile(path, site, kind, ranks_per_node=site.node_kinds[kind].sockets, threads=1)
    monkeypatch.setenv("HPCDL_SITE_PATH", str(tmp_path))
    assert load_site("local").node_kinds[kind].default_threads_per_rank == 1


def test_validate_help_names_the_suites_and_options():
    out = hpcdl("validate", "--help", check=True).stdout
    for word in ("--suite", "--nodes", "--write-profile", "--checks"):
        assert word in out
    assert "report" in hpcdl("--help", check=True).stdout


def test_the_environment_job_asks_a_gpu_count_the_site_takes():
    # SciNet Trillium: "you are only allowed to request exactly 1 GPU or a multiple of 4 GPUs. You cannot request
    # --gpus-per-node=2 or 3" (defaults.partial_gpu_counts: [1]): the two-rank environment job would be refused
    # there, so it takes the node's four GPUs; a site that takes any count keeps two ranks
    from hpcdl.plan import make_plan
    from hpcdl.validate.checks import checks

    site = load_site("trillium-gpu")
    (job,) = checks.get("environment").jobs(context(site, nodes=(1,)))
    assert make_plan(site, job.request).ranks_per_node == 4
    (other,) = checks.get("environment").jobs(context(load_site("narval"), nodes=(1,)))
    assert other.request.ranks_per_node == 2


def test_the_suite_asks_no_more_nodes_than_a_gpu_bounded_queue_takes():
    """NeSI Mahuika lets a user hold 6 GPUs ("Per User: ... 6 GPUs occupied", the node kinds'
    partition_by_nodes max_gpus: 6): the suite's default node counts on its 4-A100 nodes stop at one node, where
    two (8 GPUs) would be refused at render; its 2-H100 nodes take three."""
    site = load_site("mahuika-gpu")
    assert largest_whole_job(site) == 1
    assert default_nodes(site, "full") == (1,)
    h100 = site.model_copy(update={"default_node_kind": "h100"})
    assert largest_whole_job(h100) == 3
    assert default_nodes(h100, "full") == (1, 2)
    # a site no queue bounds by GPUs keeps its nodes' count and max_nodes
    assert default_nodes(load_site("perlmutter"), "quick") == (1, 2)

"""Site profiles: every shipped one loads, says where its facts come from, and a broken one is
refused with one line naming the file, the field and the problem."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import hpcdl
from hpcdl.errors import HpcdlError
from hpcdl.sites import list_sites, load_site
from hpcdl.sites.registry import SHIPPED, load_site_file

SHIPPED_SITES = sorted(p.stem for p in SHIPPED.glob("*.yaml"))
SEED_SITES = ["stampede2-knl", "stampede2-skx", "cori-knl", "summit", "lassen", "perlmutter", "frontier", "volta-x86"]


def test_the_seed_and_modern_machines_are_shipped():
    assert set(SEED_SITES) <= set(SHIPPED_SITES)
    assert "local" in list_sites()


@pytest.mark.parametrize("name", SHIPPED_SITES)
def test_every_shipped_profile_loads_and_cites_its_sources(name):
    site = load_site(name)
    assert site.name == name
    assert site.sources, f"{name} must say where its facts come from"
    text = (SHIPPED / f"{name}.yaml").read_text()
    assert text.startswith("#"), f"{name}.yaml opens with a comment citing its sources"
    for kind in site.node_kinds.values():
        assert kind.usable_cores_per_socket >= 1


def test_summit_node_is_two_power9_with_three_v100_and_two_ib_ports_per_socket():
    node = load_site("summit").node_kinds["ac922"]
    assert (node.sockets, node.cores_per_socket, node.threads_per_core) == (2, 22, 4)
    assert node.sockets * node.usable_cores_per_socket == 42  # jsrun -c42
    assert [g.socket for g in node.gpus] == [0, 0, 0, 1, 1, 1]
    # socket 1 lists mlx5_3 first, so its ranks get mlx5_3, mlx5_2, mlx5_3 as in the Gordon Bell script
    assert [(n.device, n.socket) for n in node.nics] == [
        ("mlx5_0", 0), ("mlx5_1", 0), ("mlx5_3", 1), ("mlx5_2", 1)]
    # SMT4, core-major: core 22 (first of socket 1) is hardware threads 88-91
    assert node.cpus_of_core(22) == (88, 89, 90, 91)
    assert load_site("summit").defaults.alloc_flags == ("smt4", "nvme")
    assert load_site("summit").filesystems.node_local == "/mnt/bb/$USER"


def test_each_cpu_numbering_names_every_hardware_thread_once_and_frontera_interleaves_its_sockets():
    from hpcdl.sites.schema import NodeKind

    for numbering in ("thread-major", "core-major", "socket-interleaved"):
        node = NodeKind(sockets=2, cores_per_socket=28, threads_per_core=2, cpu_numbering=numbering, memory_gb=1)
        assert sorted(c for core in range(node.cores) for c in node.cpus_of_core(core)) == list(range(112)), numbering
    # TACC's CLX table: socket 0's cores are proc-ids 0, 2, ..., 54 (second threads 56, 58, ...), socket 1's
    # 1, 3, ..., 55 (57, 59, ...)
    node = NodeKind(sockets=2, cores_per_socket=28, threads_per_core=2, cpu_numbering="socket-interleaved", memory_gb=1)
    assert (node.cpus_of_core(0), node.cpus_of_core(1), node.cpus_of_core(27)) == ((0, 56), (2, 58), (54, 110))
    assert (node.cpus_of_core(28), node.cpus_of_core(55)) == ((1, 57), (55, 111))
    frontera = load_site("frontera").node_kinds["clx"]
    assert [frontera.cpus_of_core(c) for c in (0, 1, 28)] == [(0,), (2,), (1,)]


def test_stampede2_knl_is_68_cores_with_4_left_to_the_system():
    node = load_site("stampede2-knl").node_kinds["knl"]
    assert (node.cores_per_socket, node.threads_per_core, node.usable_cores_per_socket) == (68, 4, 64)
    assert node.memory_gb == 96 and node.hbm_gb == 16
    assert {n.kind for n in node.nics} == {"omnipath"}


def test_frontier_style_node_has_8_gcds_4_slingshot_nics_and_56_usable_cores():
    node = load_site("frontier").node_kinds["mi250x"]
    assert len(node.gpus) == 8 and {g.vendor for g in node.gpus} == {"amd"}
    assert [n.kind for n in node.nics] == ["slingshot"] * 4
    assert node.usable_cores_per_socket == 56


def _write(tmp_path: Path, name: str, data: dict) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _summit_data() -> dict:
    return yaml.safe_load((SHIPPED / "summit.yaml").read_text())


def test_an_unknown_field_is_refused_naming_file_and_field(tmp_path):
    data = _summit_data()
    data["name"] = "broken"
    data["node_kinds"]["ac922"]["cores_per_sockets"] = 22
    path = _write(tmp_path, "broken", data)
    with pytest.raises(HpcdlError) as err:
        load_site_file(path)
    message = str(err.value)
    assert str(path) in message
    assert "node_kinds.ac922.cores_per_sockets: unknown field" in message
    assert "\n" not in message


def test_a_wrong_value_is_refused_naming_file_field_and_problem(tmp_path):
    data = _summit_data()
    data["name"] = "broken"
    data["node_kinds"]["ac922"]["nics"][0]["kind"] = "infiniband-edr"
    path = _write(tmp_path, "broken", data)
    with pytest.raises(HpcdlError, match=r"broken\.yaml: node_kinds\.ac922\.nics\.0\.kind: Input should be"):
        load_site_file(path)


def test_a_gpu_on_a_socket_the_node_does_not_have_is_refused(tmp_path):
    data = _summit_data()
    data["name"] = "broken"
    data["node_kinds"]["ac922"]["gpus"][5]["socket"] = 2
    with pytest.raises(HpcdlError, match=r"broken\.yaml: node_kinds\.ac922: gpus\[5\]\.socket: 2 but the node has 2"):
        load_site_file(_write(tmp_path, "broken", data))


def test_jsrun_under_slurm_is_refused(tmp_path):
    data = _summit_data()
    data["name"] = "broken"
    data["scheduler"] = "slurm"
    with pytest.raises(HpcdlError, match="launcher: jsrun runs under lsf, not under scheduler slurm"):
        load_site_file(_write(tmp_path, "broken", data))


def test_a_profile_whose_name_differs_from_its_file_is_refused(tmp_path):
    data = _summit_data()
    with pytest.raises(HpcdlError, match="does not match the file name"):
        load_site_file(_write(tmp_path, "mysummit", data))


def test_users_add_a_site_with_hpcdl_site_path(tmp_path, monkeypatch):
    data = _summit_data()
    data["name"] = "mysummit"
    _write(tmp_path, "mysummit", data)
    monkeypatch.setenv("HPCDL_SITE_PATH", str(tmp_path))
    assert load_site("mysummit").node_kinds["ac922"].cores_per_socket == 22
    assert list_sites()["mysummit"] == str(tmp_path / "mysummit.yaml")


def test_the_cli_refuses_a_broken_profile_with_one_line_and_status_2(tmp_path):
    data = _summit_data()
    data["name"] = "broken"
    data["node_kinds"]["ac922"]["sockets"] = 0
    _write(tmp_path, "broken", data)
    proc = hpcdl("plan", "--site", "broken", env={"HPCDL_SITE_PATH": str(tmp_path)})
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1
    assert "broken.yaml: node_kinds.ac922.sockets: Input should be greater than or equal to 1" in proc.stderr


def test_an_unknown_site_names_the_known_ones():
    with pytest.raises(HpcdlError, match="unknown site 'summitt'.*summit.*HPCDL_SITE_PATH"):
        load_site("summitt")


def test_the_site_guide_documents_every_schema_field():
    from conftest import ROOT
    from hpcdl.sites.schema import Defaults, Filesystems, Gpu, Modules, Nic, NodeKind, NodeKindDefaults, Site

    guide = (ROOT / "docs" / "sites.md").read_text()
    prefixed = {Filesystems: "filesystems.", Modules: "modules.", Defaults: "defaults."}
    for model in (Site, NodeKind, NodeKindDefaults, Gpu, Nic, Filesystems, Modules, Defaults):
        for field in model.model_fields:
            assert f"`{prefixed.get(model, '')}{field}`" in guide or f"`{field}`" in guide, (
                f"docs/sites.md does not document {model.__name__}.{field}")
    for name in SHIPPED_SITES:
        assert f"`{name}`" in guide, f"docs/sites.md does not list the shipped site {name}"


def test_users_add_a_site_by_dropping_it_in_their_config_folder(tmp_path, monkeypatch):
    import hpcdl.sites.registry as registry

    monkeypatch.setattr(registry, "USER_DIR", tmp_path)
    monkeypatch.delenv("HPCDL_SITE_PATH", raising=False)
    data = yaml.safe_load((SHIPPED / "stampede2-knl.yaml").read_text())
    data["name"] = "mylab"
    _write(tmp_path, "mylab", data)
    assert load_site("mylab").node_kinds["knl"].cores_per_socket == 68


# --- what a profile must be able to say, and what it may not -------------------------------

REQUIRED_CITATIONS = ("ranks_per_node", "cores_per_rank", "binding", "launcher", "directives", "environment")


@pytest.mark.parametrize("name", SHIPPED_SITES)
def test_every_shipped_profile_cites_a_source_for_each_choice_that_shapes_its_plan(name):
    site = load_site(name)
    needed = set(REQUIRED_CITATIONS)
    if any(k.gpus for k in site.node_kinds.values()):
        needed.add("gpus")
    if any(k.nics for k in site.node_kinds.values()):
        needed.add("nics")
    missing = needed - set(site.citations)
    assert not missing, f"{name}: no citation for {sorted(missing)}"
    for choice, cites in site.citations.items():
        assert cites and all(c.source.startswith("https://") for c in cites), f"{name}: citations.{choice}"


def test_sites_show_sources_lists_each_choice_with_its_page():
    out = hpcdl("sites", "show", "summit", "--sources", check=True).stdout
    assert "gpus:" in out and "ibm-wml-ce.rst" in out and "each process needs to have access to all GPUs" in out
    assert "launcher:" in out and "--smpiargs" in out


def _site_data(**changes):
    data = yaml.safe_load((SHIPPED / "volta-x86.yaml").read_text())
    data.pop("citations", None)
    for key, value in changes.items():
        target = data
        *path, last = key.split(".")
        for p in path:
            target = target.setdefault(p, {})
        target[last] = value
    return data


def _load(tmp_path, data):
    path = tmp_path / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_site_file(path)


def test_a_path_may_use_only_variables_the_scheduler_or_the_profile_guarantees(tmp_path):
    with pytest.raises(HpcdlError, match=r"filesystems.scratch: \$PROJECT is set neither by slurm nor by the login"
                                         r".*write \{project\}"):
        _load(tmp_path, _site_data(**{"filesystems.scratch": "/lustre/$PROJECT/scratch"}))
    site = _load(tmp_path, _site_data(**{"filesystems.scratch": "$MYSCRATCH/dl", "provides_env": ["MYSCRATCH"]}))
    assert site.filesystems.scratch == "$MYSCRATCH/dl"
    assert _load(tmp_path, _site_data(**{"filesystems.node_local": "/tmp/$SLURM_JOB_ID"}))
    # the suffix-removal form a path also expands (${NAME%word}) names a variable all the same
    with pytest.raises(HpcdlError, match=r"filesystems.scratch: \$PROJECT is set neither by slurm"):
        _load(tmp_path, _site_data(**{"filesystems.scratch": "/lustre/${PROJECT%-gpu}/scratch"}))
    assert _load(tmp_path, _site_data(**{"filesystems.scratch": "/lustre/${SLURM_JOB_ACCOUNT%-gpu}"}))


@pytest.mark.parametrize("directive", ["--network=a b", "--x=$(reboot)", "not-an-option", "--mem=1G\n#SBATCH -N 9"])
def test_a_directive_must_be_one_plain_scheduler_option(tmp_path, directive):
    with pytest.raises(HpcdlError, match=r"defaults.directives\[0\]"):
        _load(tmp_path, _site_data(**{"defaults.directives": [directive]}))


def test_pbs_job_resources_and_lsf_account_flag_belong_to_their_schedulers(tmp_path):
    with pytest.raises(HpcdlError, match=r"defaults.job_resources: PBS job-wide resources, but the scheduler is slurm"):
        _load(tmp_path, _site_data(**{"defaults.job_resources": {"filesystems": "home:eagle"}}))
    # Slurm names the account with --account only; PBS takes -A or -P (NCI Gadi), LSF -P or -G
    with pytest.raises(HpcdlError, match=r"defaults.account_flag: -G names no account under slurm .*--account"):
        _load(tmp_path, _site_data(**{"defaults.account_flag": "-G"}))
    pbs = {"scheduler": "pbs", "launcher": "mpirun", "launch": {}}  # none of volta-x86's srun launch settings
    with pytest.raises(HpcdlError, match=r"defaults.account_flag: -G names no account under pbs \(pbs takes -A or -P"):
        _load(tmp_path, _site_data(**pbs, **{"defaults.account_flag": "-G"}))
    assert _load(tmp_path, _site_data(**pbs, **{"defaults.account_flag": "-P"})).defaults.account_flag == "-P"
    with pytest.raises(HpcdlError, match=r"defaults.job_resources_per_node: PBS resources, but the scheduler is slurm"):
        _load(tmp_path, _site_data(**{"defaults.job_resources_per_node": {"mem": "382GB"}}))
    with pytest.raises(HpcdlError, match=r"defaults.job_resources_per_node.mem: '3.5TB' is not a whole number"):
        _load(tmp_path, _site_data(**pbs, **{"defaults.job_resources_per_node": {"mem": "3.5TB"}}))


# --- the machines people use today, and the ones retired -------------------------------------------

RETIRED = {"summit", "lassen", "cori-knl", "stampede2-knl", "stampede2-skx", "quartz", "mahti", "puhti-gpu", "cedar-gpu"}


def test_hpcdl_sites_marks_the_retired_machines_and_lists_at_least_15_in_service_beside_the_seeds():
    import json

    rows = {r["name"]: r for r in json.loads(hpcdl("sites", "--json", check=True).stdout)}
    assert {n for n, r in rows.items() if r["retired"]} == RETIRED
    for name in RETIRED:
        assert rows[name]["retired"]["source"].startswith("https://") and rows[name]["retired"]["date"][:2] == "20"
    in_service = {n for n, r in rows.items() if not r["retired"] and r["from"] == "shipped"} - set(SEED_SITES)
    assert len(in_service) >= 15, sorted(in_service)
    table = hpcdl("sites", check=True, env={"COLUMNS": "250"}).stdout
    assert "retired 2024-11" in table and "in service" in table


def test_a_retired_site_still_plans_and_says_it_is_retired():
    from hpcdl.plan import JobRequest, make_plan

    notes = make_plan(load_site("summit"), JobRequest(nodes=2)).notes
    assert any(n.startswith("site summit was retired (2024-11, https://") for n in notes)
    assert not any("retired" in n for n in make_plan(load_site("frontier"), JobRequest(nodes=2)).notes)


def test_a_retirement_names_its_date_and_page(tmp_path):
    with pytest.raises(HpcdlError, match=r"retired.source"):
        _load(tmp_path, _site_data(**{"retired": {"date": "2024", "source": "olcf said so"}}))
    with pytest.raises(HpcdlError, match=r"retired.date"):
        _load(tmp_path, _site_data(**{"retired": {"date": "Nov 2024", "source": "https://example.org/"}}))


def test_an_smt_node_under_slurm_or_pbs_must_say_what_a_cpu_is(tmp_path):
    data = _site_data()
    del data["node_kinds"]["v100"]["scheduler_cpus_per_core"]
    with pytest.raises(HpcdlError, match=r"node_kinds.v100.scheduler_cpus_per_core: the node has 2 hardware threads per "
                                         r"core, so say whether slurm counts a core as 2 CPUs \(write 2\) or as 1 "
                                         r"\(write 1\); `scontrol show node <node>`: CPUTot equal to the node's 40 cores"):
        _load(tmp_path, data)
    data["node_kinds"]["v100"]["threads_per_core"] = 1  # no SMT: nothing to say
    assert _load(tmp_path, data).node_kinds["v100"].cpus_per_core == 1


def test_a_cpu_profile_naming_an_undeclared_scratch_variable_is_told_the_one_line_fix(tmp_path):
    # a CPU machine's profile written before `provides_env` existed: refused, with the fix in the message
    data = _site_data(**{"filesystems.scratch": "$SCRATCH/runs"})
    data["node_kinds"]["v100"].pop("gpus")
    with pytest.raises(HpcdlError) as err:
        _load(tmp_path, data)
    assert "filesystems.scratch: $SCRATCH is set neither by slurm nor by the login" in str(err.value)
    assert "add `provides_env: [SCRATCH]` to the profile" in str(err.value)
    data["provides_env"] = ["SCRATCH"]
    assert _load(tmp_path, data).filesystems.scratch == "$SCRATCH/runs"

"""Modulefiles and wrappers as generated: what they set, the wrappers' command lines (golden
files, shellcheck), luac lint, the CLI, and the checked-in modulefiles/ equal to the generator."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, hpcdl, require_tool, shellcheck

from hpcdl.modules import DEFAULT_PREFIX, ImageFrameworks, render_site, site_modules, write_tree
from hpcdl.modules.render import lua_long_string, sh_expanding
from hpcdl.modules.shipped import shipped_site_names
from hpcdl.sites import load_site
from hpcdl.sites.registry import SHIPPED

FIXTURE_SITES = ROOT / "tests" / "fixtures" / "sites"  # job-script test sites; shipped ones still found
GOLDEN = ROOT / "tests" / "golden" / "modules"
CONTAINER_SITES = ("volta-x86", "perlmutter")


@pytest.fixture(autouse=True)
def fixture_sites(monkeypatch):
    monkeypatch.setenv("HPCDL_SITE_PATH", str(FIXTURE_SITES))


def framework(modules, name):
    return next(fm for fm in modules.frameworks if fm.module.name == name)


def test_hpcdl_module_names_the_site_and_puts_the_prefix_on_path():
    m = site_modules(load_site("summit"), "/sw/hpcdl").hpcdl
    assert m.relpath == "hpcdl/0.1.0.lua"
    assert m.env == {"HPCDL_SITE": "summit", "HPCDL_IMAGE_DIR": "/sw/hpcdl/images"}
    assert [(p.variable, p.path) for p in m.paths] == [("PATH", "/sw/hpcdl/bin"), ("HPCDL_SITE_PATH", "/sw/hpcdl/sites")]
    assert m.family == "hpcdl", "two hpcdl versions are never loaded together"
    assert "hpcdl plan --site summit" in m.help


def test_an_x86_v100_site_runs_pytorch_in_the_volta_image_with_nv_and_one_rank_of_cpu_tuning():
    fm = framework(site_modules(load_site("volta-x86")), "pytorch")
    assert fm.image == f"{DEFAULT_PREFIX}/images/volta-cuda.sif"
    python = next(w for w in fm.wrappers if w.command == "python")
    assert python.argv[:3] == ("apptainer", "exec", "--nv")
    assert python.binds == (("--bind", "/scratch/$USER", "/scratch/$USER"), ("--bind", "/tmp", "/tmp"))
    # the planner's one rank on the node: socket 0's 20 cores, Intel OpenMP settings on Xeon
    assert fm.module.env["OMP_NUM_THREADS"] == "20"
    assert fm.module.env["KMP_AFFINITY"] == "granularity=fine,compact,1,0"
    assert {w.command for w in fm.wrappers} == {"python", "torchrun"}, "the host's hpcdl stays first on PATH"
    assert fm.module.depends_on == (), "apptainer on the default PATH: no runtime module to load"


def test_power9_sites_get_no_x86_image_only_the_hpcdl_module():
    # Summit and Lassen are ppc64le: every shipped image is x86_64, and PyPI has no POWER wheels
    # of PyTorch or TensorFlow to build one from (docs/images.md)
    for name in ("summit", "lassen"):
        assert site_modules(load_site(name)).frameworks == ()
        assert [f.relpath for f in render_site(load_site(name))] == ["hpcdl/0.1.0.lua"]

def _knl_modules(prefix=DEFAULT_PREFIX):
    """Stampede2 KNL's modules for the knl-mkldnn image, given to the generator as its input: the runtime
    decision runs no image there (the check refuses knl-mkldnn's Open MPI under ibrun's Intel MPI)."""
    from hpcdl.images.frameworks import images_table

    return site_modules(load_site("stampede2-knl"), prefix, images_table()["knl-mkldnn"])


def test_stampede2_knl_gets_the_module_of_the_image_the_check_accepts_not_the_one_it_refuses():
    # knl-mkldnn's Open MPI is refused under ibrun's Intel MPI; the MPICH-ABI x86-64-v3 image, whose
    # libmpi the host's Intel MPI replaces at run time (the hybrid model), is accepted and serves it
    modules = site_modules(load_site("stampede2-knl"))
    assert [(f.module.name, f.image_name) for f in modules.frameworks] == [("pytorch", "cpu-x86-64-v3-mpich")]
    assert "knl-mkldnn" not in modules.hpcdl.help


def test_stampede2_knl_modules_load_tacc_singularity_and_set_the_knl_openmp_defaults():
    modules = _knl_modules()
    assert [fm.module.name for fm in modules.frameworks] == ["pytorch", "tensorflow", "mxnet"]
    for fm in modules.frameworks:
        assert fm.module.depends_on == ("tacc-singularity",)
        # 64 of 68 cores as OpenMP threads, compact affinity, short block time (TACC KNL study)
        assert fm.module.env["OMP_NUM_THREADS"] == "64"
        assert fm.module.env["KMP_AFFINITY"] == "granularity=fine,compact,1,0"
        assert fm.module.env["KMP_BLOCKTIME"] == "1"
        assert fm.image == f"{DEFAULT_PREFIX}/images/knl-mkldnn.sif"
        assert all("--nv" not in w.argv and "--rocm" not in w.argv for w in fm.wrappers), "no GPUs on KNL"
    assert {w.command for w in framework(modules, "tensorflow").wrappers} == {"python"}


def test_a_native_site_wraps_the_programs_of_its_prefix():
    modules = site_modules(load_site("local"), "/opt/x")
    fm = framework(modules, "pytorch")
    assert fm.image is None and "HPCDL_IMAGE" not in fm.module.env
    assert [w.argv for w in fm.wrappers] == [("/opt/x/bin/python",), ("/opt/x/bin/torchrun",)]
    assert fm.module.depends_on == ()


def test_the_image_table_is_an_input_of_the_generator():
    custom = ImageFrameworks("volta-cuda", {"pytorch": "2.99.0"})
    modules = site_modules(load_site("volta-x86"), images=custom)
    assert [fm.module.relpath for fm in modules.frameworks] == ["pytorch/2.99.0.lua"]


def test_an_image_hpcdl_does_not_know_gets_no_framework_module(tmp_path, monkeypatch):
    text = (SHIPPED / "volta-x86.yaml").read_text().replace("defaults:\n", "defaults:\n  image: no-such-image\n")
    (tmp_path / "volta-x86.yaml").write_text(text)
    monkeypatch.setenv("HPCDL_SITE_PATH", str(tmp_path))
    modules = site_modules(load_site("volta-x86"))
    # its frameworks and their versions are unknown: a module would claim what it cannot know
    assert modules.frameworks == () and "the image no-such-image (defaults.image)" in modules.hpcdl.help


@pytest.mark.parametrize("site", CONTAINER_SITES)
def test_container_wrappers_match_their_golden_file_and_pass_shellcheck(site, tmp_path):
    files = render_site(load_site(site))
    write_tree(files, tmp_path)
    wrappers = [f for f in files if f.relpath.startswith("wrappers/")]
    assert wrappers and all(f.executable for f in wrappers)
    for f in wrappers:
        path = tmp_path / f.relpath
        assert path.stat().st_mode & stat.S_IXUSR
        shellcheck(path)
    text = "".join(f"==> {f.relpath} <==\n{f.text}" for f in wrappers)
    golden = GOLDEN / f"{site}.wrappers.txt"
    if os.environ.get("HPCDL_UPDATE_GOLDEN"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert text == golden.read_text(), f"{golden} differs; rerun with HPCDL_UPDATE_GOLDEN=1 and review the diff"


def test_native_wrappers_pass_shellcheck(tmp_path):
    files = render_site(load_site("local"), "/opt/hpcdl")
    write_tree(files, tmp_path)
    for f in files:
        if f.executable:
            shellcheck(tmp_path / f.relpath)


def test_every_generated_modulefile_passes_the_lua_syntax_check(tmp_path):
    luac = require_tool("luac5.3")
    for site in (*CONTAINER_SITES, "local"):
        write_tree(render_site(load_site(site)), tmp_path / site)
    checked = sorted(tmp_path.rglob("*.lua")) + sorted((ROOT / "modulefiles").rglob("*.lua"))
    assert len(checked) >= 3 + 4 + 3  # volta-x86, stampede2-knl (with mxnet), local
    for path in checked:
        proc = subprocess.run([luac, "-p", str(path)], capture_output=True, text=True)
        assert proc.returncode == 0, f"luac5.3 -p {path}: {proc.stderr}"


def test_values_that_reach_lua_and_the_shell_cannot_break_out():
    assert lua_long_string("a ]] b ]=] c") == "[==[\na ]] b ]=] c\n]==]"
    assert sh_expanding("/mnt/bb/$USER") == '"/mnt/bb/$USER"'
    assert sh_expanding("/x/`rm -rf ~`/$(id)/a\"b") == '"/x/\\`rm -rf ~\\`/\\$(id)/a\\"b"'
    proc = subprocess.run(["bash", "-c", f"USER=ann; printf %s {sh_expanding('/bb/$USER/$(id)')}"], capture_output=True, text=True)
    assert proc.stdout == "/bb/ann/$(id)"


# --- the checked-in modulefiles/ ---------------------------------------------------------------

def tree_differences(rendered: Path, checked_in: Path) -> list[str]:
    """What differs between two module trees: missing, extra or changed files and exec bits."""
    def files(root):
        return {p.relative_to(root).as_posix(): p for p in root.rglob("*") if p.is_file()} if root.is_dir() else {}

    want, have = files(rendered), files(checked_in)
    problems = [f"missing {name}" for name in sorted(set(want) - set(have))]
    problems += [f"extra {name}" for name in sorted(set(have) - set(want))]
    for name in sorted(set(want) & set(have)):
        if want[name].read_bytes() != have[name].read_bytes():
            problems.append(f"changed {name}")
        elif os.access(want[name], os.X_OK) != os.access(have[name], os.X_OK):
            problems.append(f"exec bit {name}")
    return problems


def test_checked_in_modulefiles_equal_what_the_generator_produces_now(tmp_path, monkeypatch):
    monkeypatch.delenv("HPCDL_SITE_PATH")
    shipped = shipped_site_names()
    checked_in = ROOT / "modulefiles"
    assert sorted(p.name for p in checked_in.iterdir() if p.is_dir()) == sorted(shipped), (
        "modulefiles/ holds one folder per shipped site: run `make modulefiles`"
    )
    for site in shipped:
        write_tree(render_site(load_site(site), DEFAULT_PREFIX), tmp_path / site)
        problems = tree_differences(tmp_path / site, checked_in / site)
        assert not problems, f"modulefiles/{site} drifted from the generator ({problems}); run `make modulefiles`"


def test_the_drift_check_catches_a_hand_edit_a_stale_file_and_a_lost_exec_bit(tmp_path):
    write_tree(render_site(load_site("volta-x86")), tmp_path / "want")
    write_tree(render_site(load_site("volta-x86")), tmp_path / "have")
    assert tree_differences(tmp_path / "want", tmp_path / "have") == []
    lua = tmp_path / "have" / "pytorch" / "2.8.0.lua"
    lua.write_text(lua.read_text().replace('"20"', '"16"'))
    (tmp_path / "have" / "pytorch" / "1.0.lua").write_text("-- stale\n")
    (tmp_path / "have" / "wrappers" / "pytorch-2.8.0" / "python").chmod(0o644)
    assert tree_differences(tmp_path / "want", tmp_path / "have") == [
        "extra pytorch/1.0.lua", "changed pytorch/2.8.0.lua", "exec bit wrappers/pytorch-2.8.0/python",
    ]


def test_make_modulefiles_renders_the_shipped_sites_with_the_placeholder_prefix():
    makefile = (ROOT / "Makefile").read_text()
    assert "modulefiles render --shipped --prefix /opt/hpcdl" in makefile


def test_shipped_renders_every_shipped_profile_and_leaves_out_the_detected_local(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import hpcdl.sites.registry
    from hpcdl.cli import app

    monkeypatch.delenv("HPCDL_SITE_PATH")
    monkeypatch.setattr(hpcdl.sites.registry, "USER_DIR", tmp_path / "no-user-sites")
    result = CliRunner().invoke(app, ["modulefiles", "render", "--shipped", "--prefix", "/opt/hpcdl", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    profiles = sorted(p.stem for p in SHIPPED.glob("*.yaml"))
    assert "summit" in profiles and "local" not in profiles
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == profiles


# --- the command line -------------------------------------------------------------------------

def test_cli_renders_a_site_tree_with_the_given_prefix(tmp_path):
    env = {"HPCDL_SITE_PATH": str(FIXTURE_SITES)}
    out = hpcdl("modulefiles", "render", "--site", "volta-x86", "--out", tmp_path, "--prefix", "/sw/hpcdl",
                "--allow-missing-prefix", env=env, check=True).stdout
    assert "module use" in out
    tree = tmp_path / "volta-x86"
    assert (tree / "hpcdl" / "0.1.0.lua").read_text().count('"/sw/hpcdl/bin"') == 1
    assert os.access(tree / "wrappers" / "pytorch-2.8.0" / "torchrun", os.X_OK)


def test_cli_takes_the_prefix_from_hpcdl_prefix(tmp_path):
    env = {"HPCDL_SITE_PATH": str(FIXTURE_SITES), "HPCDL_PREFIX": "/env/prefix"}
    hpcdl("modulefiles", "render", "--site", "volta-x86", "--out", tmp_path, "--allow-missing-prefix", env=env, check=True)
    assert '"/env/prefix/bin"' in (tmp_path / "volta-x86" / "hpcdl" / "0.1.0.lua").read_text()


def test_cli_refuses_a_prefix_that_holds_no_hpcdl(tmp_path):
    env = {"HPCDL_SITE_PATH": str(FIXTURE_SITES)}
    prefix = tmp_path / "sw" / "hpcdl"
    proc = hpcdl("modulefiles", "render", "--site", "summit", "--out", tmp_path / "out", "--prefix", prefix, env=env)
    assert proc.returncode == 2 and f"{prefix}/bin/hpcdl does not exist" in proc.stderr
    assert not (tmp_path / "out").exists()
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "hpcdl").write_text("#!/bin/sh\n")
    (prefix / "bin" / "hpcdl").chmod(0o755)
    hpcdl("modulefiles", "render", "--site", "summit", "--out", tmp_path / "out", "--prefix", prefix, env=env, check=True)
    assert (tmp_path / "out" / "summit" / "hpcdl" / "0.1.0.lua").exists()


@pytest.mark.parametrize(
    "args, words",
    [
        (["--site", "no-such-site"], ["unknown site", "no-such-site"]),
        (["--site", "volta-x86", "--prefix", "relative/dir"], ["--prefix", "absolute"]),
        ([], ["--site", "--shipped"]),
    ],
)
def test_cli_bad_input_is_one_line_exit_2_and_no_files(tmp_path, args, words):
    proc = hpcdl("modulefiles", "render", *args, "--out", tmp_path / "out", env={"HPCDL_SITE_PATH": str(FIXTURE_SITES)})
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    for word in words:
        assert word in lines[0]
    assert not (tmp_path / "out").exists()


def test_a_gpu_site_without_a_fitting_image_gets_only_the_hpcdl_module(tmp_path, monkeypatch):
    # B200 (sm_100): no image carries sm_100 code, so no image fits until the profile names one
    text = (SHIPPED / "volta-x86.yaml").read_text().replace("Tesla V100-PCIE-32GB", "NVIDIA B200")
    assert "image:" not in text, "the shipped profile picks its image by hardware"
    (tmp_path / "volta-x86.yaml").write_text(text)
    monkeypatch.setenv("HPCDL_SITE_PATH", str(tmp_path))
    modules = site_modules(load_site("volta-x86"))
    assert modules.frameworks == ()
    assert "what would serve" in modules.hpcdl.help  # the runtime decision's refusal, word for word
    assert [f.relpath for f in render_site(load_site("volta-x86"))] == ["hpcdl/0.1.0.lua"]


@pytest.mark.parametrize("runtime, flag, value", [("podman-hpc", "--volume", "/scratch:/scratch"), ("charliecloud", "-b", "/scratch:/scratch")])
def test_volume_style_binds_test_the_folder_and_pass_the_runtimes_own_form(tmp_path, monkeypatch, runtime, flag, value):
    text = (SHIPPED / "volta-x86.yaml").read_text().replace("runtime: apptainer", f"runtime: {runtime}")
    (tmp_path / "volta-x86.yaml").write_text(text.replace("scratch: /scratch/$USER", "scratch: /scratch"))
    monkeypatch.setenv("HPCDL_SITE_PATH", str(tmp_path))
    python = next(f for f in render_site(load_site("volta-x86")) if f.relpath == "wrappers/pytorch-2.8.0/python")
    assert f'bind {flag} "{value}" "/scratch"' in python.text
    write_tree([python], tmp_path / "tree")
    shellcheck(tmp_path / "tree" / python.relpath)


def test_a_wrapper_binds_each_folder_once_when_scratch_is_the_node_local_folder(tmp_path):
    """Stampede2 binds $SCRATCH and /tmp; where $SCRATCH is /tmp (or a link to it) that is one bind."""
    tree = tmp_path / "tree"
    from hpcdl.modules.render import render_modules

    write_tree(render_modules(_knl_modules("/sw/hpcdl")), tree)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "singularity").write_text('#!/bin/bash\nprintf "%s\\n" "$@" > "$ARGV_LOG"\n')
    (bin_dir / "singularity").chmod(0o755)
    (tmp_path / "tmp-link").symlink_to("/tmp")
    wrapper = next(tree.glob("wrappers/pytorch-*/python"))
    for scratch in ("/tmp", str(tmp_path / "tmp-link"), str(tmp_path)):
        log = tmp_path / "argv"
        subprocess.run([str(wrapper), "-c", "pass"], check=True,
                       env={"PATH": f"{bin_dir}:/usr/bin:/bin", "SCRATCH": scratch, "ARGV_LOG": str(log)})
        argv = log.read_text().splitlines()
        binds = [argv[i + 1] for i, a in enumerate(argv) if a == "--bind"]
        assert binds == (["/tmp"] if scratch != str(tmp_path) else [scratch, "/tmp"]) or \
            binds == ([scratch] if scratch != str(tmp_path) else [scratch, "/tmp"]), (scratch, argv)


def test_amd_gpu_sites_get_rocm_from_the_runtime_registry(tmp_path, monkeypatch):
    text = (SHIPPED / "volta-x86.yaml").read_text().replace("{model: Tesla V100-PCIE-32GB,", "{model: AMD MI250X GCD, vendor: amd,")
    (tmp_path / "volta-x86.yaml").write_text(text)
    monkeypatch.setenv("HPCDL_SITE_PATH", str(tmp_path))
    modules = site_modules(load_site("volta-x86"), images=ImageFrameworks("rocm-test", {"pytorch": "2.13.0"}))
    python = framework(modules, "pytorch").wrappers[0]
    assert python.argv[:3] == ("apptainer", "exec", "--rocm")
    assert framework(modules, "pytorch").image == f"{DEFAULT_PREFIX}/images/rocm-test.sif"


# --- the image facts come from containers/images.yaml ------------------------------------------

def test_framework_versions_are_the_pins_of_the_sites_image_in_images_yaml():
    from hpcdl.images.spec import load_images

    specs = load_images()
    summit = site_modules(load_site("volta-x86"))
    assert {fm.module.name: fm.module.version for fm in summit.frameworks} == {
        "pytorch": specs["volta-cuda"].environments["main"].version_of("torch"),
        "tensorflow": specs["volta-cuda"].environments["tensorflow"].version_of("tensorflow"),
    }
    knl = {fm.module.name: fm.module.version for fm in _knl_modules().frameworks}
    assert knl["tensorflow"] == specs["knl-mkldnn"].environments["main"].version_of("tensorflow-cpu")
    assert knl["mxnet"] == specs["knl-mkldnn"].environments["mxnet"].version_of("mxnet")


def test_a_framework_outside_the_images_main_environment_runs_from_its_own_environment():
    summit = site_modules(load_site("volta-x86"))
    tensorflow, pytorch = framework(summit, "tensorflow"), framework(summit, "pytorch")
    # volta-cuda keeps TensorFlow's CUDA 12 wheels apart from torch's: /opt/envs/tensorflow
    assert [w.argv[-1] for w in tensorflow.wrappers] == ["/opt/envs/tensorflow/bin/python"]
    assert [w.argv[-1] for w in pytorch.wrappers] == ["python", "torchrun"], "main is on the image's PATH"
    mxnet = framework(_knl_modules(), "mxnet")
    assert mxnet.wrappers[0].argv[-1] == "/opt/envs/mxnet/bin/python"


def test_the_environments_folder_is_the_one_the_image_generator_builds():
    from hpcdl.images.frameworks import ENVS as MODULE_ENVS
    from hpcdl.images.generate import ENVS

    assert MODULE_ENVS == ENVS


def test_the_image_is_chosen_by_hardware_unless_the_profile_names_one():
    from hpcdl.modules.images import image_name_for_site

    assert image_name_for_site(load_site("volta-x86")) == "volta-cuda"  # V100, no defaults.image
    assert image_name_for_site(load_site("summit")) is None  # V100 too, but POWER9: no x86 image runs
    # CPU only: knl-mkldnn is refused by the compatibility check (Open MPI under Intel MPI's ibrun), the
    # MPICH-ABI x86-64-v3 image is not
    assert image_name_for_site(load_site("stampede2-knl")) == "cpu-x86-64-v3-mpich"
    # a registry reference with a tag names the image too, and the check judges it
    site = load_site("volta-x86")
    named = site.model_copy(update={"defaults": site.defaults.model_copy(update={"image": "registry.x/hpcdl/volta-cuda:0.1"})})
    assert image_name_for_site(named) == "volta-cuda"


def test_a_wrapper_binds_the_project_folder_of_the_account_slurm_charged(tmp_path):
    # NCSA DeltaAI charges "abcd-dtai-gh" and keeps the project's files in /work/hdd/abcd: in a job, the wrapper's
    # project folder is $SLURM_JOB_ACCOUNT less the node kind's account suffix, as the job script's is
    python = next(f for f in render_site(load_site("deltaai")) if f.relpath.endswith("/python"))
    line = next(x for x in python.text.splitlines() if x.startswith("bind ") and "/work/hdd/" in x)
    proc = subprocess.run(["bash", "-uc", f"printf '%s\\n' {line.split(' ', 2)[2]}"], capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"], "USER": "auser", "SLURM_JOB_ACCOUNT": "bbka-dtai-gh"})
    assert proc.stdout.splitlines() == ["/work/hdd/bbka/auser"] * 2, (line, proc.stderr)
    write_tree([python], tmp_path / "tree")
    shellcheck(tmp_path / "tree" / python.relpath)
    assert sh_expanding("/p/${A%-x}/${B%$(id)}") == '"/p/${A%-x}/\\${B%\\$(id)}"'

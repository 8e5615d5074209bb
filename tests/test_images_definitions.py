"""The checked-in container definitions: current, parseable, and their shell is clean."""

from __future__ import annotations

import subprocess

import pytest
from spython.main.parse.parsers import DockerParser, SingularityParser

from conftest import ROOT, hpcdl, shellcheck
from hpcdl.images.deffile import sections, shell_of
from hpcdl.images.generate import output_paths, render
from hpcdl.images.spec import load_images

SPECS = load_images()
NAMES = sorted(SPECS)

# hpccm's own %post text sources /.singularity.d/env/10-docker*.sh (a glob: SC1090), runs
# make -j$(nproc) (one number: SC2046) and cd's without `|| exit` (SC2164); Singularity runs
# %post under `sh -e`, so a failed cd stops the build. Everything else must be clean.
HPCCM_IDIOMS = "# shellcheck disable=SC1090,SC2046,SC2164\n"


def test_the_three_images_of_the_issue_are_specified():
    assert {"knl-mkldnn", "volta-cuda", "hopper-cuda"} <= set(SPECS)


@pytest.mark.parametrize("name", NAMES)
def test_checked_in_definitions_equal_what_the_generator_produces_now(name):
    for fmt, path in output_paths(name).items():
        assert path.exists(), f"{path} is missing: run make containers"
        assert path.read_text() == render(SPECS[name], fmt), f"{path} is stale: run make containers"


def test_render_check_reports_no_drift():
    proc = hpcdl("images", "render", "--check")
    assert proc.returncode == 0, proc.stderr


def test_render_check_names_a_stale_file(tmp_path):
    (tmp_path / "knl-mkldnn.def").write_text("stale\n")
    proc = hpcdl("images", "render", "knl-mkldnn", "--check", "--out", tmp_path)
    assert proc.returncode == 1
    assert "knl-mkldnn.def" in proc.stderr


@pytest.mark.parametrize("name", NAMES)
def test_definition_parses_with_spython_into_the_expected_sections(name):
    path = output_paths(name)["singularity"]
    recipe = SingularityParser(str(path)).recipe["spython-base"]
    spec = SPECS[name]
    assert recipe.fromHeader == spec.base_image
    labels = dict(label.split(" ", 1) for label in recipe.labels)
    assert labels["org.hpcdl.image"] == name
    assert labels["org.hpcdl.mpi"] == f"{spec.mpi.flavour}-{spec.mpi.version}"
    for env_name, env in spec.environments.items():
        for package, version in env.packages.items():
            assert labels[f"org.hpcdl.{env_name}.{package}"] == version
    assert any(e.startswith("HPCDL_IMAGE=") for e in recipe.environ)
    assert "hpcdl\" train" in recipe.cmd
    install = "\n".join(recipe.install)
    assert spec.mpi.flavour in install and "python3 -m venv /opt/envs/main" in install
    # spython turns %test into lines of a tests script it runs
    assert "hpcdl.images.check" in install and recipe.test
    assert "pyproject.toml /opt/hpcdl/src/pyproject.toml" in recipe.files
    kinds = [kind for kind, _ in sections(path.read_text())]
    for kind in ("labels", "help", "post", "environment", "files", "runscript", "test"):
        assert kind in kinds, f"{path} has no %{kind}"


@pytest.mark.parametrize("name", NAMES)
def test_dockerfile_parses_with_spython_and_its_entrypoint_runs_hpcdl_train(name):
    path = output_paths(name)["docker"]
    recipe = DockerParser(str(path)).recipe
    assert recipe, "no stage parsed"
    entrypoint = [line for line in path.read_text().splitlines() if line.startswith("ENTRYPOINT ")]
    assert len(entrypoint) == 1 and "/bin/hpcdl" in entrypoint[0] and "train" in entrypoint[0]
    labels = [line for line in path.read_text().splitlines() if line.strip().startswith("org.hpcdl.")]
    assert labels and not any(" " in line.strip().rstrip(" \\") for line in labels), "unquoted LABEL values"


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("section", ["post", "environment", "runscript", "test"])
def test_section_shell_passes_bash_n_and_shellcheck(name, section, tmp_path):
    script = shell_of(output_paths(name)["singularity"].read_text(), section)
    if section == "post":
        script = script.replace("#!/bin/bash\n", "#!/bin/bash\n" + HPCCM_IDIOMS, 1)
    path = tmp_path / f"{name}-{section}.sh"
    path.write_text(script)
    shellcheck(path)


def test_volta_image_keeps_cuda_12_nccl_for_sm_70_and_a_torch_with_arch_7_0():
    text = output_paths("volta-cuda")["singularity"].read_text()
    spec = SPECS["volta-cuda"]
    assert spec.cuda.major == 12 and spec.cuda.gpu_archs == ("sm_70",)
    assert "-gencode=arch=compute_70,code=sm_70" in text
    assert "whl/cu126" in text and "nvidia-cudnn-cu12==9.10.2.21" in text
    assert "cuda13" not in text and "13.2" not in text


def test_horovod_is_built_from_the_sdist_with_the_cxx17_fix():
    for name in (n for n in NAMES if SPECS[n].horovod):
        post = shell_of(output_paths(name)["singularity"].read_text(), "post")
        assert "--no-binary :all: horovod==0.28.1" in post
        assert "s/CMAKE_CXX_STANDARD 14/CMAKE_CXX_STANDARD 17/" in post
        assert "horovod-0.28.1/horovod/torch/CMakeLists.txt" in post
        assert "HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1" in post
        assert ("HOROVOD_GPU_OPERATIONS=NCCL" in post) == SPECS[name].gpu


def test_knl_image_targets_knl_over_omnipath_and_keeps_mxnet_in_its_own_environment():
    spec = SPECS["knl-mkldnn"]
    text = output_paths("knl-mkldnn")["singularity"].read_text()
    assert "-march=knl" in text and "--with-psm2" in text and "--enable-psm2=yes" in text
    assert spec.environments["mxnet"].version_of("numpy") == "1.23.5"
    assert "mxnet" not in spec.environments["main"].packages


def test_slingshot_images_build_the_libfabric_plugin_for_their_gpus():
    """Every image for Slingshot with GPUs carries aws-ofi-nccl, built against its libfabric with the
    flags OLCF publishes (PyTorch on Frontier: --with-libfabric, --with-rocm, the libnccl-net.so link)."""
    slingshot = [n for n in NAMES if SPECS[n].mpi.fabric == "slingshot" and SPECS[n].gpu]
    assert {"mi250x-rocm", "ampere-cuda"} <= set(slingshot)
    for name in slingshot:
        spec = SPECS[name]
        assert spec.net_plugin is not None, f"{name}: a Slingshot GPU image without the NCCL/RCCL plugin"
        post = shell_of(output_paths(name)["singularity"].read_text(), "post")
        docker = output_paths(name)["docker"].read_text()
        v = spec.net_plugin.version
        tarball = f"https://github.com/aws/aws-ofi-nccl/releases/download/v{v}/aws-ofi-nccl-{v}.tar.gz"
        for text in (post, docker):
            assert tarball in text
            assert "--with-libfabric=/usr/local/libfabric" in text
            assert "libfabric-" + spec.mpi.libfabric + ".tar.bz2" in text
            # libfabric before the plugin and the MPI that use it
            assert text.index("libfabric-" + spec.mpi.libfabric) < text.index(tarball)
        gpu_flag = "--with-rocm=/opt/rocm" if spec.rocm else "--with-cuda=/usr/local/cuda"
        assert gpu_flag in post
        if spec.rocm:
            assert "ln -sf librccl-net.so /opt/aws-ofi-nccl/lib/libnccl-net.so" in post
        else:
            assert spec.net_plugin_library == "/opt/aws-ofi-nccl/lib/libnccl-net.so"
        if spec.mpi.flavour == "mpich":
            assert "--with-device=ch4:ofi --with-libfabric=/usr/local/libfabric" in post
        labels = SingularityParser(str(output_paths(name)["singularity"])).recipe["spython-base"].labels
        found = dict(label.split(" ", 1) for label in labels)
        assert found["org.hpcdl.net_plugin"] == f"aws-ofi-nccl-{v}"
        assert found["org.hpcdl.net_plugin.library"] == spec.net_plugin_library
        assert found["org.hpcdl.fabric"] == "slingshot"


def test_the_rocm_image_is_labelled_with_its_gfx_target_and_runs_with_rocm():
    spec = SPECS["mi250x-rocm"]
    text = output_paths("mi250x-rocm")["singularity"].read_text()
    assert spec.rocm.gpu_archs == ("gfx90a",) and spec.cuda is None and spec.mpi.abi == "mpich"
    assert "org.hpcdl.gpu_archs gfx90a" in text and "org.hpcdl.rocm 6.4" in text
    assert "whl/rocm6.4" in text and "apptainer run --rocm" in text and "--nv" not in text
    assert spec.net_plugin_library == "/opt/aws-ofi-nccl/lib/librccl-net.so"


def test_the_fabric_option_switches_the_knl_image_to_ucx_on_infiniband():
    spec = SPECS["knl-mkldnn"]
    ib = spec.model_copy(update={"mpi": spec.mpi.model_copy(update={"fabric": "infiniband", "ucx": "1.18.1"}),
                                 "cpu_target": "skylake_avx512"})
    text = render(ib, "singularity")
    assert "--with-ucx=/usr/local/ucx" in text and "--with-psm2" not in text
    assert "-march=skylake-avx512" in text


def test_make_images_with_a_builder_that_is_not_installed_stops_with_one_line(tmp_path):
    import os

    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}}
    proc = subprocess.run(["make", "-s", "images", "IMAGE_BUILDER=apptainer"], cwd=ROOT, capture_output=True,
                          text=True, env=env)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.startswith("hpcdl: error:")]
    assert len(lines) == 1 and "install apptainer" in lines[0], proc.stderr


def test_images_render_leaves_unchanged_files_alone_and_keeps_modes(tmp_path):
    import os

    out = tmp_path / "containers"
    out.mkdir()
    hpcdl("images", "render", "knl-mkldnn", "--out", out, check=True)
    definition, dockerfile = out / "knl-mkldnn.def", out / "knl-mkldnn.Dockerfile"
    assert definition.stat().st_mode & 0o777 == 0o644, "a new file is 644, not mkstemp's 600"
    os.chmod(definition, 0o664)
    os.utime(definition, (1_000_000_000, 1_000_000_000))
    dockerfile.write_text(dockerfile.read_text() + "# edited by hand\n")
    os.chmod(dockerfile, 0o640)
    proc = hpcdl("images", "render", "knl-mkldnn", "--out", out, check=True)
    assert f"unchanged {definition}" in proc.stdout and f"wrote {dockerfile}" in proc.stdout
    assert definition.stat().st_mtime == 1_000_000_000 and definition.stat().st_mode & 0o777 == 0o664
    assert "edited by hand" not in dockerfile.read_text() and dockerfile.stat().st_mode & 0o777 == 0o640


def test_make_containers_and_modulefiles_install_no_framework(tmp_path):
    """Rendering text needs hpcdl's dependencies and hpccm, not torch or TensorFlow; and it runs
    this checkout's code, whatever an editable install points at."""
    import shutil

    make = shutil.which("make")
    assert make, "make is needed to build hpcdl"
    for target in ("containers", "modulefiles"):
        proc = subprocess.run([make, "-n", target, f"STAMPS={tmp_path / 'stamps'}"], cwd=ROOT,
                              capture_output=True, text=True, check=True)
        assert "'.[containers]'" in proc.stdout, proc.stdout
        assert "torch" not in proc.stdout and "tensorflow" not in proc.stdout and "-e " not in proc.stdout
        assert f"PYTHONPATH={ROOT}/platform" in proc.stdout



def test_without_any_builder_the_one_line_names_what_to_install(monkeypatch):
    from hpcdl.images import build

    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(build, "SYSTEM_PATH", "/nonexistent")
    with pytest.raises(build.BuilderMissing) as exc:
        build.pick_builder()
    assert exc.value.exit_code == 2 and "apptainer" in str(exc.value) and "charliecloud-builders" in str(exc.value)
    assert "\n" not in str(exc.value)


def test_the_local_image_needs_no_registry_and_matches_the_hosts_mpi():
    spec = SPECS["local-cpu"]
    assert spec.bootstrap is not None and spec.bootstrap.tool == "mmdebstrap" and spec.base_image == "debian:12"
    assert spec.mpi.source == "distro" and spec.mpi.version.startswith("4.1")
    docker = output_paths("local-cpu")["docker"].read_text()
    assert "openmpi-bin" in docker and "libopenmpi-dev" in docker
    assert "--find-links /var/tmp/wheels torch==2.13.0+cpu" in docker
    # hpcdl's source comes after the pinned environment: a source change rebuilds only the steps after it
    assert docker.index("torch==2.13.0+cpu") < docker.index("COPY platform")
    # per-build labels last, so their changing values never invalidate the layer cache
    assert docker.index("ARG HPCDL_CREATED") > docker.index("COPY platform")


@pytest.mark.parametrize("name", NAMES)
def test_labels_carry_the_oci_keys_and_the_hpcdl_version(name):
    from hpcdl import __version__

    text = output_paths(name)["singularity"].read_text()
    labels = [line.split(None, 1) for kind, body in sections(text) if kind == "labels" for line in body.splitlines()
              if line.strip()]
    found = dict(pair for pair in labels if len(pair) == 2)
    assert found["org.hpcdl.hpcdl"] == __version__ == found["org.opencontainers.image.version"]
    for key in ("created", "revision", "source"):
        assert found[f"org.opencontainers.image.{key}"] == "{{ HPCDL_" + key.upper() + " }}"
    assert "%arguments" in text

"""Every package each image's definition installs resolves for the image's architecture and Python,
with pip's own resolver, without building (pip install --dry-run --report with --platform,
--python-version, --implementation cp, --only-binary=:all:).

PyPI is asked; PyTorch's own indexes (cpu, cu126, cu130, rocm6.4) cannot be reached from here, so a
package taken from one is resolved as PyPI's build of the same version and each result says so.
Successful resolutions are cached outside the checkout ($HPCDL_RESOLVE_CACHE, default
~/.cache/hpcdl/resolve) by a hash of the pip command: a warm run asks pip nothing.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from hpcdl.images.resolve import environment_requirements, manylinux_platforms, resolve
from hpcdl.images.spec import Environment, load_images

SPECS = load_images()
NAMES = sorted(SPECS)


def test_the_platform_tags_cover_every_manylinux_level_the_glibc_runs():
    tags = manylinux_platforms("aarch64", "2.35")
    assert tags[0] == "manylinux_2_35_aarch64" and "manylinux_2_28_aarch64" in tags and "manylinux_2_17_aarch64" in tags
    assert tags[-1] == "manylinux2014_aarch64" and "manylinux_2_36_aarch64" not in tags
    assert "manylinux1_x86_64" in manylinux_platforms("x86_64", "2.39")


def test_what_pypi_cannot_answer_is_said_per_package():
    reqs, notes = environment_requirements(SPECS["volta-cuda"])["main"]
    assert "torch==2.8.0" in reqs and "nvidia-cudnn-cu12==9.10.2.21" in reqs and "typer>=0.12" in reqs
    assert any(n.startswith("torch==2.8.0: from https://download.pytorch.org/whl/cu126, which cannot be reached")
               for n in notes)
    reqs, notes = environment_requirements(SPECS["local-cpu"])["main"]
    assert "torch==2.13.0" in reqs and any(n.startswith("torch==2.13.0+cpu: comes from the build machine's wheel folder")
                                           for n in notes)
    # the aarch64 GH200 image takes torch from PyPI itself: nothing to say about torch
    reqs, notes = environment_requirements(SPECS["gh200-cuda"])["main"]
    torch = SPECS["gh200-cuda"].environments["main"].version_of("torch")
    assert f"torch=={torch}" in reqs and not [n for n in notes if n.startswith("torch")]


@pytest.fixture(scope="module")
def resolutions():
    # network-bound: a few images at once
    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(zip(NAMES, pool.map(lambda n: resolve(SPECS[n]), NAMES)))


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_every_environment_of_every_image_resolves_for_its_target(name, resolutions):
    spec = SPECS[name]
    results = resolutions[name]
    assert {r.environment for r in results} == set(spec.environments)
    for res in results:
        assert res.ok, f"{name}/{res.environment}: {res.error}"
        env = spec.environments[res.environment]
        for package, version in env.packages.items():
            got = {k.lower().replace("_", "-"): v for k, v in res.packages.items()}.get(package)
            assert got == version.split("+")[0], f"{name}/{res.environment}: {package} {got} != {version}"
    main = next(r for r in results if r.environment == "main")
    if spec.cuda and spec.cuda.cudnn:
        assert main.packages.get(f"nvidia-cudnn-cu{spec.cuda.major}") == spec.cuda.cudnn
    if spec.cuda and not spec.environments["main"].index_url:
        # torch from PyPI itself (aarch64): the CUDA its wheels bring is the CUDA the spec states,
        # so the driver floor compat applies is the right one
        runtime = main.packages.get(f"nvidia-cuda-runtime-cu{spec.cuda.major}", "")
        assert runtime.startswith(spec.cuda.version + "."), f"{name}: CUDA {spec.cuda.version}, wheel {runtime}"


@pytest.mark.slow
def test_an_unresolvable_pin_fails_and_names_it(tmp_path, monkeypatch):
    monkeypatch.setenv("HPCDL_RESOLVE_CACHE", str(tmp_path))
    spec = SPECS["gh200-cuda"]
    bad = spec.model_copy(update={"environments": {"main": Environment(packages={"numpy": "1.99.0", "mpi4py": "4.1.0"})}})
    (res,) = resolve(bad)
    assert not res.ok and "numpy==1.99.0" in res.error
    assert not list(tmp_path.iterdir())  # a failure is never cached

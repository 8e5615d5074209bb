"""The image check %test runs, run for real in the test environment (torch, Open MPI, mpi4py)."""

from __future__ import annotations

import json

import pytest

from conftest import hpcdl, require_tool
from hpcdl.images import check
from hpcdl.images.spec import load_images

SPECS = load_images()


@pytest.fixture(scope="module")
def host_results():
    require_tool("mpirun")
    proc = hpcdl("images", "check", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {r["check"]: r for r in json.loads(proc.stdout)}


def test_the_image_check_passes_in_the_test_environment(host_results):
    assert host_results["torch"]["status"] == "passed"
    assert host_results["torch oneDNN"]["status"] == "passed"


def test_two_mpi_ranks_allreduce_through_mpi4py_and_mpirun(host_results):
    mpi = host_results["mpi allreduce"]
    assert mpi["status"] == "passed" and "2 ranks" in mpi["detail"] and "sum 3" in mpi["detail"]


def test_cuda_checks_on_a_cpu_node_are_not_applicable_never_passed(host_results):
    for name in ("cuda", "cudnn", "nccl", "gpu"):
        assert host_results[name]["status"] == "not applicable"


def test_a_framework_that_is_absent_is_reported_not_installed_in_host_mode(host_results):
    for name in ("tensorflow", "mxnet"):
        assert host_results[name]["status"] in ("passed", "not installed")


def test_in_image_mode_a_pinned_framework_that_is_missing_fails():
    results = {r.check: r for r in check.framework_results({"mxnet": "1.9.1"}, mode="image")}
    if results["mxnet"].status == "passed":
        pytest.skip("mxnet is installed here")
    assert results["mxnet"].status == "failed" and "pinned 1.9.1" in results["mxnet"].detail


def test_in_image_mode_a_framework_at_another_version_fails():
    import torch

    results = {r.check: r for r in check.framework_results({"torch": "2.8.0"}, mode="image")}
    assert results["torch"].status == "failed" and torch.__version__ in results["torch"].detail
    results = {r.check: r for r in check.framework_results({"torch": torch.__version__.split("+")[0]}, "image")}
    assert results["torch"].status == "passed"


def test_the_gpu_image_spec_on_a_cpu_build_of_torch_reports_cuda_not_applicable():
    results = {r.check: r for r in check.cuda_results(SPECS["volta-cuda"])}
    assert results["cuda"].status == "not applicable" and "CPU build" in results["cuda"].detail


def test_an_environment_not_in_the_image_is_one_line_and_exit_2():
    proc = hpcdl("images", "check", "--image", "knl-mkldnn", "--environment", "nope")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "nope" in proc.stderr


def test_the_net_plugin_row_says_present_or_absent(tmp_path):
    rocm = SPECS["mi250x-rocm"]
    # where the spec builds it and the file is not there (any machine but the image): absent, failed
    row = check.net_plugin_result(rocm)
    assert row.check == "nccl net plugin" and row.status == check.FAILED and row.detail.startswith("absent: ")
    assert "/opt/aws-ofi-nccl/lib/librccl-net.so" in row.detail
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "librccl-net.so").write_bytes(b"")
    here = rocm.model_copy(update={"net_plugin": rocm.net_plugin.model_copy(update={"prefix": str(tmp_path)})})
    row = check.net_plugin_result(here)
    assert row.status == check.PASSED and row.detail.startswith("present: ")
    # a GPU image without one: not applicable (the site's own serves); a CPU image: no row
    assert check.net_plugin_result(SPECS["volta-cuda"]).status == check.NOT_APPLICABLE
    assert check.net_plugin_result(SPECS["knl-mkldnn"]) is None


def test_the_rocm_image_spec_on_a_cpu_build_of_torch_fails_its_rocm_row():
    rows = {r.check: r for r in check.rocm_results(SPECS["mi250x-rocm"])}
    assert rows["rocm"].status == check.FAILED and "not a ROCm build" in rows["rocm"].detail


def test_the_labels_result_wants_the_image_name_and_the_four_oci_keys(tmp_path):
    from hpcdl.images.spec import load_image

    spec = load_image("local-cpu")
    path = tmp_path / "labels.json"
    good = {"org.hpcdl.image": "local-cpu", **{f"org.opencontainers.image.{k}": "x" for k in check.OCI_KEYS}}
    path.write_text(json.dumps(good))
    assert check.labels_result(spec, path).status == check.PASSED
    path.write_text(json.dumps({**good, "org.opencontainers.image.revision": ""}))
    result = check.labels_result(spec, path)
    assert result.status == check.FAILED and "no org.opencontainers.image.revision" in result.detail
    assert check.labels_result(spec, tmp_path / "none.json").status == check.FAILED

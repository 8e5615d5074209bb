"""References per site, tolerances on the worse side only, and verdicts that say by how much."""

from __future__ import annotations

import pytest

from conftest import hpcdl
from hpcdl.errors import HpcdlError
from hpcdl.validate.references import Reference, References, judge, load_references


def refs(**entries) -> References:
    return References("test", {k.replace("__", "/"): v for k, v in entries.items()}, {}, "test")


def test_a_throughput_may_fall_only_as_far_below_its_reference_as_the_tolerance_allows():
    r = refs(throughput__net__pytorch__images_per_sec=Reference(1000, -0.1))
    name = "throughput/net/pytorch/images_per_sec"
    assert judge("throughput", name, 900.0, "images/s", "higher", r).result == "pass"
    assert judge("throughput", name, 5000.0, "images/s", "higher", r).result == "pass"  # faster is never a failure
    failed = judge("throughput", name, 450.0, "images/s", "higher", r)
    assert failed.result == "fail"
    assert failed.bound == pytest.approx(900)
    assert "50% below the bound 900" in failed.message


def test_a_latency_may_rise_only_as_far_above_its_reference_as_the_tolerance_allows():
    r = refs(collectives__mpi__intra_node__latency_us=Reference(10, 1.0))
    name = "collectives/mpi/intra_node/latency_us"
    assert judge("collectives", name, 2.0, "us", "lower", r).result == "pass"
    failed = judge("collectives", name, 30.0, "us", "lower", r)
    assert failed.result == "fail" and "50% above the bound 20" in failed.message


def test_a_value_without_a_reference_is_logged_not_judged_and_a_missing_value_fails():
    assert judge("threads", "threads/best/images_per_sec", 10.0, "", "higher", refs()).result == "info"
    assert judge("threads", "threads/best/images_per_sec", None, "", "higher", refs()).result == "fail"


def test_patterns_match_when_no_exact_key_does():
    r = refs(**{"scaling__*__efficiency": Reference(0.9, -0.2), "scaling__weak__2__efficiency": Reference(0.5, -0.1)})
    assert r.lookup("scaling/strong/4/efficiency").value == 0.9
    assert r.lookup("scaling/weak/2/efficiency").value == 0.5


def test_a_centre_adds_its_references_beside_its_profiles_on_hpcdl_site_path(tmp_path, monkeypatch):
    (tmp_path / "references").mkdir()
    (tmp_path / "references" / "mymachine.yaml").write_text(
        "site: mymachine\nexpect: {frameworks: {pytorch: '2.13'}}\n"
        "references:\n  throughput/*/pytorch/images_per_sec: {value: 50, tolerance: -0.1}\n"
    )
    monkeypatch.setenv("HPCDL_SITE_PATH", str(tmp_path))
    loaded = load_references("mymachine")
    assert loaded.lookup("throughput/resnet50/pytorch/images_per_sec").value == 50
    assert loaded.expect["frameworks"] == {"pytorch": "2.13"}
    assert load_references("local").source == "hpcdl/validate/references/local.yaml"


def test_a_tolerance_on_the_wrong_side_is_refused_with_the_key_named(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("references:\n  throughput/net/pytorch/images_per_sec: {value: 100, tolerance: 0.1}\n")
    with pytest.raises(HpcdlError, match=r"references.throughput/net/pytorch/images_per_sec: higher is better"):
        load_references("x", bad)
    bad.write_text("references:\n  collectives/gloo/intra-node/latency_us: {value: 100, tolerance: -0.1}\n")
    with pytest.raises(HpcdlError, match="lower is better"):
        load_references("x", bad)


def test_a_malformed_references_file_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("references:\n  convergence/cifar10_quick/accuracy: 0.9\n")
    proc = hpcdl("validate", "--site", "local", "--references", bad, "-o", tmp_path / "out")
    assert proc.returncode == 2, proc.stderr
    assert "references.convergence/cifar10_quick/accuracy" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def _kind_site(tmp_path, monkeypatch, cpu_model="AMD EPYC 7763"):
    """A site with two node kinds (cpu, gpu) on HPCDL_SITE_PATH, references beside it."""
    import yaml

    (tmp_path / "references").mkdir(exist_ok=True)
    (tmp_path / "twokinds.yaml").write_text(yaml.safe_dump({
        "name": "twokinds", "scheduler": "slurm", "launcher": "srun", "default_node_kind": "gpu",
        "node_kinds": {
            "cpu": {"cpu_model": cpu_model, "sockets": 2, "cores_per_socket": 4, "memory_gb": 64},
            "gpu": {"cpu_model": "AMD EPYC 7763", "sockets": 1, "cores_per_socket": 4, "memory_gb": 64,
                    "gpus": [{"model": "A100", "socket": 0}]},
        },
    }))
    monkeypatch.setenv("HPCDL_SITE_PATH", str(tmp_path))
    return tmp_path / "references"


def test_references_are_found_per_node_kind_before_the_sites_file(tmp_path, monkeypatch):
    from hpcdl.validate.suite import build_context

    folder = _kind_site(tmp_path, monkeypatch)
    (folder / "twokinds.yaml").write_text(
        "hardware: {node_kind: gpu, gpu_model: A100}\n"
        "references:\n  throughput/*/pytorch/images_per_sec: {value: 2000, tolerance: -0.1}\n")
    (folder / "twokinds.cpu.yaml").write_text(
        "hardware: {node_kind: cpu, cpu_model: AMD EPYC 7763}\n"
        "references:\n  throughput/*/pytorch/images_per_sec: {value: 300, tolerance: -0.1}\n")
    cpu = build_context("twokinds", "quick", (1,), node_kind="cpu")
    assert cpu.node_kind_name == "cpu" and cpu.default_plan.node_kind == "cpu"
    assert cpu.references.lookup("throughput/x/pytorch/images_per_sec").value == 300
    assert cpu.references.warnings == ()
    gpu = build_context("twokinds", "quick", (1,))
    assert gpu.references.lookup("throughput/x/pytorch/images_per_sec").value == 2000


def test_a_file_for_another_node_kind_is_not_applied_and_the_run_says_so(tmp_path, monkeypatch):
    from hpcdl.validate.suite import build_context

    folder = _kind_site(tmp_path, monkeypatch)
    (folder / "twokinds.yaml").write_text(
        "hardware: {node_kind: gpu}\nreferences:\n  throughput/*/pytorch/images_per_sec: {value: 2000, tolerance: -0.1}\n")
    cpu = build_context("twokinds", "quick", (1,), node_kind="cpu")
    assert cpu.references.entries == {} and "node kind 'gpu'" in cpu.references.source
    assert any("'cpu' has no references" in w for w in cpu.references.warnings)


def test_references_measured_on_another_cpu_model_are_applied_only_with_a_note(tmp_path, monkeypatch):
    from hpcdl.validate.suite import build_context

    folder = _kind_site(tmp_path, monkeypatch, cpu_model="Intel(R) Xeon(R) Processor")
    (folder / "twokinds.cpu.yaml").write_text(
        "hardware: {node_kind: cpu, cpu_model: AMD EPYC 7763}\n"
        "references:\n  throughput/*/pytorch/images_per_sec: {value: 300, tolerance: -0.1}\n")
    ctx = build_context("twokinds", "quick", (1,), node_kind="cpu")
    assert ctx.references.lookup("throughput/x/pytorch/images_per_sec").value == 300
    (warning,) = ctx.references.warnings
    assert "'AMD EPYC 7763'" in warning and "'Intel(R) Xeon(R) Processor'" in warning
    assert "different CPU model" in warning


def test_the_shipped_local_references_name_the_hardware_they_were_measured_on():
    loaded = load_references("local")
    assert loaded.hardware.get("cpu_model") and loaded.hardware.get("node_kind")


def test_a_bad_hardware_field_is_refused_with_the_field_named(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("hardware: {cpu: EPYC}\nreferences: {}\n")
    with pytest.raises(HpcdlError, match="hardware: give"):
        load_references("x", bad)

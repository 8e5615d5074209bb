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

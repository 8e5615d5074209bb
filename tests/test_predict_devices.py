"""The per-device rate table: which row a profile's gpu model / cpu_target picks, and that nothing unknown
gets a rate silently. Pure lookups plus a few one-node predictions: fast."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from conftest import RECIPES, ROOT, hpcdl
from hpcdl.errors import HpcdlError
from hpcdl.plan import JobRequest
from hpcdl.predict import predict
from hpcdl.predict.devices import CPU_TABLE, GPU_TABLE, TABLE, cpu_rate, gpu_rate, words
from hpcdl.sites.registry import load_site_file

PROFILES = sorted([*(ROOT / "platform" / "hpcdl" / "sites" / "profiles").glob("*.yaml"),
                   *(ROOT / "tests" / "fixtures" / "sites").glob("*.yaml")])
PUBLISHED = ROOT / "platform" / "hpcdl" / "sites" / "profiles"  # the machines written from their centres' guides


def _node_kinds():
    for path in PROFILES:
        for kind, node in (yaml.safe_load(path.read_text()).get("node_kinds") or {}).items():
            yield path.stem, kind, node


def _gpu_rows(model: str, precision: str = "fp32") -> list[str]:
    """Every GPU row whose names are words of `model` (not just the first)."""
    have = set(words(model))
    return [r.key for r in GPU_TABLE if r.precision == precision and have.intersection(r.match)]


# model strings as profiles and nvidia-smi / rocm-smi write them, and the one row each must pick
GPUS = {
    "NVIDIA GH200 120GB": "gh200",  # CSCS Alps
    "NVIDIA GH200 480GB": "gh200",  # nvidia-smi on a GH200
    "NVIDIA H200": "h200", "NVIDIA H200 NVL": "h200",
    "NVIDIA H100 SXM5 96GB": "h100", "NVIDIA H100 80GB HBM3": "h100",
    "NVIDIA B200": "b200",
    "NVIDIA A100-SXM4-40GB": "a100", "NVIDIA A100 80GB PCIe": "a100", "NVIDIA A100-SXM-64GB": "a100",
    "NVIDIA A10": "a10", "NVIDIA A40": "a40", "NVIDIA L40S": "l40s", "Tesla T4": "t4",
    "Tesla V100-SXM2-16GB": "v100", "Tesla V100S-PCIE-32GB": "v100s", "Tesla P100-PCIE-16GB": "p100",
    "Tesla K40c": "k40",
    "AMD Instinct MI300X": "mi300x", "AMD Instinct MI300A": "mi300a", "AMD Instinct MI250X GCD": "mi250x",
    "AMD Instinct MI210": "mi210", "AMD Instinct MI100": "mi100",
}


@pytest.mark.parametrize("model,key", GPUS.items())
def test_each_gpu_model_string_picks_its_own_row_and_no_other_row_claims_it(model, key):
    assert gpu_rate(model, "fp32").key == key
    assert _gpu_rows(model) == [key]
    if key not in ("k40", "p100"):  # measured at fp32 only
        assert gpu_rate(model, "fp16").key == f"{key}-fp16" and gpu_rate(model, "bf16").key == f"{key}-fp16"


def test_a_string_naming_two_devices_gets_the_first_row_in_the_stated_order():
    # TACC writes Vista's GPU as 'GH200 H200 96GB': the superchip's row comes before the GPU's
    model = "NVIDIA GH200 H200 96GB"
    assert _gpu_rows(model) == ["gh200", "h200"] and gpu_rate(model, "fp32").key == "gh200"
    order = [r.key for r in GPU_TABLE]
    assert order.index("gh200") < order.index("h200")


def test_the_l40_and_the_l40s_each_get_their_own_row():
    # one word apart, and the L40S's tensor peaks are twice the L40's (NVIDIA's data sheets)
    assert gpu_rate("NVIDIA L40", "fp32").key == "l40" and gpu_rate("NVIDIA L40S", "fp32").key == "l40s"
    assert gpu_rate("NVIDIA L40", "fp16").peak_tflops * 2 == pytest.approx(gpu_rate("NVIDIA L40S", "fp16").peak_tflops, rel=0.01)


@pytest.mark.parametrize("model", ["NVIDIA L4", "NVIDIA GB200", "NVIDIA A10G", "AMD Instinct MI325X",
                                   "NVIDIA H20", "Radeon RX 7900 XTX", "", "H100A"])
def test_a_lookalike_or_unknown_gpu_gets_no_row(model):
    assert gpu_rate(model, "fp32") is None and gpu_rate(model, "fp16") is None


def test_every_gpu_in_every_profile_has_a_row_at_both_precisions():
    for site, kind, node in _node_kinds():
        for gpu in node.get("gpus") or []:
            assert gpu_rate(gpu["model"], "fp32") and gpu_rate(gpu["model"], "fp16"), (site, kind, gpu["model"])


CPUS = [
    # (cpu_model, cpu_target, row)
    ("NVIDIA Grace", "neoverse_v2", "grace"), ("NVIDIA Grace (Neoverse V2)", "neoverse_v2", "grace"),
    ("NVIDIA Grace", "aarch64", "grace"), ("Fujitsu A64FX", "a64fx", "a64fx"), ("A64FX", "aarch64", "a64fx"),
    ("AMD EPYC 9654", "zen4", "zen4"), ("AMD EPYC 9755", "zen5", "zen5"), ("AMD EPYC 7763", "zen3", "x86-avx2"),
    ("AMD EPYC 7742", "zen2", "x86-avx2"),
    ("Intel Xeon Platinum 8480+", "sapphirerapids", "sapphirerapids"),
    ("Intel Xeon CPU Max 9480", "sapphirerapids", "sapphirerapids"),
    ("Intel Xeon CPU Max 9480", "x86_64", "sapphirerapids"),
    ("Intel Xeon Platinum 8380", "icelake", "skylake"), ("Intel Xeon Gold 6248", "cascadelake", "skylake"),
    ("Intel Xeon Platinum 8160", "skylake_avx512", "skylake"), ("Intel Xeon Platinum 8160", "x86_64", "skylake"),
    ("Intel Xeon Phi 7250", "knl", "knl"), ("", "mic_knl", "knl"), ("IBM POWER9", "power9le", "power9"),
    ("Intel Xeon E5-2695 v4", "broadwell", "x86-avx2"), ("CI vCPU", "x86_64", "x86-avx2"),
    ("", "x86_64_v4", "x86-avx2"),
    ("Intel Xeon Platinum 8480+", "neoverse_v2", "grace"),  # a microarchitecture target wins over the model's words
]


@pytest.mark.parametrize("model,target,key", CPUS)
def test_a_cpu_is_picked_by_its_archspec_target_then_by_its_model_words(model, target, key):
    assert cpu_rate(model, target).key == key


@pytest.mark.parametrize("model,target", [
    ("NVIDIA Grace", "neoverse_n1"), ("Ampere Altra", "aarch64"), ("", "aarch64"), ("IBM POWER8", "power8"),
    ("IBM POWER10", "power10le"), ("", "ppc64le"), ("", "riscv64"), ("", "sandybridge"), ("", "x86_64_v2"),
    ("AMD EPYC 9654", "zen6"), ("Intel Xeon Platinum 8160", "graniterapids_x"),
    ("Intel Xeon Platinum 8160", "aarch64"), ("Intel Xeon Phi 7250", "ppc64le"),  # words never cross an ISA
])
def test_an_arm_power_or_unknown_cpu_never_gets_an_x86_row(model, target):
    assert cpu_rate(model, target) is None


def test_every_cpu_target_in_every_profile_has_a_row_and_arm_gets_no_x86_row():
    x86 = {"skylake", "sapphirerapids", "zen4", "zen5", "x86-avx2", "knl"}
    for site, kind, node in _node_kinds():
        rate = cpu_rate(node.get("cpu_model", ""), node.get("cpu_target", "x86_64"))
        assert rate, (site, kind)
        if node.get("cpu_target", "").startswith(("neoverse", "a64fx", "aarch64")):
            assert rate.key not in x86, (site, kind)


def test_every_cpu_row_has_its_instruction_set():
    from hpcdl.predict.devices import CPU_ISA

    assert set(CPU_ISA) == {r.key for r in CPU_TABLE}


def test_every_row_says_whether_it_was_measured_or_derived_and_measured_rows_carry_a_throughput():
    for rate in TABLE:
        assert rate.source.startswith(("measured: ", "derived: ")), rate.key
        if rate.source.startswith("measured: "):
            assert rate.images_per_sec and rate.batch and rate.net, rate.key
    assert [r.key for r in CPU_TABLE][-1] == "x86-avx2"  # the floor comes last


def test_a_derived_gpu_row_is_its_measured_base_times_the_data_sheet_bandwidth_ratio():
    a100, h200 = gpu_rate("A100", "fp32"), gpu_rate("H200", "fp32")
    assert h200.images_per_sec == pytest.approx(a100.images_per_sec * 4800 / 2039)
    v100, t4 = gpu_rate("V100", "fp16"), gpu_rate("T4", "fp16")
    assert t4.images_per_sec == pytest.approx(v100.images_per_sec * 320 / 900)


def _site(name):
    return load_site_file(PUBLISHED / f"{name}.yaml")


@pytest.mark.parametrize("site,kind,row", [
    ("alps-gh200", "gh200", "gh200"), ("vista", "gh", "gh200"), ("vista", "gg", "grace"),
    ("stampede3", "h100", "h100"), ("stampede3", "spr", "sapphirerapids"), ("stampede3", "icx", "skylake"),
    ("stampede3", "skx", "skylake"),
])
def test_predict_runs_on_the_unseen_machines_profiles_with_the_right_row(site, kind, row):
    p = predict(_site(site), "resnet50", 32, [1, 2, 4], "weak", request=JobRequest(node_kind=kind))
    assert p.notes[0].startswith(f"compute: {row}: ")
    for r in p.rows:
        assert math.isfinite(r.images_per_sec) and r.images_per_sec > 0 and 0 < r.efficiency <= 1 + 1e-9


def _with(site_name: str, kind: str, tmp_path: Path, **node) -> Path:
    data = yaml.safe_load((PUBLISHED / f"{site_name}.yaml").read_text())
    data["node_kinds"][kind].update(node)
    folder = tmp_path / "sites"
    folder.mkdir()
    (folder / f"{site_name}.yaml").write_text(yaml.safe_dump(data))
    return folder


def test_an_unknown_gpu_stops_predict_with_one_line_naming_the_field_and_how_to_calibrate(tmp_path):
    data = yaml.safe_load((PUBLISHED / "vista.yaml").read_text())
    gpus = [{**g, "model": "NVIDIA GB200"} for g in data["node_kinds"]["gh"]["gpus"]]
    sites = _with("vista", "gh", tmp_path, gpus=gpus)
    proc = hpcdl("predict", "--site", "vista", RECIPES / "resnet50.yaml", "--nodes", "1,2",
                 env={"HPCDL_SITE_PATH": str(sites)})
    assert proc.returncode != 0 and not proc.stdout
    assert "gpus[].model" in proc.stderr and "'NVIDIA GB200'" in proc.stderr
    assert "hpcdl validate" in proc.stderr and "--calibration" in proc.stderr


def test_a_plan_with_a_recipe_stands_where_its_gpu_has_no_rate_and_says_why(tmp_path):
    # the placement does not depend on the prediction: `hpcdl plan --recipe` shows it and says
    # what is missing, where `hpcdl predict` stops
    data = yaml.safe_load((PUBLISHED / "vista.yaml").read_text())
    gpus = [{**g, "model": "NVIDIA GB200"} for g in data["node_kinds"]["gh"]["gpus"]]
    env = {"HPCDL_SITE_PATH": str(_with("vista", "gh", tmp_path, gpus=gpus))}
    text = hpcdl("plan", "--site", "vista", "--node-kind", "gh", "--nodes", "2", "--recipe",
                 RECIPES / "resnet50.yaml", env=env, check=True).stdout
    assert "launch: " in text and "prediction: none (no reference rate for GPU model 'NVIDIA GB200'" in text
    data = json.loads(hpcdl("plan", "--site", "vista", "--node-kind", "gh", "--nodes", "2", "--recipe",
                            RECIPES / "resnet50.yaml", "--json", env=env, check=True).stdout)
    assert "prediction" not in data and "gpus[].model" in data["prediction_note"]


def test_an_unknown_cpu_stops_a_cpu_prediction_naming_cpu_target_instead_of_using_the_avx2_row():
    site = _site("vista")
    _, node = site.node_kind("gg")
    arm = node.model_copy(update={"cpu_target": "neoverse_n1", "cpu_model": "Ampere Altra"})
    site = site.model_copy(update={"node_kinds": {**site.node_kinds, "gg": arm}})
    with pytest.raises(HpcdlError) as err:
        predict(site, "resnet50", 32, [1], "weak", request=JobRequest(node_kind="gg"))
    text = str(err.value)
    assert "cpu_target 'neoverse_n1'" in text and "hpcdl validate" in text and "--calibration" in text

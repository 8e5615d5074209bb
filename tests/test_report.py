"""`hpcdl report`: the checked-in example equals what the generator makes now, and its plots show data."""

from __future__ import annotations

import json

import pytest

from conftest import ROOT, hpcdl
from hpcdl.errors import HpcdlError
from hpcdl.report import build_report, load_results

EXAMPLE = ROOT / "docs" / "validation-example"


def test_the_example_report_in_docs_equals_what_hpcdl_report_makes_now(tmp_path):
    out = build_report([EXAMPLE / "results.jsonl"], tmp_path / "report")
    for name in ("summary.json", "index.html"):
        assert (out / name).read_text() == (EXAMPLE / name).read_text(), f"{name} drifted: rerun hpcdl report"
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == sorted(p.name for p in EXAMPLE.glob("*.png"))


@pytest.mark.parametrize("png", ["scaling.png", "threads.png", "collectives.png", "throughput.png"])
def test_each_example_plot_is_a_real_picture_with_data_drawn_on_it(png):
    import matplotlib.image as mpimg

    image = mpimg.imread(EXAMPLE / png)
    assert image.shape[0] > 300 and image.shape[1] > 500
    rgb = image[..., :3]
    # lines and bars in colour, not just black axes on white
    colourful = (rgb.max(axis=2) - rgb.min(axis=2)) > 0.3
    assert colourful.mean() > 0.002, f"{png} shows almost no coloured marks"


def test_the_summary_lists_every_verdict_with_its_value_reference_and_tolerance():
    summary = json.loads((EXAMPLE / "summary.json").read_text())
    results = load_results([EXAMPLE / "results.jsonl"])
    assert len(summary["verdicts"]) == len(results.verdicts) > 0
    judged = [v for v in summary["verdicts"] if v["result"] in ("pass", "fail")]
    assert all({"value", "reference", "tolerance", "bound", "nodes", "nodelist"} <= set(v) for v in judged)
    assert summary["passed"] == (summary["counts"]["fail"] == 0)


def test_the_html_page_embeds_every_plot_and_escapes_what_it_shows(tmp_path):
    lines = (EXAMPLE / "results.jsonl").read_text().splitlines()
    suite = json.loads(lines[0])
    suite["site"] = "<script>alert(1)</script>"
    (tmp_path / "r.jsonl").write_text("\n".join([json.dumps(suite), *lines[1:]]) + "\n")
    html = (build_report([tmp_path / "r.jsonl"], tmp_path / "out") / "index.html").read_text()
    assert "<script>alert" not in html and "&lt;script&gt;" in html
    for png in json.loads((EXAMPLE / "summary.json").read_text())["plots"]:
        assert f'<img src="{png}"' in html


def test_hpcdl_report_combines_results_files_and_prints_the_table(tmp_path):
    proc = hpcdl("report", EXAMPLE / "results.jsonl", EXAMPLE / "results.jsonl", "-o", tmp_path / "r", check=True)
    assert "HTML report:" in proc.stdout and "convergence" in proc.stdout
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert len(summary["suites"]) == 2


def test_a_file_that_is_not_validation_results_is_refused(tmp_path):
    bad = tmp_path / "train.jsonl"
    bad.write_text('{"event": "final", "accuracy": 0.9}\n')
    with pytest.raises(HpcdlError, match="no `suite` record"):
        load_results([bad])
    proc = hpcdl("report", tmp_path / "missing.jsonl", "-o", tmp_path / "r")
    assert proc.returncode == 2 and "no such results file" in proc.stderr

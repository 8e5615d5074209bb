"""The validation report as a reader sees it: laid out by a real browser (headless Chromium) at
1400 px, nothing wider than the page; a prediction miss shown as information, not as a failure.

The results are the example run in docs/validation-example (a real `hpcdl validate --site local`,
whose launcher note carries Open MPI's long ident), twice, as a combined report of two runs,
with `hpcdl predict`'s figures on its scaling points, one of them a miss.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from conftest import ROOT, hpcdl, require_tool

EXAMPLE = ROOT / "docs" / "validation-example" / "results.jsonl"

# written into the page's DOM once it is laid out; --dump-dom then prints it
MEASURE = """<script>
window.addEventListener("load", () => {
  const page = document.documentElement.clientWidth;
  const wide = [...document.querySelectorAll("table, img, p, h1, h2, figure")]
    .filter(e => e.getBoundingClientRect().right > page + 0.5)
    .map(e => e.tagName + ": " + (e.innerText || e.getAttribute("src") || "").slice(0, 60));
  const notes = [...document.querySelectorAll("td.note")].map(td => {
    const lh = parseFloat(getComputedStyle(td).lineHeight) || 16;
    return Math.round((td.clientHeight - 8) / lh);
  });
  const out = document.createElement("pre");
  out.id = "hpcdl-layout";
  out.textContent = JSON.stringify({page, scroll: document.documentElement.scrollWidth, wide,
                                    note_lines: Math.max(0, ...notes)});
  document.body.appendChild(out);
});
</script>"""


def two_runs_with_predictions(tmp_path):
    runs = []
    for i, started in enumerate(("2026-11-27T02:26:14+00:00", "2026-11-27T02:26:51+00:00")):
        lines = []
        for line in EXAMPLE.read_text().splitlines():
            r = json.loads(line)
            if r.get("event") == "suite":
                r["started"] = started
            if r.get("series") == "scaling" and r["p"] > 1:
                r.update(predicted_images_per_sec=0.66 * r["images_per_sec"], prediction_error=-0.34,
                         predicted_efficiency=0.5, prediction_within=False, cpu_share=0.9, core_scaling=0.95)
            lines.append(json.dumps(r))
        path = tmp_path / f"run{i}" / "results.jsonl"
        path.parent.mkdir()
        path.write_text("\n".join(lines) + "\n")
        runs.append(path)
    return runs


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    runs = two_runs_with_predictions(tmp)
    hpcdl("report", *runs, "-o", tmp / "report", env={"HPCDL_HISTORY": str(tmp / "history")})
    return tmp / "report" / "index.html"


def test_a_prediction_miss_is_information_not_a_failure(report):
    html = report.read_text()
    assert "All judged checks passed" in html
    measured = html.split("<h2>Measured and predicted</h2>", 1)[1].split("<h2>", 1)[0]
    assert "no (not judged)" in measured and 'class="fail"' not in measured and 'class="miss"' in measured
    assert "does not fail the run" in measured


def test_the_report_fits_a_1400_px_window_in_a_real_browser(report, tmp_path):
    chromium = require_tool("chromium")
    page = report.with_name("measured.html")  # the report, plus a script that measures it
    page.write_text(report.read_text().replace("</body>", MEASURE + "\n</body>"))
    common = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
              f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,900",
              "--allow-file-access-from-files", "--virtual-time-budget=5000"]
    dom = subprocess.run([*common, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=180)
    found = re.search(r'<pre id="hpcdl-layout">(.*?)</pre>', dom.stdout)
    assert found, dom.stderr[-2000:]
    layout = json.loads(found.group(1).replace("&quot;", '"'))
    assert layout["page"] > 1300, layout  # the window really was 1400 px wide
    assert layout["scroll"] <= layout["page"] and not layout["wide"], layout
    assert layout["note_lines"] <= 5, layout  # the launcher note is read across, not down a narrow column (10 lines before)
    shot = tmp_path / "report.png"
    subprocess.run([*common, f"--screenshot={shot}", report.as_uri()], capture_output=True, timeout=180)
    assert shot.stat().st_size > 10_000


def test_the_trend_plot_leaves_out_the_environments_rank_count_and_tells_runs_of_one_minute_apart(tmp_path):
    from types import SimpleNamespace

    from hpcdl.report.plots import _run_label, trend_plot

    flat = [(run, SimpleNamespace(name="environment/launcher", result="pass", value=2, reference=None, bound=None,
                                  unit="ranks")) for run in ("2026-11-27 02:26:14", "2026-11-27 02:26:51")]
    assert trend_plot(flat, tmp_path / "trend.png") is None  # a count of ranks is no trend
    labels = ["2026-11-27 02:26:14", "2026-11-27 02:26:51", "2026-11-28 09:00:00"]
    assert [_run_label(lab, labels) for lab in labels] == ["11-27 02:26:14", "11-27 02:26:51", "11-28 09:00"]

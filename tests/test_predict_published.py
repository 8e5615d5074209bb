"""Published scaling studies, predicted from published hardware facts, within the stated tolerance.

The facts (per-device rates, link rates and latencies, framework behaviour) are listed with
each case in hpcdl/predict/published.py and docs/predict.md; none was fitted to these curves.
"""

from __future__ import annotations

import os

import pytest

from conftest import ROOT
from hpcdl.predict.published import CASES, TOLERANCE, compare, markdown

DOC = ROOT / "docs" / "predict.md"


@pytest.mark.parametrize("case", CASES, ids=[c.key for c in CASES])
def test_the_published_efficiency_is_predicted_within_the_stated_tolerance(case):
    assert case.tolerance == TOLERANCE
    for point in compare(case):
        assert point["within"], f"{case.key}: {point}"


def test_stampede2_caffenet_strong_scaling_falls_off_steeply_as_the_per_node_batch_shrinks():
    case = next(c for c in CASES if c.key == "stampede2-strong-caffenet")
    from hpcdl.predict.published import run_case

    eff = [r.efficiency for r in run_case(case).rows]
    assert eff == sorted(eff, reverse=True) and eff[-1] < 0.35  # the allreduce stays, the compute shrinks


def test_summit_horovod_resnet50_stays_near_ideal_to_64_nodes_because_backward_hides_the_allreduce():
    case = next(c for c in CASES if c.key == "summit-horovod-resnet50")
    from hpcdl.predict.published import run_case

    rows = run_case(case).rows
    assert all(r.efficiency > 0.95 for r in rows) and all(r.comm_s > 10 * r.exposed_comm_s for r in rows[1:])


def test_the_guide_shows_every_case_as_the_model_predicts_it_now():
    text = DOC.read_text()
    generated = markdown()
    if os.environ.get("HPCDL_UPDATE_GOLDEN"):
        start, end = text.index("<!-- published:begin -->"), text.index("<!-- published:end -->")
        DOC.write_text(text[:start] + "<!-- published:begin -->\n\n" + generated + "\n" + text[end:])
        text = DOC.read_text()
    assert generated in text, "docs/predict.md is stale: HPCDL_UPDATE_GOLDEN=1 pytest tests/test_predict_published.py"

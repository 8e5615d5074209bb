"""Published scaling studies, predicted from published hardware facts, within the stated tolerance.

The facts (per-device rates, link rates and latencies, framework behaviour) are listed with
each case in hpcdl/predict/published.py and docs/predict.md; none was fitted to these curves.
"""

from __future__ import annotations

import os
import statistics

import pytest

from conftest import ROOT
from hpcdl.predict.published import CASES, TOLERANCE, all_points, compare, draw_comparison, markdown, median_errors

DOC = ROOT / "docs" / "predict.md"
PICTURE = ROOT / "docs" / "predict-published.png"
# what the model must reach over every published point (median absolute error), and its margin over the
# constant-efficiency baseline; the bandwidth-only ring is held to below, on the whole set's tail
MEDIAN_EFFICIENCY_POINTS = 0.05
MEDIAN_IMAGES = 0.15
MARGIN_OVER_CONSTANT = 0.05
# and over the bandwidth-only ring, on every published point: the median and the mean absolute error of efficiency
# (points) and the median of images/s (fraction) at least this much smaller, the worst decile 3 points smaller
MARGIN_OVER_RING = 0.0075


@pytest.mark.parametrize("case", CASES, ids=[c.key for c in CASES])
def test_the_published_efficiency_is_predicted_within_the_stated_tolerance(case):
    assert case.tolerance == TOLERANCE
    points = compare(case)
    if case.known_miss:
        # a documented miss stays one: when the model comes within the tolerance, drop the reason
        assert not all(p["within"] for p in points), f"{case.key} is within the tolerance now: drop known_miss"
        return
    for point in points:
        assert point["within"], f"{case.key}: {point}"


def test_every_published_point_states_images_and_efficiency_beside_both_baselines():
    for point in all_points():
        assert point["published"] is not None or point["published_images"]  # a point publishes one or both
        for name in ("predicted", "constant", "ring"):
            assert 0 < point[name] <= 1.2
            if point["published"] is not None:
                assert point[f"{name}_error"] == pytest.approx(point[name] - point["published"])
            if point["published_images"]:
                assert point[f"{name}_images_error"] is not None
    text = markdown()
    assert text.count("| published images/s |") == len(CASES) + 1 and "not published" in text  # + the all-points table


def test_over_every_published_point_the_model_is_within_the_stated_medians():
    m = median_errors(all_points())
    assert m["predicted"]["efficiency"] <= MEDIAN_EFFICIENCY_POINTS, m
    assert m["predicted"]["images"] <= MEDIAN_IMAGES, m
    assert m["predicted"]["images_points"] >= 20  # absolute throughput is judged, not only efficiency


def test_the_model_beats_both_baselines_by_the_stated_margins_over_every_published_point():
    pts = all_points()
    m = median_errors(pts)
    assert m["predicted"]["efficiency"] <= m["constant"]["efficiency"] - MARGIN_OVER_CONSTANT, m
    assert m["predicted"]["images"] <= m["constant"]["images"] - MARGIN_OVER_CONSTANT, m
    assert m["predicted"]["efficiency"] <= m["ring"]["efficiency"] - MARGIN_OVER_RING, m
    assert m["predicted"]["images"] <= m["ring"]["images"] - MARGIN_OVER_RING, m
    assert mean_error(pts, "predicted") <= mean_error(pts, "ring") - MARGIN_OVER_RING
    # where the ring is wrong it is far wrong (latency-bound rings, networks that backward hides)
    assert decile(pts, "predicted") <= decile(pts, "ring") - 0.03


def mean_error(pts, name):
    return statistics.mean(abs(p[f"{name}_error"]) for p in pts if p[f"{name}_error"] is not None)


def decile(pts, name):
    errors = sorted(abs(p[f"{name}_error"]) for p in pts if p[f"{name}_error"] is not None)
    return errors[int(0.9 * len(errors))]


def test_more_than_half_of_the_points_were_not_used_while_building_the_model():
    pts = all_points()
    assert sum(p["held_out"] for p in pts) * 2 > len(pts)


def test_most_cases_are_predicted_within_the_tolerance_and_every_miss_says_why():
    misses = [c for c in CASES if c.known_miss]
    assert len(misses) * 4 <= len(CASES) and all(len(c.known_miss) > 40 for c in misses)


def test_a_net_measured_on_the_device_runs_at_its_own_rate_not_resnet50s_flop_rate():
    # tensorflow.org's P100 table: VGG16 154 images/s at batch 64, where ResNet-50's FLOP rate gives about 58
    case = next(c for c in CASES if c.key == "horovod-vgg16-128")
    from hpcdl.predict.published import run_case

    one = run_case(case).rows[0]
    # the device's own rate: compute alone, without what the overlapped allreduce costs backward
    assert 150 < one.batch_per_rank / (one.compute_s - one.contention_s) < 160


def test_vgg16_scales_worse_than_resnet101_on_the_same_25_gbe_servers():
    from hpcdl.predict.published import run_case

    eff = {c.key: run_case(c).rows[-1].efficiency for c in CASES if c.key.endswith("-128")
           and c.key.startswith("horovod-") and "tcp" not in c.key}
    assert eff["horovod-vgg16-128"] < eff["horovod-resnet101-128"] - 0.05


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
        draw_comparison(PICTURE)
    assert PICTURE.is_file() and "predict-published.png" in text
    assert generated in text, "docs/predict.md is stale: HPCDL_UPDATE_GOLDEN=1 pytest tests/test_predict_published.py"


def test_a_study_is_predicted_from_its_own_single_device_rate_where_it_publishes_one():
    # Goyal et al.: 29 hours for 90 epochs on one server of 8 P100, one hour on 256 (the abstract); from
    # tensorflow.org's synthetic-data P100 rate the 256 GPUs came out 55 % faster than published
    from hpcdl.predict.published import points, run_case

    case = next(c for c in CASES if c.key == "goyal-resnet50-8k")
    (point,) = points(case)
    assert abs(point["predicted_images_error"]) < 0.10, point
    assert "measured in the study itself" in next(n for n in run_case(case).notes if n.startswith("compute:"))


def test_wherever_a_publication_falls_with_the_count_the_prediction_falls_too():
    falls = 0
    for case in CASES:
        pts = [p for p in points_of(case) if p["published"] is not None]
        for before, after in zip(pts, pts[1:]):
            if after["published"] < before["published"]:
                falls += 1
                # a fall the printed efficiency (one decimal) shows, not one in the fourth digit
                assert after["predicted"] < before["predicted"] - 0.002, (case.key, before, after)
    assert falls >= 10  # NVIDIA's MXNet 1-16 GPU tables, TACC's Longhorn 1 and 2 nodes


def points_of(case):
    from hpcdl.predict.published import points

    return points(case)

"""The TensorFlow/MXNet benchmark rows render for docs/performance.md (the timing itself is `make bench`)."""

from __future__ import annotations

from pathlib import Path

from hpcdl.bench_frameworks import markdown_table


def test_framework_rows_render_as_a_table_with_the_trainer_to_bare_ratio_and_failures_said_in_words():
    text = markdown_table([
        {"framework": "tensorflow", "net": "cifar10_quick", "batch": 32, "threads": 1,
         "trainer_images_per_sec": 400.0, "bare_images_per_sec": 410.0, "ratio": 0.976},
        {"framework": "mxnet", "error": "No module named mxnet"},
    ])
    assert "| tensorflow | 1 | 400.0 | 410.0 | 0.976 |" in text
    assert "| mxnet | - | - | - | not measured: No module named mxnet |" in text


def test_the_frameworks_guide_names_only_test_files_that_exist():
    root = Path(__file__).resolve().parent.parent
    guide = (root / "docs" / "frameworks.md").read_text()
    import re

    named = set(re.findall(r"tests/(test_\w+\.py)", guide))
    assert named and all((root / "tests" / name).exists() for name in named)

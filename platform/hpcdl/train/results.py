"""Results as JSON lines: one record per display step, per test, and a final summary."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TextIO


class ResultsWriter:
    """Rank 0 writes records to a file (JSON lines) and a readable line to the terminal."""

    def __init__(self, path: str | None, enabled: bool, stream: TextIO | None = None):
        self.enabled = enabled
        self.stream = stream or sys.stdout
        self.file = None
        if enabled and path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self.file = open(path, "a", buffering=1)

    def record(self, event: str, **fields) -> None:
        if not self.enabled:
            return
        rec = {"event": event, "time": round(time.time(), 3), **fields}
        if self.file:
            self.file.write(json.dumps(rec) + "\n")
        print(_describe(rec), file=self.stream, flush=True)

    def close(self) -> None:
        if self.file:
            self.file.close()


def _describe(rec: dict) -> str:
    e = rec["event"]
    if e == "step":
        return (
            f"iter {rec['iter']:>6}  epoch {rec['epoch']:6.2f}  loss {rec['loss']:.4f}  lr {rec['lr']:.3g}  "
            f"{rec['images_per_sec_total']:8.1f} img/s total ({rec['images_per_sec_rank']:.1f}/rank)"
        )
    if e == "test":
        return f"iter {rec['iter']:>6}  test accuracy {rec['accuracy']:.4f}  test loss {rec['loss']:.4f}"
    if e == "final":
        return (
            f"final: {rec['images_per_sec_total']:.1f} img/s total over {rec['ranks']} rank(s) on "
            f"{rec['nodes']} node(s), held-out accuracy {rec['accuracy']:.4f}, "
            f"time to solution {rec['time_to_solution_s']:.1f} s"
        )
    if e == "start":
        return f"training {rec['net']} ({rec['parameters']:,} parameters) on {rec['data']} with {rec['ranks']} rank(s)"
    return json.dumps(rec)

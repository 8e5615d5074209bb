"""Results as JSON lines: one record per display step, per test, and a final summary."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import TextIO


class ResultsWriter:
    """Rank 0 writes records to a file (JSON lines) and a readable line to the terminal.

    On a terminal, rank 0 also shows a progress bar (rich) with the loss and rate; on a
    pipe or a batch job's output file it prints only the plain lines, which read well
    in a log and can be grepped.

    HPCDL_PROGRESS: `plain` (never a bar), `bar` (a bar when this process's stdout is a
    terminal) or unset (`auto`: a bar only at a terminal outside any job or launcher). Under
    mpirun a rank's stdout is a pseudo-terminal even when the job's output is a file, so
    inside a job only the job script decides: it sets `bar` when its own stdout is a terminal.
    """

    def __init__(self, path: str | None, enabled: bool, stream: TextIO | None = None, progress: bool | None = None):
        self.enabled = enabled
        self.stream = stream or sys.stdout
        self.file = None
        if enabled and path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self.file = open(path, "a", buffering=1)
        if progress is None:
            progress = enabled and _is_terminal(self.stream) and _wants_bar(os.environ)
        self.show_progress = progress
        self._progress = None
        self._task = None

    def record(self, event: str, **fields) -> None:
        if not self.enabled:
            return
        rec = {"event": event, "time": round(time.time(), 3), **fields}
        if self.file:
            self.file.write(json.dumps(rec, default=str) + "\n")
        line = _describe(rec)
        if self._progress is not None:  # above the bar, never wrapped into two lines by rich
            self._progress.console.print(line, markup=False, highlight=False, soft_wrap=True)
        else:
            print(line, file=self.stream, flush=True)

    def begin_progress(self, start: int, total: int) -> None:
        if not (self.enabled and self.show_progress):
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        # narrow enough for an 80-column terminal, so the bar is redrawn in place, not wrapped
        self._progress = Progress(
            TextColumn("training"), BarColumn(bar_width=20), MofNCompleteColumn(), TimeRemainingColumn(),
            TextColumn("{task.fields[info]}"), console=Console(file=self.stream), transient=True, expand=False,
        )
        self._progress.start()
        self._task = self._progress.add_task("train", total=total, completed=start, info="")

    def advance(self, done: int, loss: float, lr: float) -> None:
        if self._progress is not None:
            # no loss is known before the first display step: show none rather than `nan`
            measured = loss is not None and loss == loss
            info = (f"loss {loss:.4f}  " if measured else "") + f"lr {lr:.3g}"
            self._progress.update(self._task, completed=done, info=info)

    def end_progress(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def close(self) -> None:
        self.end_progress()
        if self.file:
            self.file.close()


# set by a launcher for every rank it starts (Open MPI, MPICH/PMI, PMIx, Slurm's srun)
LAUNCHER_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_PROCID")


def _wants_bar(environ) -> bool:
    mode = environ.get("HPCDL_PROGRESS", "auto") or "auto"
    if mode == "bar":
        return True
    if mode != "auto":
        return False
    # inside a job script or under a launcher the stdout seen here may be a launcher's pty
    return "HPCDL_JOB_DIR" not in environ and not any(v in environ for v in LAUNCHER_VARIABLES)


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


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
    if e == "resume":
        return f"resuming at iteration {rec['iter']} from {rec['snapshot']} (lr {rec['lr']:.3g})"
    if e == "snapshot":
        return f"iter {rec['iter']:>6}  snapshot {rec['path']}"
    if e == "preempted":
        return f"iter {rec['iter']:>6}  stopped on signal {rec['signal']} after writing {rec['snapshot']}; requeue to resume"
    if e == "start":
        return f"training {rec['net']} ({rec['parameters']:,} parameters) on {rec['data']} with {rec['ranks']} rank(s)"
    return json.dumps(rec)

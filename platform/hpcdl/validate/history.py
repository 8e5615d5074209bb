"""Every validation run kept per site, so a report can show each measurement's trend.

    $HPCDL_HISTORY (default ~/.local/share/hpcdl/history)
      <site>/<node kind>/<start time>/results.jsonl   a copy of each run's results
      perflogs/<site>/<node kind>/<class>.log         one line appended per ReFrame test case and run,
                                                      in the ReFrame perflog format (hpcdl.validate.reframe)

`hpcdl validate` adds each run here (`--no-history` leaves it out) and its report draws the
trend of every judged value over the site's last runs.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from hpcdl.files import write_atomically

KEEP_IN_TREND = 20  # the report's trend plots show at most this many earlier runs


def history_root() -> Path:
    return Path(os.environ.get("HPCDL_HISTORY") or "~/.local/share/hpcdl/history").expanduser()


def _stamp(started: str) -> str:
    return re.sub(r"[^0-9A-Za-z+-]", "", started.replace(":", "")) or "run"


def keep_run(site: str, node_kind: str, started: str, results: Path, root: Path | None = None) -> Path:
    """Copy a run's results.jsonl into the history; a second run with the same start time gets a suffix."""
    root = root or history_root()
    folder = root / site / node_kind / _stamp(started)
    n = 1
    while (folder / "results.jsonl").exists():
        n += 1
        folder = root / site / node_kind / f"{_stamp(started)}-{n}"
    folder.mkdir(parents=True, exist_ok=True)
    write_atomically(folder / "results.jsonl", Path(results).read_text(), mode=0o644)
    # the job folders stay with the run's own output; the copy says where they were
    write_atomically(folder / "origin", f"{Path(results).resolve().parent}\n", mode=0o644)
    return folder / "results.jsonl"


def earlier_runs(site: str, node_kind: str, exclude: Path | None = None, root: Path | None = None,
                 last: int = KEEP_IN_TREND) -> list[Path]:
    """The site's kept runs for this node kind, oldest first (at most `last`)."""
    root = root or history_root()
    folder = root / site / node_kind
    if not folder.is_dir():
        return []
    runs = sorted(p for p in folder.glob("*/results.jsonl"))
    if exclude is not None:
        runs = [p for p in runs if p.resolve() != Path(exclude).resolve()]
    return runs[-last:]


def forget(site: str, root: Path | None = None) -> None:
    shutil.rmtree((root or history_root()) / site, ignore_errors=True)

"""Trainer output (issue 16): a progress bar only for a person at a terminal, redrawn in place,
never `loss nan`; plain lines, without escape codes, in every file and pipe."""

from __future__ import annotations

import io
import math

import pytest

from hpcdl.train.results import ResultsWriter, _wants_bar


class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("environ, bar", [
    ({}, True),  # a person ran `hpcdl train` at a terminal
    ({"HPCDL_PROGRESS": "plain"}, False),
    ({"HPCDL_JOB_DIR": "/j"}, False),  # inside a job script that did not say its output is a terminal
    ({"OMPI_COMM_WORLD_SIZE": "2"}, False),  # mpirun's pty, whatever the final output is
    ({"SLURM_PROCID": "0"}, False),
    ({"HPCDL_JOB_DIR": "/j", "OMPI_COMM_WORLD_SIZE": "2", "HPCDL_PROGRESS": "bar"}, True),  # the job script saw a terminal
])
def test_who_gets_a_bar(environ, bar):
    assert _wants_bar(environ) is bar


def test_a_pipe_never_gets_escape_codes(monkeypatch):
    monkeypatch.setenv("HPCDL_PROGRESS", "bar")
    pipe = io.StringIO()
    writer = ResultsWriter(None, enabled=True, stream=pipe)
    writer.begin_progress(0, 10)
    writer.advance(1, math.nan, 0.01)
    writer.record("step", iter=1, epoch=0.1, loss=2.3, loss_window=2.3, lr=0.01,
                  images_per_sec_rank=829.5, images_per_sec_total=1659.0)
    writer.close()
    assert "\x1b" not in pipe.getvalue() and pipe.getvalue().count("\n") == 1


def test_the_bar_shows_no_loss_before_the_first_display_step_and_fits_80_columns(monkeypatch):
    monkeypatch.delenv("HPCDL_JOB_DIR", raising=False)
    monkeypatch.setenv("COLUMNS", "80")
    for name in ("HPCDL_PROGRESS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)
    term = Terminal()
    writer = ResultsWriter(None, enabled=True, stream=term)
    assert writer.show_progress
    writer.begin_progress(0, 500)
    writer.advance(1, math.nan, 0.01)
    writer._progress.refresh()
    shown = term.getvalue()
    assert "lr 0.01" in shown and "nan" not in shown
    writer.advance(20, 1.2345, 0.01)
    writer._progress.refresh()
    assert "loss 1.2345" in term.getvalue()
    writer.close()
    import re

    lines = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", term.getvalue()).replace("\r", "\n").splitlines()
    assert max(len(line) for line in lines) <= 80

"""A newcomer's frictions (issue 28): each test fails on the code before its fix."""

from __future__ import annotations

import re

import pytest

from conftest import RECIPES, hpcdl


def one_error_line(proc) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("hpcdl: error: "), proc.stderr
    return lines[0]


# --- item 9: a refusal recommends only what the same verb accepts ----------------------------------

@pytest.mark.parametrize("verb", ["plan", "render", "submit"])
def test_the_tensorflow_horovod_refusal_advises_only_a_dist_the_same_verb_takes(verb, tmp_path):
    args = [verb, "-s", "local", "-f", "tensorflow"]
    if verb != "plan":
        args.append(RECIPES / "digits-quick.yaml")
    if verb == "submit":
        args += ["--dry-run", "-o", tmp_path / "job"]
    message = one_error_line(hpcdl(*args, "--dist", "horovod"))
    advised = re.findall(r"--dist[ =](\w+)", message)
    assert advised, message  # it says what to use instead
    for value in advised:
        if verb == "submit":
            args[-1] = tmp_path / f"job-{value}"
        proc = hpcdl(*args, "--dist", value)
        assert proc.returncode == 0, (message, proc.stderr)

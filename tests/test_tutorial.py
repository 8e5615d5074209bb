"""docs/tutorial.md, run as written: every ```bash block, in order, in one bash under the real Lmod.

What staff would have done before (install hpcdl, render its modules, put them on MODULEPATH)
is done here first: the modules are rendered for site `local` with this interpreter's prefix,
so `module load hpcdl` puts this environment's `hpcdl` on PATH.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, hpcdl, require_tool

TUTORIAL = ROOT / "docs" / "tutorial.md"
LMOD_INIT = "/usr/share/lmod/lmod/init/bash"

pytestmark = pytest.mark.slow


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M)


def test_the_tutorial_has_commands_and_points_only_inside_the_repository():
    text = TUTORIAL.read_text()
    blocks = bash_blocks(text)
    assert blocks and blocks[0].splitlines()[0] == "module load hpcdl"
    assert any("hpcdl report" in b for b in blocks)
    for target in re.findall(r"\]\(([^)#]+)", text):
        assert not target.startswith(("..", "/")) and (TUTORIAL.parent / target).exists(), target


def test_every_command_of_the_tutorial_runs(tmp_path):
    if not Path(LMOD_INIT).exists():
        require_tool("lmod")
    prefix = Path(sys.executable).parent.parent  # the environment hpcdl is installed in
    modules = tmp_path / "modulefiles"
    hpcdl("modulefiles", "render", "--site", "local", "--prefix", prefix, "-o", modules, check=True)
    work = tmp_path / "work"
    work.mkdir()
    script = "\n".join(["set -euo pipefail", f"source {LMOD_INIT}", f"module use {modules / 'local'}",
                        *(f"echo '+++ block {i}'\n{b}" for i, b in enumerate(bash_blocks(TUTORIAL.read_text())))])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LMOD", "_ModuleTable", "MODULEPATH", "LOADEDMOD"))}
    # the checkout's code wins in the jobs, as everywhere in the tests
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "platform"), os.environ.get("PYTHONPATH")) if p)
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"  # hpcdl comes from `module load hpcdl`, nothing else
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=work, env=env, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-4000:]
    # what the page says the commands leave behind
    assert (work / "first-job.sh").read_text().startswith("#!/bin/bash")
    final = [json.loads(line) for line in (work / "runs" / "first" / "results.jsonl").read_text().splitlines()][-1]
    assert final["event"] == "final" and final["iter"] == 40
    # the page says what good output is after 40 iterations: loss near ln 10, accuracy near chance
    assert 0.0 < final["accuracy"] < 0.3, final
    for path in ("first-validation/results.jsonl", "first-validation/report/index.html",
                 "first-report/index.html", "first-report/summary.json"):
        assert (work / path).is_file(), path
    assert any((work / "first-validation" / "perflogs").rglob("*.log"))
    summary = json.loads((work / "first-report" / "summary.json").read_text())
    assert {v["check"] for v in summary["verdicts"]} == {"environment"} and summary["passed"]

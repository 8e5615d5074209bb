"""A job script runs the image the site's framework modules run: they never disagree."""

from __future__ import annotations

import subprocess

import pytest

from conftest import RECIPES, hpcdl
from hpcdl.modules import site_modules
from hpcdl.sites import load_site


@pytest.mark.parametrize("site", ["perlmutter", "volta-x86"])
def test_the_job_script_runs_the_image_of_the_sites_pytorch_module(site, tmp_path):
    prefix = "/sw/hpcdl"
    module_image = next(fm.image for fm in site_modules(load_site(site), prefix).frameworks
                        if fm.module.name == "pytorch")
    script = tmp_path / "job.sh"
    hpcdl("render", "--site", site, RECIPES / "digits-quick.yaml", "-o", script, check=True)
    launch = next(line for line in script.read_text().splitlines() if "hpcdl train recipe.json" in line)
    # what the launch line's words are once the hpcdl module has set HPCDL_IMAGE_DIR
    words = subprocess.run(
        ["bash", "-c", f"set -- {launch.rstrip(' &')}; printf '%s\\n' \"$@\""],
        capture_output=True, text=True, check=True,
        env={"HPCDL_IMAGE_DIR": f"{prefix}/images", "USER": "alice", "SCRATCH": "/scratch/alice", "PATH": "/usr/bin:/bin"},
    ).stdout.splitlines()
    assert module_image in words, (module_image, words)


def test_without_the_hpcdl_module_the_job_stops_with_a_message_naming_it(tmp_path):
    script = tmp_path / "job.sh"
    hpcdl("render", "--site", "volta-x86", RECIPES / "digits-quick.yaml", "-o", script, check=True)
    check = next(line for line in script.read_text().splitlines() if "HPCDL_IMAGE_DIR:?" in line)
    proc = subprocess.run(["bash", "-c", f"set -u; {check}"], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode != 0
    assert "module load hpcdl" in proc.stderr

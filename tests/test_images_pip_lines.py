"""Every definition read back as Apptainer (spython's Singularity parser) and podman (its Dockerfile
parser) would read it: each %post / RUN body is shell `bash -n` accepts, and each `pip install` on
it installs requirement specifiers pip accepts (packaging's PEP 508 parser, which pip vendors).

The glued line this guards against (two `pip install` commands on one line, from a `{% endfor %}`
whose newline trim_blocks ate) is valid shell, so only the second check sees it; the last test
renders that broken template once on purpose and watches the check fail.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import jinja2
import pytest
from spython.main.parse.parsers import DockerParser, SingularityParser

from conftest import require_tool
from hpcdl.images import generate
from hpcdl.images.generate import output_paths, render
from hpcdl.images.pipline import definition_problems, pip_installs
from hpcdl.images.spec import load_images

SPECS = load_images()
NAMES = sorted(SPECS)


def _recipe(path, fmt):
    parser = SingularityParser if fmt == "singularity" else DockerParser
    return parser(str(path)).recipe["spython-base"]


def _bash_n(script: str) -> str:
    bash = require_tool("bash")
    proc = subprocess.run([bash, "-n"], input=script, capture_output=True, text=True)
    return proc.stderr if proc.returncode else ""


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("fmt", ["singularity", "docker"])
def test_every_install_line_is_shell_and_every_pip_argument_a_requirement(name, fmt):
    recipe = _recipe(output_paths(name)[fmt], fmt)
    assert recipe.install, f"{name} {fmt}: spython found no %post/RUN"
    assert _bash_n("\n".join(recipe.install)) == ""
    if fmt == "singularity" and recipe.test:
        assert _bash_n(recipe.test) == ""
    assert definition_problems(recipe.install) == []


@pytest.mark.parametrize("name", NAMES)
def test_each_environment_gets_hpcdls_requirements_in_one_pip_install_of_its_own(name):
    """The deps step: one command per environment, through that environment's own pip, with the
    environment's pins and hpcdl's requirements (so the second venv is not left without them)."""
    spec = SPECS[name]
    commands = pip_installs("\n".join(_recipe(output_paths(name)["singularity"], "singularity").install))
    for env_name, env in spec.environments.items():
        deps = [c for c in commands if c.environment == env_name and any(r.startswith("typer") for r in c.requirements)]
        assert len(deps) == 1, f"{name}: environment {env_name} has {len(deps)} pip install lines with hpcdl's requirements"
        assert set(env.pip_requirements()) <= set(deps[0].requirements)


GLUED = "{{ pip }} install {{ options }}{% for req in requirements %} {{ req | q }}{% endfor %}\n"


def test_a_glued_pip_line_fails_the_check(monkeypatch):
    """The template as it was before the fix, rendered for a two-environment image: the check
    names the glued argument; the shipped template passes the same check."""
    loader = jinja2.PackageLoader("hpcdl.images", "templates")
    source = loader.get_source(generate._templates, "environments.sh.j2")[0]
    lines = source.splitlines(keepends=True)
    deps = next(i for i, line in enumerate(lines) if line.startswith("{{ pip }} install {{ options }} {{ requirements"))
    broken = "".join(lines[:deps] + [GLUED] + lines[deps + 1:])
    env = generate._templates.overlay(loader=jinja2.ChoiceLoader(
        [jinja2.DictLoader({"environments.sh.j2": broken}), loader]))
    spec = SPECS["volta-cuda"]
    assert len(spec.environments) == 2
    good = render(spec, "singularity")
    monkeypatch.setattr(generate, "_templates", env)
    bad = render(spec, "singularity")
    assert bad != good

    def problems(text, tmp):
        tmp.write_text(text)
        return definition_problems(_recipe(tmp, "singularity").install)

    with tempfile.TemporaryDirectory() as folder:
        found = problems(bad, Path(folder) / "bad.def")
        assert found and "/opt/envs/tensorflow/bin/pip' is not a requirement pip accepts" in found[0]
        assert _bash_n("\n".join(_recipe(Path(folder) / "bad.def", "singularity").install)) == ""  # bash -n alone misses it
        assert problems(good, Path(folder) / "good.def") == []

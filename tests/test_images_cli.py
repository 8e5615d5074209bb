"""`hpcdl images` as a centre's staff meet it from a plain install (issue 28, staff items 1-4 and 7)."""

from __future__ import annotations

import json

from conftest import ROOT, hpcdl
from hpcdl.images import generate
from hpcdl.images.spec import load_images

SPECS = load_images()


def test_without_hpccm_render_says_in_one_line_what_to_install(tmp_path):
    """A plain `pip install hpcdl` has no hpccm (it is the containers extra): one line, exit 2,
    nothing written, instead of a 30-line traceback."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "hpccm.py").write_text('raise ModuleNotFoundError("No module named \'hpccm\'", name="hpccm")\n')
    out = tmp_path / "out"
    env = {"PYTHONPATH": f"{shim}:{ROOT / 'platform'}"}
    for verb in (["render", "-o", str(out)], ["build", "local-cpu"]):
        proc = hpcdl("images", *verb, env=env, cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "pip install 'hpcdl[containers]'" in lines[0], proc.stderr
    assert not out.exists()
    assert "hpcdl[containers]" in " ".join(hpcdl("images", "render", "--help", env={"COLUMNS": "200"}).stdout.split())


def test_outside_a_checkout_render_needs_an_output_folder(tmp_path):
    """Not the folder beside the installed package (<venv>/lib/python3.11/containers)."""
    for extra in ([], ["--check"]):
        proc = hpcdl("images", "render", "local-cpu", *extra, cwd=tmp_path)
        assert proc.returncode == 2
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "-o/--out" in lines[0], proc.stderr
    assert list(tmp_path.iterdir()) == []
    out = tmp_path / "defs"
    out.mkdir()
    hpcdl("images", "render", "local-cpu", "-o", out, cwd=tmp_path, check=True)
    (out / "local-cpu.def").write_text("stale\n")
    proc = hpcdl("images", "render", "local-cpu", "--check", "-o", out, cwd=tmp_path)
    assert proc.returncode == 1 and f"hpcdl images render -o {out}" in proc.stderr and "make containers" not in proc.stderr


def test_an_install_renders_the_same_bytes_as_the_checkout(monkeypatch, tmp_path):
    """Without pyproject.toml beside it, hpcdl's requirements come from its installed metadata,
    in another order and spelling ('pydantic<3,>=2.5'); the definitions must not change."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    spelt = [r.replace("pydantic>=2.5,<3", "pydantic<3,>=2.5") for r in reversed(project["dependencies"])]
    # an install lists each extra's requirements with its marker; the image takes IMAGE_EXTRAS' too
    extras = [f'{r}; extra == "{e}"' for e, reqs in project["optional-dependencies"].items() for r in reqs]
    metadata = spelt + extras
    monkeypatch.setattr(generate, "CONTAINERS", tmp_path / "lib" / "containers")  # no pyproject.toml there
    monkeypatch.setattr("importlib.metadata.requires", lambda name: metadata)
    for name in ("volta-cuda", "local-cpu"):
        for fmt, path in generate.output_paths(name, ROOT / "containers").items():
            assert generate.render(SPECS[name], fmt) == path.read_text(), f"{path} differs when rendered from an install"


def test_compat_gives_one_reason_per_line_and_json():
    proc = hpcdl("images", "compat", "volta-cuda", "--site", "frontier")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("volta-cuda: the image") for line in lines), lines
    assert all(len(line) < 300 for line in lines)
    proc = hpcdl("images", "compat", "ampere-cuda", "mi250x-rocm", "--site", "frontier", "--json")
    assert proc.returncode == 1
    rows = {r["image"]: r for r in json.loads(proc.stdout)}
    assert rows["mi250x-rocm"]["ok"] and rows["mi250x-rocm"]["reasons"] == [] and rows["mi250x-rocm"]["node_kind"] == "mi250x"
    assert not rows["ampere-cuda"]["ok"] and "AMD GPUs" in rows["ampere-cuda"]["reasons"][0]
    proc = hpcdl("images", "compat", "ampere-cuda", "--site", "perlmutter", "--node-kind", "cpu")
    assert proc.returncode == 1 and "has none" in proc.stderr


def test_images_list_columns_line_up():
    lines = hpcdl("images", "list", check=True).stdout.splitlines()
    assert len(lines) == len(SPECS)
    # each column starts at the same place on every line: where the MPI column begins
    starts = {line.index(f"{SPECS[line.split()[0]].mpi.flavour} {SPECS[line.split()[0]].mpi.version} (") for line in lines}
    assert len(starts) == 1, starts
    gpu_starts = {line.index("CPU") if " CPU " in line else line.index("CUDA") if "CUDA" in line else line.index("ROCm")
                  for line in lines}
    assert len(gpu_starts) == 1, gpu_starts


def test_images_check_help_lists_its_options_and_its_errors_name_the_verb():
    out = hpcdl("images", "check", "--help", env={"COLUMNS": "200"}, check=True).stdout
    for option in ("--image", "--images-yaml", "--environment", "--mode", "--json"):
        assert option in out, option
    proc = hpcdl("images", "check", "--bogus")
    assert proc.returncode == 2 and "hpcdl images check" in proc.stderr and "python -m" not in proc.stderr
    proc = hpcdl("images", "check", "--image", "local-cpu", "--environment", "nope")
    assert proc.returncode == 2 and "python -m" not in proc.stderr and "--environment 'nope'" in proc.stderr

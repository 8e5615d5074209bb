"""The local image, built for real with Charliecloud and run under the real local Slurm.

`hpcdl images build local-cpu` makes the image the same generator writes for the centres
(debian:12 from mmdebstrap, Debian's Open MPI 4.1, torch 2.13.0+cpu from the machine's wheel
folder, hpcdl itself) and converts it to SquashFS. The build is cached outside the checkout
($HPCDL_IMAGE_CACHE, default /var/cache/hpcdl/images) by a hash of recipe and inputs, so only
the first run on a machine, or one after the recipe changed, pays for it (docs/images.md has
the times). Then, inside the image with ch-run:
  - the image check (what %test runs) passes;
  - cifar10_quick trains with 2 ranks on the 2 pretend Slurm nodes n1, n2, started by the
    host's `srun --mpi=pmix`, and its loss records equal those of the same job outside;
  - 2 MPI ranks, one per pretend node, allreduce through the image's Open MPI started by the
    host's srun over PMIx.
The whole quick validation suite runs inside the same image in tests/test_validate_slurm.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
import yaml

from conftest import FIXTURE_SITES, hpcdl, require_tool

pytestmark = [pytest.mark.slow, pytest.mark.slurm]


@pytest.fixture(scope="module")
def image(local_image):
    """conftest's session-wide build, which test_validate_slurm runs the quick suite in too."""
    return local_image


def test_the_build_is_cached_and_recorded(image):
    from hpcdl.images.build import build, cache_dir
    from hpcdl.images.spec import load_image

    built, _ = image
    assert built.path.startswith(str(cache_dir())) and built.path.endswith(".sqfs")
    record = json.loads(open(built.record).read())
    assert record["key"] == built.key and record["builder"] == "charliecloud"
    assert record["HPCDL_REVISION"] != "unknown"
    again = build(load_image("local-cpu"), "charliecloud", log=lambda _: None)
    assert again.cached and again.path == built.path


def test_the_image_check_passes_inside_the_image(image):
    from hpcdl.images.build import run_check
    from hpcdl.images.spec import load_image

    built, _ = image
    out = run_check(built.path, load_image("local-cpu"), log=lambda _: None).stdout
    assert "image check: local-cpu [main, image mode]" in out
    assert "horovod build" in out and "MPI" in next(l for l in out.splitlines() if "horovod build" in l)
    for check in ("torch", "torch oneDNN", "horovod build", "mpi allreduce"):
        line = next(l for l in out.splitlines() if l.strip().startswith(check + " "))
        assert "passed" in line, out


def test_labels_and_the_start_up_line(image):
    from hpcdl import __version__
    from hpcdl.images.build import ch_run_argv

    built, _ = image
    proc = subprocess.run([*ch_run_argv(built.path), "/bin/sh", "-c", "cat /ch/metadata.json; cat /opt/hpcdl/banner"],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "USER": "root"})
    assert proc.returncode == 0, proc.stderr
    text, banner = proc.stdout.rsplit("}", 1)
    metadata = json.loads(text + "}")
    assert f"hpcdl {__version__}" in banner and "PyTorch 2.13.0+cpu" in banner and "Open MPI 4.1" in banner
    assert "CUDA none" in banner
    # the build arguments behind the OCI labels reached the build, and the record keeps them
    record = json.loads(open(built.record).read())
    for name in ("HPCDL_CREATED", "HPCDL_REVISION", "HPCDL_SOURCE"):
        assert metadata["arg"][name] == record[name] and record[name] not in ("", "unknown")
    labels = metadata.get("labels") or {}
    if labels:  # Charliecloud >= 0.32 keeps LABEL; 0.31 ignores it (charliecloud issue #781)
        assert labels["org.hpcdl.image"] == "local-cpu" and labels["org.hpcdl.hpcdl"] == __version__
        assert labels["org.opencontainers.image.revision"] == record["HPCDL_REVISION"]
    else:
        log = open(built.record.replace(".json", ".log"), errors="replace").read()
        assert "not yet supported, ignored: issue #781: LABEL instruction" in log


def _charliecloud_site(folder):
    """The test cluster's profile with Charliecloud as its runtime (everything else the same)."""
    text = (FIXTURE_SITES / "ci-slurm.yaml").read_text()
    text = text.replace("runtime: none", "runtime: charliecloud").replace("name: ci-slurm", "name: ci-slurm-charliecloud")
    # ch-run binds the node-local folder, which exists on a real node (a missing bind source is an error)
    node_local = folder / "node-local"
    node_local.mkdir()
    assert "node_local: /tmp/hpcdl-ci-node-local" in text
    text = text.replace("node_local: /tmp/hpcdl-ci-node-local", f"node_local: {node_local}")
    sites = folder / "sites"
    sites.mkdir()
    (sites / "ci-slurm-charliecloud.yaml").write_text(text)
    return sites


def _train(cluster, tmp_path, site, recipe, name, image=None):
    job_dir = tmp_path / name
    args = ["submit", "--site", site, "--out", job_dir, recipe, "--nodes", "2", "--ranks-per-node", "1"]
    if image:
        args += ["--image", image]
    proc = hpcdl(*args, cwd=tmp_path, env={"SLURM_CONF": str(cluster.conf), "USER": os.environ.get("USER", "root")},
                 timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job_id = proc.stdout.split()[-1]
    from hpcdl.executors import executor_for

    slurm = executor_for("slurm")
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        state = slurm.status(job_id)
        if state.finished:
            break
        time.sleep(1)
    output = slurm.output(job_id).read_text(errors="replace") if slurm.output(job_id).exists() else ""
    assert state.state == "COMPLETED", f"{name}: {state}\n{output[-4000:]}"
    records = [json.loads(line) for line in (job_dir / "results.jsonl").read_text().splitlines()]
    return records, (job_dir / "job.sh").read_text(), output


def test_cifar10_quick_trains_on_two_pretend_nodes_inside_the_image_as_outside(image, slurm_clusters, tmp_path,
                                                                                 monkeypatch):
    built, _ = image
    cluster = slurm_clusters.ensure(2)
    sites = _charliecloud_site(tmp_path)
    monkeypatch.setenv("HPCDL_SITE_PATH", f"{sites}{os.pathsep}{FIXTURE_SITES}")
    monkeypatch.setenv("HPCDL_LOCAL_JOBS", str(tmp_path / "local-jobs"))
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    monkeypatch.setenv("USER", os.environ.get("USER", "root"))
    recipe = tmp_path / "quick.yaml"
    recipe.write_text(yaml.safe_dump({
        "name": "quick", "net": "cifar10_quick", "data": {"source": "digits", "image_size": 32},
        "batch_size": 16, "base_lr": 0.01, "momentum": 0.9, "weight_decay": 0.004, "max_iter": 20, "display": 1,
        "random_seed": 1,
    }))
    inside, script, output = _train(cluster, tmp_path, "ci-slurm-charliecloud", recipe, "inside", image=built.path)
    assert "ch-run --set-env" in script and built.path in script and "--mpi=pmix" in script
    outside, script_out, _ = _train(cluster, tmp_path, "ci-slurm", recipe, "outside")
    assert "ch-run" not in script_out

    final = inside[-1]
    assert final["event"] == "final" and final["ranks"] == 2 and final["nodes"] == 2, final
    steps_in = [(r["iter"], r["loss"]) for r in inside if r["event"] == "step"]
    steps_out = [(r["iter"], r["loss"]) for r in outside if r["event"] == "step"]
    assert len(steps_in) == 20 and steps_in == steps_out


def test_mpi_ranks_inside_the_image_are_started_by_the_hosts_srun_across_the_pretend_nodes(image, slurm_clusters):
    from hpcdl.images.build import ch_run_argv

    built, _ = image
    cluster = slurm_clusters.ensure(2)
    program = ("from mpi4py import MPI; import socket, os; c = MPI.COMM_WORLD; "
               "s = c.allreduce(c.Get_rank() + 1); "
               "print('rank', c.Get_rank(), 'of', c.Get_size(), 'node', os.environ.get('SLURMD_NODENAME'), 'sum', s, "
               "MPI.Get_library_version().split(',')[0], flush=True)")
    argv = ["srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--mpi=pmix",
            *ch_run_argv(built.path), "python", "-c", program]
    env = {**cluster.env, "USER": os.environ.get("USER", "root"), "OMPI_MCA_btl": "self,tcp"}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = sorted(l for l in proc.stdout.splitlines() if l.startswith("rank "))
    assert len(lines) == 2, proc.stdout + proc.stderr
    assert all(" of 2 " in l and " sum 3 " in l and "Open MPI v4.1" in l for l in lines), lines
    assert {l.split()[5] for l in lines} == {"n1", "n2"}


def test_the_labels_are_in_the_image_where_apptainer_keeps_them(image):
    """Charliecloud 0.31 drops LABEL; the Dockerfile's labels step writes every label, the
    per-build OCI ones included, to /.singularity.d/labels.json, and the image check shows them."""
    from hpcdl import __version__
    from hpcdl.images.build import ch_run_argv, run_check
    from hpcdl.images.spec import load_image

    built, _ = image
    proc = subprocess.run([*ch_run_argv(built.path), "cat", "/.singularity.d/labels.json"], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "USER": os.environ.get("USER", "root")})
    assert proc.returncode == 0, proc.stderr
    labels = json.loads(proc.stdout)
    record = json.loads(open(built.record).read())
    assert labels["org.hpcdl.image"] == "local-cpu" and labels["org.hpcdl.hpcdl"] == __version__
    assert labels["org.opencontainers.image.version"] == __version__
    assert labels["org.opencontainers.image.created"] == record["HPCDL_CREATED"]
    assert labels["org.opencontainers.image.revision"] == record["HPCDL_REVISION"]
    assert labels["org.opencontainers.image.source"] == record["HPCDL_SOURCE"]
    out = run_check(built.path, load_image("local-cpu"), log=lambda _: None).stdout
    line = next(l for l in out.splitlines() if l.strip().startswith("labels "))
    assert "passed" in line and record["HPCDL_REVISION"] in line, out


def test_the_squashfs_image_wraps_into_a_sif_with_the_layout_siftool_lists(image, tmp_path):
    require_tool("siftool")
    from hpcdl.images.build import write_sif
    from hpcdl.images.spec import load_image

    built, _ = image
    sif = write_sif(built.path, load_image("local-cpu"), tmp_path / "local-cpu.sif", log=lambda _: None)
    try:
        listed = subprocess.run(["siftool", "list", str(sif)], capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0, listed.stderr
        rows = [l for l in listed.stdout.splitlines() if l[:1].isdigit()]
        assert len(rows) == 2, listed.stdout
        assert "Def.FILE" in rows[0] and "FS (Squashfs/*System/amd64)" in rows[1], listed.stdout
        # the primary partition is the SquashFS image, byte for byte where siftool says it lies
        info = subprocess.run(["siftool", "info", "2", str(sif)], capture_output=True, text=True, timeout=60).stdout
        fields = {k.strip(): v.strip() for k, _, v in (l.partition(":") for l in info.splitlines())}
        assert int(fields["Size"]) == os.path.getsize(built.path), info
        with open(sif, "rb") as f, open(built.path, "rb") as g:
            f.seek(int(fields["Offset"]))
            assert f.read(1 << 20) == g.read(1 << 20)
        # laid out as apptainer build writes it (object group 1, launch line), and the tree holds
        # what Apptainer reads at run time, so `apptainer exec IMAGE hpcdl` finds hpcdl
        from hpcdl.images.sif import read_sif, sif_problems

        assert sif_problems(read_sif(sif), "x86_64") == []
        tree = subprocess.run([require_tool("unsquashfs"), "-l", str(built.path)], capture_output=True, text=True,
                              timeout=300).stdout
        for path in ("/.singularity.d/env/90-environment.sh", "/.singularity.d/runscript", "/.singularity.d/labels.json"):
            assert f"squashfs-root{path}" in tree, path
    finally:
        sif.unlink(missing_ok=True)

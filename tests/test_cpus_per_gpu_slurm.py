"""A header that asks a GPU's CPUs with it (`defaults.cpu_request: cpus-per-gpu`), judged by a real Slurm.

Birmingham's Baskerville hands a node's CPUs out with its GPUs ("Leave --cpus-per-gpu=36. Resources such as CPUs
and Memory are allocated per GPU", github.com/baskerville-hpc/basicSlurmScripts). sbatch takes not both
--cpus-per-gpu and --cpus-per-task ("--cpus-per-gpu is mutually exclusive with --cpus-per-task"), so the header names
the first alone, while srun still names each task's CPUs: the job hands the step SLURM_CPUS_PER_GPU, and srun's own
--cpus-per-task must win over it for every task to get its GPU's CPUs. A slurmd posing two of the site's nodes says
whether all of that holds.
"""

from __future__ import annotations

import re
import subprocess
import time

from hpcdl.cluster import NodeShape
from hpcdl.plan import JobRequest, make_plan
from hpcdl.render.jobscript import JobOptions, render_job_script
from hpcdl.sites import load_site


def test_slurm_allocates_the_cpus_asked_per_gpu_and_each_task_gets_its_gpus_share(slurm_clusters, tmp_path):
    site = load_site("baskerville")
    shape = NodeShape.from_site(site, "a100-40")
    cluster = slurm_clusters.ensure(2, shape)
    plan = make_plan(site, JobRequest(nodes=2))
    header = [line for line in render_job_script(site, plan, {}, JobOptions()).splitlines()
              if line.startswith("#SBATCH ") and not line.startswith("#SBATCH --output")]
    assert "#SBATCH --cpus-per-gpu=36" in header and not [h for h in header if "--cpus-per-task" in h]
    script = tmp_path / "job.sh"
    script.write_text("\n".join([
        "#!/bin/bash", *header, f"#SBATCH --partition={shape.partition}", f"#SBATCH --output={tmp_path}/job.out",
        " ".join(plan.launcher_argv) + " bash -c 'echo TASK $SLURM_PROCID $SLURM_CPUS_PER_TASK'", ""]))

    # the header as rendered can be allocated: the eight GPUs' 36 CPUs each, every CPU of both nodes
    proc = cluster.sbatch("--test-only", script, cwd=tmp_path)
    assert proc.returncode == 0 and "using 288 processors" in proc.stderr, proc.stderr
    # ... and one CPU a GPU more is not: the option counts
    greedy = tmp_path / "greedy.sh"
    greedy.write_text(re.sub(r"(?m)^#SBATCH --cpus-per-gpu=36$", "#SBATCH --cpus-per-gpu=37", script.read_text()))
    proc = cluster.sbatch("--test-only", greedy, cwd=tmp_path)
    assert proc.returncode != 0 and "Requested node configuration is not available" in proc.stderr, proc.stderr

    # the step's --cpus-per-task wins over the job's SLURM_CPUS_PER_GPU: each of the eight tasks gets 36 CPUs
    proc = cluster.sbatch("--parsable", script, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 120
    while subprocess.run(["squeue", "-h", "-j", job_id], capture_output=True, text=True,
                         env=cluster.env).stdout.strip():
        assert time.monotonic() < deadline, f"job {job_id} still queued or running"
        time.sleep(0.2)
    out = (tmp_path / "job.out").read_text() if (tmp_path / "job.out").exists() else "(no output)"
    tasks = sorted(line.split()[1:] for line in out.splitlines() if line.startswith("TASK "))
    assert tasks == sorted([str(rank), "36"] for rank in range(8)), out

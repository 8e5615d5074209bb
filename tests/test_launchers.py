"""Each launcher turns the same plan into the launch line its centre documents."""

from __future__ import annotations


from hpcdl.launchers import launcher_for, launchers
from hpcdl.plan import JobRequest, make_plan
from hpcdl.sites import load_site


def _plan(site: str, **request):
    s = load_site(site)
    return s, make_plan(s, JobRequest(**request))


def test_every_launcher_a_profile_can_name_is_registered():
    assert set(launchers.names()) == {"srun", "jsrun", "ibrun", "mpirun", "mpiexec", "pals", "aprun", "local"}


def test_aprun_on_knl_is_n_N_d_with_one_hardware_thread_per_core():
    site, plan = _plan("cori-knl", nodes=4, ranks_per_node=4)
    argv = launcher_for("aprun").command(plan, site)
    # ALCF Theta's CosmoFlow line has the same shape: aprun -n 4N -N 4 -d 32 -j 2 -cc depth
    assert argv == ["aprun", "-n", "16", "-N", "4", "-d", "16", "-j", "1", "-cc", "depth"]


def test_mpirun_maps_ranks_per_node_with_cores_per_rank_and_exports_the_plan_env():
    site, plan = _plan("volta-x86", nodes=2)
    argv = launcher_for("mpirun").command(plan, site)
    assert argv[:7] == ["mpirun", "-np", "8", "--map-by", "ppr:4:node:PE=10", "--bind-to", "core"]
    assert ["-x", "NCCL_SOCKET_IFNAME"] == argv[argv.index("NCCL_SOCKET_IFNAME") - 1 : argv.index("NCCL_SOCKET_IFNAME") + 1]


def test_mpiexec_hydra_gives_ranks_per_node_and_a_core_domain_per_rank():
    site, plan = _plan("stampede2-skx", nodes=3)
    mpich = site.model_copy(update={"mpi": "mpich"})
    argv = launcher_for("mpiexec").command(plan, mpich)
    assert argv[:7] == ["mpiexec", "-n", "6", "-ppn", "2", "-bind-to", "core:24"]
    # Intel MPI pins by its own variables (I_MPI_PIN_DOMAIN, in the plan), never also by Hydra's -bind-to
    argv = launcher_for("mpiexec").command(plan, site)
    assert argv[:5] == ["mpiexec", "-n", "6", "-ppn", "2"] and "-bind-to" not in argv
    assert plan.env["I_MPI_PIN_DOMAIN"] == "omp"


def test_srun_uses_cpus_per_task_when_ranks_sit_on_consecutive_cores():
    site, plan = _plan("perlmutter")
    argv = launcher_for("srun").command(plan, site)
    assert "--cpus-per-task=32" in argv and "--cpu-bind=cores" in argv  # 16 cores x 2 hardware threads


def test_srun_passes_the_plans_own_masks_when_reserved_cores_sit_between_ranks():
    site, plan = _plan("frontier")
    argv = launcher_for("srun").command(plan, site)
    masks = next(a for a in argv if a.startswith("--cpu-bind=mask_cpu:")).split(":", 1)[1].split(",")
    # rank 0: cores 49-55, one hardware thread each: Frontier's Slurm hands out physical cores
    assert int(masks[0], 16) == sum(1 << c for c in range(49, 56))


def test_srun_counts_cpus_per_task_in_the_unit_the_sites_slurm_counts():
    # OLCF Frontier user guide: with --threads-per-core=1, Frontier's default, "-c" counts physical
    # cores; 8 ranks x -c 7 fill the 56 cores low-noise mode leaves, where -c 14 is never allocated
    site, plan = _plan("frontier")
    assert "--cpus-per-task=7" in launcher_for("srun").command(plan, site)
    assert all(len(r.cpus) == len(r.cores) == 7 for r in plan.ranks)
    # a Slurm that counts hardware threads (Slurm's default: NERSC's `-c 2 x cores` on Perlmutter)
    site, plan = _plan("perlmutter")
    assert "--cpus-per-task=32" in launcher_for("srun").command(plan, site)  # 16 cores x 2 threads
    assert all(len(r.cpus) == 2 * len(r.cores) for r in plan.ranks)


def test_srun_binds_multi_gpu_ranks_by_mask():
    site, plan = _plan("volta-x86", mode="per-socket")
    argv = launcher_for("srun").command(plan, site)
    assert "--gpu-bind=mask_gpu:0x3,0xc" in argv


def test_srun_leaves_every_gpu_visible_where_the_profile_says_so():
    # NERSC Perlmutter: --gpus-per-node=4 and no per-task binding (E3SM issue 4834: --gpu-bind=none)
    site, plan = _plan("perlmutter", mode="per-socket")
    argv = launcher_for("srun").command(plan, site)
    assert "--gpus-per-node=4" in argv and "--gpu-bind=none" in argv


def test_srun_takes_the_sites_own_mpi_plugin_instead_of_pmix():
    # SDSC Expanse starts Open MPI with `srun --mpi=pmi2` (expanse-101 hellompi-slurm.sb): a site's
    # `--mpi=` in launch.args is the only one on the line, and the image check asks for that PMI
    from hpcdl.images.compat import launcher_needs
    from hpcdl.sites.schema import Site

    def site(args):
        kind = {"sockets": 2, "cores_per_socket": 4, "threads_per_core": 1, "memory_gb": 8}
        return Site.model_validate({"name": "pmi-test", "scheduler": "slurm", "launcher": "srun", "mpi": "openmpi",
                                    "node_kinds": {"n": kind}, "launch": {"args": args}})

    for args, plugin in (([], "pmix"), (["--mpi=pmi2"], "pmi2"), (["--mpi", "pmi2"], "pmi2")):
        s = site(args)
        argv = launcher_for("srun").command(make_plan(s, JobRequest(nodes=1)), s)
        named = [a for i, a in enumerate(argv) if a.startswith("--mpi=") or argv[i - 1] == "--mpi"]
        assert named == [f"--mpi={plugin}"] or named == [plugin], argv
        assert launcher_needs(s)[1] == plugin


def _pals_site(**node):
    from hpcdl.sites.schema import Site

    kind = {"sockets": 1, "cores_per_socket": 32, "threads_per_core": 2,
            "scheduler_cpus_per_core": 2, "memory_gb": 512,
            "gpus": [{"model": "A100", "socket": 0}] * 4, **node}
    return Site.model_validate({"name": "pals-test", "scheduler": "pbs", "launcher": "pals", "mpi": "cray-mpich",
                                "node_kinds": {"n": kind}})


def test_pals_mpiexec_is_ppn_depth_cpu_bind_depth_on_consecutive_cores():
    # ALCF Polaris: mpiexec -n N --ppn 4 --depth=8 --cpu-bind depth
    site = _pals_site()
    plan = make_plan(site, JobRequest(nodes=2))
    assert list(plan.launcher_argv) == ["mpiexec", "-n", "8", "--ppn", "4", "--depth=8", "--cpu-bind", "depth"]


def test_pals_mpiexec_lists_each_ranks_cpus_when_reserved_cores_break_the_blocks():
    # ALCF Aurora style: --cpu-bind list:1-8:9-16:... when core 0 is kept for the system
    site = _pals_site(reserved_cores=[0])
    plan = make_plan(site, JobRequest(nodes=1))
    argv = list(plan.launcher_argv)
    assert argv[:5] == ["mpiexec", "-n", "4", "--ppn", "4"]
    assert argv[5:] == ["--cpu-bind", "list:1-7:8-14:15-21:22-28"]


def test_local_launcher_starts_the_ranks_of_one_node():
    site, plan = _plan("stampede2-knl", ranks_per_node=2)
    assert launcher_for("local").command(plan, site) == ["hpcdl", "launch", "--nproc", "2", "--"]


def test_jsrun_falls_back_to_one_resource_set_per_node_when_sockets_differ():
    site, plan = _plan("summit", mode="per-nic", ranks_per_node=3)
    argv = launcher_for("jsrun").command(plan, site)
    assert argv[0] == "jsrun" and "-r1" in argv and "-a3" in argv


def test_aprun_uses_two_hardware_threads_per_core_when_the_plan_runs_twice_as_many_threads():
    site, plan = _plan("cori-knl", nodes=2, ranks_per_node=4, threads_per_rank=32)
    argv = launcher_for("aprun").command(plan, site)
    assert argv == ["aprun", "-n", "8", "-N", "4", "-d", "32", "-j", "2", "-cc", "depth"]


def _gadi_with_launch(**launch):
    from hpcdl.sites.schema import Site

    data = load_site("gadi").model_dump(exclude_unset=True)
    return Site.model_validate({**data, "launch": {**data.get("launch", {}), **launch}})


def test_mpirun_is_given_the_batch_systems_host_file_where_the_site_asks_it():
    # ABCI 3.0 (docs.abci.ai/v3/en/mpi): "When executing the mpirun and mpiexec commands in a job, a host file is
    # also specified in the -hostfile option. The host file is set in the $PBS_NODEFILE environment variable":
    # an Open MPI built without PBS's launch support knows no other node, and starts every rank on the first
    from hpcdl.shell import join

    site = _gadi_with_launch(hostfile=True)
    plan = make_plan(site, JobRequest(nodes=2))
    argv = list(plan.launcher_argv)
    assert argv[argv.index("--hostfile") + 1] == "${PBS_NODEFILE}"
    assert '--hostfile "${PBS_NODEFILE}"' in join(argv)  # expands when the job runs, quoted
    # left unset (Gadi: NCI's Open MPI reads the PBS allocation itself), the line names no host file
    assert "--hostfile" not in make_plan(load_site("gadi"), JobRequest(nodes=2)).launcher_argv
    # under LSF the file is LSB_DJOB_HOSTFILE's (Mount Sinai Minerva: LSF without CSM, Open MPI mpirun)
    from hpcdl.sites.schema import Site

    data = load_site("minerva").model_dump(exclude_unset=True)
    lsf = Site.model_validate({**data, "launch": {**data.get("launch", {}), "hostfile": True}})
    argv = list(make_plan(lsf, JobRequest(nodes=2)).launcher_argv)
    assert argv[argv.index("--hostfile") + 1] == "${LSB_DJOB_HOSTFILE}"


def test_a_host_file_is_refused_where_the_launcher_or_the_scheduler_has_none():
    import pytest

    from hpcdl.sites.schema import Site

    data = load_site("polaris").model_dump(exclude_unset=True)
    with pytest.raises(ValueError, match="launch.hostfile: the PBS or LSF host file .* launcher is pals"):
        Site.model_validate({**data, "launch": {**data.get("launch", {}), "hostfile": True}})

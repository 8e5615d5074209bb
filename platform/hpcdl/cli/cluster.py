"""hpcdl cluster up / down: a real Slurm on this machine to try hpcdl's Slurm side (hpcdl.cluster)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from hpcdl.cli import app

cluster_app = typer.Typer(help="A local Slurm (munge, slurmctld, slurmd) to try hpcdl on; needs root.",
                          no_args_is_help=True)
app.add_typer(cluster_app, name="cluster")


def _folder(folder: Optional[Path]) -> Path:
    from hpcdl.cluster import default_folder

    return (folder or default_folder()).expanduser().resolve()


@cluster_app.command("up")
def up(
    nodes: int = typer.Option(1, "--nodes", "-N", min=1, max=8, help="pretend nodes (they share this machine)"),
    folder: Optional[Path] = typer.Option(None, "--dir", help="its configuration, state and logs "
                                          "(default $HPCDL_CLUSTER_DIR or ~/.cache/hpcdl/cluster)"),
    link_gbit: Optional[float] = typer.Option(None, "--link-gbit", min=0.001, max=400,
                                              help="put each node in a network namespace of its own, its link "
                                                   "shaped to this many Gbit/s (tc); default: all on 127.0.0.1"),
) -> None:
    """Start a Slurm cluster on this machine and print the two lines that point hpcdl and Slurm at it.

    Run them (or `eval "$(hpcdl cluster up)"`); then `hpcdl ... --site local-slurm` submits to it.
    """
    from hpcdl.cluster import SITE_NAME, SlurmError, cluster_up
    from hpcdl.errors import HpcdlError

    where = _folder(folder)
    try:
        cluster = cluster_up(where, nodes, link_gbit)
    except (SlurmError, OSError, RuntimeError) as exc:
        raise HpcdlError(f"cluster up: {exc}") from None
    typer.echo(f"export SLURM_CONF={cluster.conf}")
    typer.echo(f"export HPCDL_SITE_PATH={where / 'sites'}${{HPCDL_SITE_PATH:+:$HPCDL_SITE_PATH}}")
    typer.echo(f"# {nodes} node(s): {', '.join(cluster.node_names)}, partition debug; site profile {SITE_NAME}; "
               f"stop it with `hpcdl cluster down{'' if folder is None else f' --dir {where}'}`", err=True)
    if cluster.task_plugin == "task/none":
        typer.echo(f"# the {nodes} pretend nodes share this machine's cores, which Slurm's task/affinity will not "
                   "lay out twice: ranks are not bound here (srun's --cpu-bind is ignored, and each job step says "
                   "'cluster configuration lacks support for cpu binding'); --nodes 1 binds them", err=True)


@cluster_app.command("down")
def down(
    folder: Optional[Path] = typer.Option(None, "--dir", help="the folder `hpcdl cluster up` used"),
) -> None:
    """Stop the cluster `hpcdl cluster up` started (its daemons and its munged).

    Without --dir: the cluster $SLURM_CONF points at (what `cluster up` exported), else the one
    in the default folder; when neither runs but one runs elsewhere, it is named, not left behind.
    """
    import os

    from hpcdl.cluster import cluster_down, running_clusters
    from hpcdl.errors import HpcdlError

    where = _folder(folder)
    if folder is None:
        running = running_clusters()
        pointed = Path(os.environ["SLURM_CONF"]).resolve().parent if os.environ.get("SLURM_CONF") else None
        if pointed in running:
            where = pointed
        elif where not in running and running:
            raise HpcdlError(f"cluster down: none runs in {where}, but `hpcdl cluster up` clusters run in "
                             f"{', '.join(map(str, running))}; stop one with `hpcdl cluster down --dir DIR`")
    if cluster_down(where):
        typer.echo(f"stopped the cluster in {where}")
    else:
        typer.echo(f"no cluster was running in {where}")

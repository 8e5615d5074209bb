"""hpcdl sites: list, show and detect site profiles."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from hpcdl.cli import app
from hpcdl.cli.output import write_atomically
from hpcdl.sites import list_sites, load_site
from hpcdl.sites.detect import detect_local_site, site_to_yaml

sites_app = typer.Typer(help="Site profiles: list them, show one, or detect this node.", invoke_without_command=True)
app.add_typer(sites_app, name="sites")


@sites_app.callback()
def sites_list(ctx: typer.Context) -> None:
    """List the known sites (shipped, user and HPCDL_SITE_PATH profiles, and `local`)."""
    if ctx.invoked_subcommand is not None:
        return
    table = Table("site", "scheduler", "launcher", "runtime", "node kinds", "from")
    for name, origin in list_sites().items():
        site = load_site(name)
        kinds = ", ".join(
            f"{k} ({n.sockets}x{n.cores_per_socket}c" + (f", {len(n.gpus)} {n.gpus[0].model}" if n.gpus else "") + ")"
            for k, n in site.node_kinds.items()
        )
        table.add_row(name, site.scheduler, site.launcher, site.runtime, kinds, origin)
    Console(width=200).print(table)


@sites_app.command("show")
def sites_show(name: str = typer.Argument(..., help="site name")) -> None:
    """Print a site profile as YAML."""
    typer.echo(site_to_yaml(load_site(name)), nl=False)


@sites_app.command("detect")
def sites_detect(output: Path = typer.Option(None, "-o", "--output", help="write the profile here")) -> None:
    """Describe this node as a site profile (YAML)."""
    text = site_to_yaml(detect_local_site())
    if output:
        write_atomically(output, text)
        typer.echo(f"wrote {output}")
    else:
        typer.echo(text, nl=False)

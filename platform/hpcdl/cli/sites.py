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
def sites_show(
    name: str = typer.Argument(..., help="site name"),
    sources: bool = typer.Option(False, "--sources", help="list, per choice that shapes a plan, the pages it follows"),
) -> None:
    """Print a site profile as YAML, or with --sources the centre pages behind each choice."""
    site = load_site(name)
    if not sources:
        typer.echo(site_to_yaml(site), nl=False)
        return
    typer.echo(sources_text(site), nl=False)


def sources_text(site) -> str:
    lines = [f"{site.name}: {site.description}".rstrip(": ")]
    if not site.citations:
        lines.append("  (the profile cites no source per choice; its general sources:)")
        lines += [f"  - {s}" for s in site.sources]
        return "\n".join(lines) + "\n"
    for choice, cites in site.citations.items():
        lines.append(f"{choice}:")
        for c in cites:
            lines.append(f"  - {c.source}")
            lines.append(f"    {c.says}")
    if site.sources:
        lines.append("profile facts (hardware):")
        lines += [f"  - {s}" for s in site.sources]
    return "\n".join(lines) + "\n"


@sites_app.command("detect")
def sites_detect(output: Path = typer.Option(None, "-o", "--output", help="write the profile here")) -> None:
    """Describe this node as a site profile (YAML)."""
    text = site_to_yaml(detect_local_site())
    if output:
        write_atomically(output, text)
        typer.echo(f"wrote {output}")
    else:
        typer.echo(text, nl=False)

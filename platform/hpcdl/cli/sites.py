"""hpcdl sites: list, show and detect site profiles."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from hpcdl.cli import app
from hpcdl.cli.output import console as make_console
from hpcdl.cli.output import checked_output, write_atomically
from hpcdl.sites import list_sites, load_site
from hpcdl.sites.detect import detect_local_site, site_to_yaml

sites_app = typer.Typer(help="Site profiles: list them, show one, or detect this node.", invoke_without_command=True)
app.add_typer(sites_app, name="sites")


@sites_app.callback()
def sites_list(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="machine-readable list")) -> None:
    """List the known sites (shipped, user and HPCDL_SITE_PATH profiles, and `local`)."""
    if ctx.invoked_subcommand is not None:
        return
    rows = []
    for name, origin in list_sites().items():
        site = load_site(name)
        kinds = [{"name": k, "sockets": n.sockets, "cores_per_socket": n.cores_per_socket,
                  "gpus": len(n.gpus), "gpu_model": n.gpus[0].model if n.gpus else None}
                 for k, n in site.node_kinds.items()]
        rows.append({"name": name, "scheduler": site.scheduler, "launcher": site.launcher, "runtime": site.runtime,
                     "node_kinds": kinds, "retired": site.retired.model_dump() if site.retired else None,
                     "from": _origin(origin)})
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    table = Table()
    for column in ("site", "scheduler", "launcher", "runtime"):
        table.add_column(column, no_wrap=True)  # names a user types again are never cut
    table.add_column("node kinds")
    table.add_column("service", no_wrap=True)
    table.add_column("from")
    for row in rows:
        kinds = "; ".join(
            f"{k['name']} {k['sockets']}x{k['cores_per_socket']}c" + (f" {k['gpus']} {k['gpu_model']}" if k["gpus"] else "")
            for k in row["node_kinds"]
        )
        service = f"retired {row['retired']['date']}" if row["retired"] else "in service"
        table.add_row(row["name"], row["scheduler"], row["launcher"], row["runtime"], kinds, service, row["from"])
    make_console().print(table)  # (the page that says a machine was retired: --json, or `hpcdl sites show NAME`)


def _origin(origin: str) -> str:
    """'shipped' for the package's own profiles; a user's or a centre's file by its path."""
    import hpcdl.sites

    shipped = Path(hpcdl.sites.__file__).resolve().parent
    try:
        Path(origin).resolve().relative_to(shipped)
        return "shipped"
    except (ValueError, OSError):
        return origin


@sites_app.command("show")
def sites_show(
    name: str = typer.Argument(..., envvar="HPCDL_SITE", show_envvar=False, help="site name (default: $HPCDL_SITE)"),
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
def sites_detect(
    output: Optional[Path] = typer.Option(None, "-o", "--out", help="write the profile here"),
    output_alias: Optional[Path] = typer.Option(None, "--output", hidden=True),  # the name before 0.1.0
    runtime: Optional[str] = typer.Option(None, "--runtime", help="container runtime the ranks run in, e.g. "
                                          "charliecloud (default: $HPCDL_LOCAL_RUNTIME, else none)"),
    image: Optional[str] = typer.Option(None, "--image", help="the image they run (default: $HPCDL_LOCAL_IMAGE), "
                                        "e.g. what `hpcdl images build local-cpu` printed"),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help="local, or slurm: jobs go to the Slurm "
                                            "this node submits to (default: $HPCDL_LOCAL_SCHEDULER, else local)"),
    name: Optional[str] = typer.Option(None, "--name", help="the profile's name (default: the -o file's name, "
                                       "e.g. mybox for -o sites/mybox.yaml; else local)"),
) -> None:
    """Describe this node as a site profile (YAML), named after the file it is written to."""
    from hpcdl.errors import HpcdlError

    output = checked_output(output or output_alias, "-o")
    site = detect_local_site(runtime, image, scheduler)
    # a profile is found by its file name, and refused when its `name:` says another one
    name = name or (output.stem if output else site.name)
    if output and output.stem != name:
        raise HpcdlError(f"--name: {name!r}, but a profile in {output.name} must be named {output.stem!r} "
                         "(sites are found by file name); drop --name or name the file after it")
    try:
        site = type(site).model_validate({**site.model_dump(), "name": name})
    except ValueError:  # pydantic's ValidationError: the schema's pattern for names
        raise HpcdlError(f"name: {name!r} is not a site name (lower-case letters, digits, '.', '_' or '-', "
                         "starting with a letter or digit)") from None
    text = site_to_yaml(site)
    if output:
        write_atomically(output, text)
        typer.echo(f"wrote {output}")
    else:
        typer.echo(text, nl=False)

"""hpcdl recipes: the example training recipes shipped with hpcdl, listed and copied out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from hpcdl.cli import app
from hpcdl.cli.output import checked_output, write_atomically
from hpcdl.errors import HpcdlError
from hpcdl.train.recipe import shipped_recipes

recipes_app = typer.Typer(help="Training recipes: list the shipped ones, copy one out to edit, import a Caffe solver.",
                          invoke_without_command=True)
app.add_typer(recipes_app, name="recipes")


def _summary(path: Path) -> dict:
    import yaml

    text = path.read_text()
    data = yaml.safe_load(text) or {}
    comment = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        comment.append(line.lstrip("# ").rstrip())
    first = " ".join(comment).split(". ")[0].rstrip(".") if comment else ""
    return {"name": path.stem, "net": data.get("net"), "framework": data.get("framework", "pytorch"),
            "batch_size": data.get("batch_size"), "max_iter": data.get("max_iter"), "epochs": data.get("epochs"),
            "description": first, "path": str(path)}


@recipes_app.callback()
def recipes_list(ctx: typer.Context,
                 as_json: bool = typer.Option(False, "--json", help="machine-readable list")) -> None:
    """The shipped recipes: run one by name (hpcdl run -s local digits-quick), or copy it out to edit."""
    if ctx.invoked_subcommand is None:
        _print_list(as_json)


def _print_list(as_json: bool) -> None:
    rows = [_summary(p) for p in shipped_recipes().values()]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        length = f"{r['max_iter']} iter" if r["max_iter"] else f"{r['epochs']} epochs"
        about = r["description"] if len(r["description"]) <= 60 else r["description"][:59].rstrip() + "…"
        typer.echo(f"{r['name']:<18} {r['net']:<14} batch {r['batch_size']:<4} {length:<13} {about}")


@recipes_app.command("list")
def recipes_list_verb(as_json: bool = typer.Option(False, "--json", help="machine-readable list")) -> None:
    """List the shipped recipes (the same as `hpcdl recipes`)."""
    _print_list(as_json)


@recipes_app.command("copy")
def recipes_copy(
    name: str = typer.Argument(..., help="recipe name, from `hpcdl recipes`"),
    dest: Optional[Path] = typer.Argument(None, help="file or existing folder to copy to (default ./NAME.yaml)"),
    force: bool = typer.Option(False, "--force", help="overwrite a file that is already there"),
) -> None:
    """Copy a shipped recipe out, to edit and run: hpcdl recipes copy cifar10-quick my.yaml"""
    found = shipped_recipes()
    if name not in found:
        raise HpcdlError(f"recipe: unknown recipe {name!r}; shipped: {', '.join(found)}")
    target = dest or Path(f"{name}.yaml")
    if target.is_dir():
        target = target / f"{name}.yaml"
    checked_output(target, "DEST")
    if target.exists() and not force:
        raise HpcdlError(f"{target}: already exists; pass --force to overwrite it")
    write_atomically(target, found[name].read_text(), mode=0o644)
    typer.echo(f"wrote {target}")


@recipes_app.command("show")
def recipes_show(name: str = typer.Argument(..., help="recipe name, from `hpcdl recipes`")) -> None:
    """Print a shipped recipe."""
    found = shipped_recipes()
    if name not in found:
        raise HpcdlError(f"recipe: unknown recipe {name!r}; shipped: {', '.join(found)}")
    typer.echo(found[name].read_text(), nl=False)

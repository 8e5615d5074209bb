"""hpcdl modulefiles render: Lmod modulefiles and wrapper scripts for a site."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

import typer

from hpcdl.cli import app
from hpcdl.errors import HpcdlError
from hpcdl.modules import DEFAULT_PREFIX, render_site, write_tree
from hpcdl.modules.shipped import shipped_site_names
from hpcdl.sites import load_site

modulefiles_app = typer.Typer(help="Lmod modulefiles: `module load hpcdl` and framework modules for a site.")
app.add_typer(modulefiles_app, name="modulefiles")


@modulefiles_app.command("render")
def modulefiles_render(
    site: Optional[str] = typer.Option(None, "--site", "-s", help="site profile name (see `hpcdl sites`); default: $HPCDL_SITE unless --shipped"),
    shipped: bool = typer.Option(False, "--shipped", help="every site profile shipped with hpcdl (what `make modulefiles` checks in)"),
    out: Path = typer.Option(Path("modulefiles"), "--out", "-o", help="writes OUT/<site>/, the folder for `module use`"),
    prefix: Optional[str] = typer.Option(
        None, "--prefix", help=f"where hpcdl (and, for runtime none, the frameworks) is installed [env HPCDL_PREFIX, else the install running this command, else {DEFAULT_PREFIX}]"
    ),
    allow_missing_prefix: bool = typer.Option(
        False, "--allow-missing-prefix", help="render although PREFIX/bin/hpcdl does not exist yet (an install that comes later)"
    ),
) -> None:
    """Write hpcdl/<version>.lua, <framework>/<version>.lua and wrappers/ for a site."""
    if site is None and not shipped:
        site = os.environ.get("HPCDL_SITE") or None
    if shipped == (site is not None):
        raise HpcdlError("give either --site NAME or --shipped")
    if prefix is None:  # an explicit empty --prefix (an unset shell variable) is refused below, not defaulted
        prefix = os.environ.get("HPCDL_PREFIX") or _this_install() or DEFAULT_PREFIX
    if not prefix.startswith("/"):
        raise HpcdlError(f"--prefix: {prefix!r} must be an absolute path (modulefiles are read from any directory)")
    names = shipped_site_names() if shipped else [site]
    # render everything first, so a broken profile leaves no half-written tree behind
    rendered = {name: render_site(load_site(name), prefix, _native_frameworks(load_site(name), prefix,
                                                                              shipped or allow_missing_prefix))
                for name in names}
    if not shipped and not allow_missing_prefix:
        # a module whose `hpcdl` is not there loads fine and then leaves `hpcdl` unfound
        program = Path(os.path.expandvars(prefix)) / "bin" / "hpcdl"
        try:
            found = program.is_file() and os.access(program, os.X_OK)
        except OSError:  # a name no file system can hold (ENAMETOOLONG) names no program either
            found = False
        if not found:
            raise HpcdlError(f"--prefix: {program} does not exist; install hpcdl into {prefix} first "
                             f"(python -m venv {prefix} && {prefix}/bin/pip install hpcdl), "
                             f"or pass --allow-missing-prefix to render for an install that comes later")
    for name, files in rendered.items():
        write_tree(files, out / name)
        typer.echo(f"wrote {len(files)} file{'s' if len(files) != 1 else ''} to {out / name}/  (module use {(out / name).resolve()})")


def _this_install() -> str | None:
    """The prefix of the hpcdl running now, where it is an installed program (a venv or a prefix)."""
    return sys.prefix if (Path(sys.prefix) / "bin" / "hpcdl").is_file() else None


def _native_frameworks(site, prefix: str, later: bool):
    """Where a site runs no container, its framework modules run PREFIX/bin/python: only the frameworks
    installed there get a module, and a prefix that holds none is refused, as one without bin/hpcdl
    is (`module load pytorch` must not load a module whose `import torch` fails)."""
    from hpcdl.images.frameworks import NATIVE, ImageFrameworks
    from hpcdl.train.preflight import FRAMEWORK_MODULES as packages  # framework -> the package it imports as

    if site.runtime != "none" or later:
        return None
    root = Path(os.path.expandvars(prefix))

    def holds(package: str) -> bool:
        try:
            return any(root.glob(f"lib/python3*/site-packages/{package}/__init__.py"))
        except OSError:  # a prefix no file system can hold holds nothing
            return False

    held = {f: v for f, v in NATIVE.frameworks.items() if holds(packages[f])}
    if not held:
        wanted = " or ".join(packages[f] for f in NATIVE.frameworks)
        raise HpcdlError(f"--prefix: {prefix} holds no {wanted}, and site {site.name} runs no container (runtime: none), "
                         f"so its framework modules would run a Python without them; install them into it "
                         f"({prefix}/bin/pip install 'hpcdl[torch]'), name the centre's own environment in the profile "
                         f"(environment, docs/sites.md), or pass --allow-missing-prefix for an install that comes later")
    return ImageFrameworks(NATIVE.name, held)

"""The `hpcdl` command. Each verb lives in a small module; every error is one line, `hpcdl: error: ...`.

Exit status: 0 done, 1 a check or job failed (validate, report, run), 2 bad input or usage.
"""

from __future__ import annotations

import os
import sys

import typer
import typer.main

try:  # typer >= 0.20 carries its own copy of click
    from typer._click import exceptions as cx
except ImportError:  # pragma: no cover
    from click import exceptions as cx

from hpcdl import __version__
from hpcdl.errors import HpcdlError

app = typer.Typer(
    name="hpcdl",
    help="Deep learning on HPC systems: plan ranks, render job scripts, run and validate.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"hpcdl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", "-V", is_eager=True, callback=_show_version,
                                 help="print hpcdl's version and exit"),
) -> None:
    """Deep learning on HPC systems: plan ranks, render job scripts, run and validate."""


from hpcdl.cli import jobs, modules, sites, training  # noqa: E402,F401  (registers the verbs)
from hpcdl.cli import validate  # noqa: E402,F401  (validate, report, probe)
from hpcdl.cli import images  # noqa: E402,F401
from hpcdl.cli import predict  # noqa: E402,F401  (predict)
from hpcdl.cli import recipes  # noqa: E402,F401  (recipes)
from hpcdl.cli import cluster  # noqa: E402,F401  (cluster up / down)


def _plain_metavars(command) -> None:
    """Help that names values the way a user types them (-s SITE, -N N, -o PATH, RESULTS...),
    not typer's Python type names (<str>, <int range>, <list[Path]>)."""
    for param in getattr(command, "params", ()):
        if param.param_type_name == "option":
            if param.required and param.envvar:
                _not_marked_required(param)
            if getattr(param, "is_flag", False) or param.metavar is not None:
                continue
            desc = getattr(param, "type_descriptor", None)
            annotation = getattr(desc, "annotation", None)
            if annotation in (int, float):
                param.metavar = "N"
            elif getattr(desc, "is_path", False):
                param.metavar = "PATH"
            else:
                param.metavar = param.name.upper()
        elif param.param_type_name == "argument":
            name = (param.metavar or param.name).upper()
            many = "..." if param.nargs != 1 else ""
            usage = f"{name}{many}" if param.required else f"[{name}]{many}"
            param.metavar = name
            # typer prints the annotation after an argument's name whatever its metavar
            param.display_type_rich = lambda ctx: None
            param._rich_display_name = lambda name=name, many=many: name + many
            param._usage_display_name = lambda usage=usage: usage
    for sub in getattr(command, "commands", {}).values():
        _plain_metavars(sub)


def _not_marked_required(option) -> None:
    """An option the environment can give (--site from $HPCDL_SITE) is not `[required]` on the
    command line; its help says so, and click still reports it missing when neither gives it."""
    help_record = option.get_help_record

    def record(ctx):
        option.required = False
        try:
            return help_record(ctx)
        finally:
            option.required = True

    option.get_help_record = record


def _command():
    from hpcdl.cli.complete import attach

    command = typer.main.get_command(app)
    _plain_metavars(command)
    attach(command)
    return command


def _usage_hint(exc: cx.UsageError) -> str:
    path = exc.ctx.command_path if exc.ctx is not None else "hpcdl"
    return f" (see `{path} --help`)"


def main(argv: list[str] | None = None) -> None:
    """Run the command line; click's usage errors get the same one-line style as hpcdl's own."""
    # never world-writable, whatever the umask: run folders, the validation history `report`
    # reads back, and what the job shells hpcdl starts write (a group keeps what umask gives it)
    os.umask(os.umask(0) | 0o002)
    try:
        status = _command().main(args=argv, prog_name="hpcdl", standalone_mode=False)
    except HpcdlError as exc:
        print(f"hpcdl: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except cx.NoArgsIsHelpError as exc:  # `hpcdl` or `hpcdl images` alone: the help
        exc.show()
        sys.exit(exc.exit_code)
    except cx.UsageError as exc:
        message = " ".join(exc.format_message().split())
        if isinstance(exc, cx.MissingParameter) and getattr(exc.param, "name", None) == "site":
            message += " Give --site NAME, or set HPCDL_SITE (`module load hpcdl` does)."
        print(f"hpcdl: error: {message}{_usage_hint(exc)}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except cx.ClickException as exc:
        print(f"hpcdl: error: {' '.join(exc.format_message().split())}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        print("hpcdl: interrupted", file=sys.stderr)
        sys.exit(130)
    except MemoryError as exc:  # numpy's _ArrayMemoryError too: what was asked for does not fit this node
        detail = " ".join(str(exc).split())
        print(f"hpcdl: error: out of memory on {os.uname().nodename}{': ' + detail if detail else ''}", file=sys.stderr)
        sys.exit(1)
    sys.exit(status if isinstance(status, int) else 0)

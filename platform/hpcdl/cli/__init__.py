"""The `hpcdl` command. Each verb lives in a small module; errors become one line and exit 2."""

from __future__ import annotations

import sys

import typer

from hpcdl.errors import HpcdlError

app = typer.Typer(
    name="hpcdl",
    help="Deep learning on HPC systems: plan ranks, render job scripts, run and validate.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

from hpcdl.cli import jobs, modules, sites, training  # noqa: E402,F401  (registers the verbs)
from hpcdl.cli import validate  # noqa: E402,F401  (validate, report, probe)
from hpcdl.cli import images  # noqa: E402,F401
from hpcdl.cli import predict  # noqa: E402,F401  (predict)


def main(argv: list[str] | None = None) -> None:
    try:
        app(args=argv, prog_name="hpcdl")
    except HpcdlError as exc:
        print(f"hpcdl: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        print("hpcdl: interrupted", file=sys.stderr)
        sys.exit(130)

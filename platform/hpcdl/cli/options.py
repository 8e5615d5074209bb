"""Options several verbs share, written once so their names and help agree."""

import typer

SITE_HELP = "site profile name (see `hpcdl sites`); default: $HPCDL_SITE, which `module load hpcdl` sets"
SiteOpt = typer.Option(..., "--site", "-s", envvar="HPCDL_SITE", show_envvar=False, help=SITE_HELP)

"""The one way hpcdl sets up jinja2 for its renderers (job scripts, modulefiles, images)."""

from __future__ import annotations

import jinja2


def template_environment(package: str, keep_trailing_newline: bool = True, **filters) -> jinja2.Environment:
    """Templates in `package`/templates; a missing variable is an error, never an empty string."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader(package, "templates"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=keep_trailing_newline,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,  # shell, Lua and definition files: quoting is done by the filters
    )
    env.filters.update(filters)
    return env

"""Completion of values, not only of verbs and options (bash, zsh and fish, through
`hpcdl --install-completion`): site names, checks, the node kinds of the site already on the
line, shipped recipe names beside files, image names. Attached here by option and argument
name, so each verb's module stays about its verb (as Spack completes package names)."""

from __future__ import annotations

import os

try:  # typer >= 0.20 carries its own copy of click
    from typer._click.shell_completion import CompletionItem
except ImportError:  # pragma: no cover
    from click.shell_completion import CompletionItem


def _names(names, incomplete: str) -> list[CompletionItem]:
    return [CompletionItem(n) for n in names if n.startswith(incomplete)]


def sites(ctx, param, incomplete):
    from hpcdl.sites.registry import list_sites

    return _names(list_sites(), incomplete)


def checks(ctx, param, incomplete):
    """--checks takes a comma-separated list: complete its last item, after the ones given."""
    from hpcdl.validate.checks import ORDER

    done, _, last = incomplete.rpartition(",")
    given = set(done.split(",")) if done else set()
    head = f"{done}," if done else ""
    return [CompletionItem(head + c) for c in ORDER if c.startswith(last) and c not in given]


def node_kinds(ctx, param, incomplete):
    """The kinds of the site given earlier on the line (or $HPCDL_SITE); none when it is unknown."""
    from hpcdl.errors import HpcdlError
    from hpcdl.sites.registry import load_site

    site = ctx.params.get("site") or os.environ.get("HPCDL_SITE")
    if not site:
        return []
    try:
        return _names(load_site(site).node_kinds, incomplete)
    except (HpcdlError, OSError):
        return []


def recipes(ctx, param, incomplete):
    """Shipped recipe names; where none matches, the shell completes file names (typer's scripts
    install with `complete -o default`), so `run my<TAB>` still finds my.yaml."""
    from hpcdl.train.recipe import shipped_recipes

    return _names(shipped_recipes(), incomplete)


def images(ctx, param, incomplete):
    from hpcdl.images.spec import load_images

    try:
        return _names(load_images(), incomplete)
    except Exception:  # a broken specs file completes nothing rather than printing a traceback at TAB
        return []


#: option string -> completer, for every verb that has the option
OPTIONS = {"--site": sites, "--checks": checks, "--node-kind": node_kinds, "--image": images, "--recipe": recipes}
#: "verb argument" -> completer
ARGUMENTS = {
    "render recipe": recipes, "run recipe": recipes, "train recipe": recipes, "predict recipe": recipes,
    "submit source": recipes, "recipes copy name": recipes, "recipes show name": recipes,
    "sites show name": sites, "images render names": images, "images compat names": images,
    "images build names": images,
}


def attach(command, verb: tuple[str, ...] = ()) -> None:
    """Give each option and argument named above its completer, through the whole command tree."""
    for param in getattr(command, "params", ()):
        if param.param_type_name == "option":
            completer = next((OPTIONS[o] for o in param.opts if o in OPTIONS), None)
        else:
            completer = ARGUMENTS.get(" ".join((*verb, param.name)))
        if completer is not None:
            param._custom_shell_complete = completer
    for name, sub in getattr(command, "commands", {}).items():
        attach(sub, (*verb, name))

"""Render a site's modules and wrappers with jinja2, and write them all or nothing."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import jinja2

from hpcdl import __version__
from hpcdl.errors import HpcdlError
from hpcdl.images.frameworks import ImageFrameworks
from hpcdl.modules.generator import DEFAULT_PREFIX, FRAMEWORK_TITLES, FrameworkModule, SiteModules, site_modules
from hpcdl.modules.model import BINDS_SLOT, IMAGE_SLOT, ModuleSpec, Wrapper
from hpcdl.shell import VARIABLE, env_name, quote
from hpcdl.sites.schema import Site


@dataclass(frozen=True)
class RenderedFile:
    relpath: str  # inside the module tree (the folder given to `module use`)
    text: str
    executable: bool = False


def lua_string(value) -> str:
    text = str(value)
    if "\0" in text:
        raise HpcdlError(f"modulefile value {text!r} contains a NUL")
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{escaped}"'


def lua_long_string(value) -> str:
    """A Lua long string [==[ ... ]==] with a level no line of the text can close early."""
    text = str(value)
    level = 0
    while f"]{'=' * level}]" in text:
        level += 1
    eq = "=" * level
    return f"[{eq}[\n{text}\n]{eq}]"




def sh_expanding(value) -> str:
    """Double-quote a value so that only $NAME / ${NAME} expand when the script runs (a profile's
    /mnt/bb/$USER or $SCRATCH); every other character, a lone $ or a backquote included, is literal."""
    text = str(value)
    out, last = [], 0
    for match in VARIABLE.finditer(text):
        out.append(_escape_in_double_quotes(text[last : match.start()]))
        out.append(match.group(0))
        last = match.end()
    out.append(_escape_in_double_quotes(text[last:]))
    return '"' + "".join(out) + '"'


def _escape_in_double_quotes(text: str) -> str:
    if any(c in text for c in "\n\r\0"):
        raise HpcdlError(f"path or image {text!r} contains a newline or NUL")
    return "".join("\\" + c if c in '\\"`$' else c for c in text)


def wrapper_line(w: Wrapper) -> str:
    words = []
    for i, word in enumerate(w.argv):
        if word == BINDS_SLOT:
            # empty-array-safe expansion: bash before 4.4 calls "${a[@]}" of an empty array unbound
            words.append('${binds[@]+"${binds[@]}"}')
        elif IMAGE_SLOT in word:
            words.append(sh_expanding(word.replace(IMAGE_SLOT, "${image}")))
        elif w.native and i == 0:  # the prefix may hold $HOME and the like
            words.append(sh_expanding(word))
        else:
            words.append(quote(word))
    return " ".join(words)


_env = jinja2.Environment(
    loader=jinja2.PackageLoader("hpcdl.modules", "templates"),
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
    autoescape=False,
)
_env.filters["lua"] = lua_string
_env.filters["lua_long"] = lua_long_string
_env.filters["sh_expanding"] = sh_expanding
_env.filters["q"] = quote


def render_modules(modules: SiteModules) -> list[RenderedFile]:
    files = [_render_module(modules.site, modules.hpcdl)]
    for fm in modules.frameworks:
        files.append(_render_module(modules.site, fm.module))
        files += [_render_wrapper(modules, fm, w) for w in fm.wrappers]
    return files


def render_site(site: Site, prefix: str = DEFAULT_PREFIX, images: ImageFrameworks | None = None) -> list[RenderedFile]:
    return render_modules(site_modules(site, prefix, images))


def _render_module(site: str, m: ModuleSpec) -> RenderedFile:
    for name in [*m.env, *(p.variable for p in m.paths)]:
        env_name(name)
    text = _env.get_template("module.lua.j2").render(m=m, site=site, hpcdl_version=__version__)
    return RenderedFile(m.relpath, text)


def _render_wrapper(modules: SiteModules, fm: FrameworkModule, w: Wrapper) -> RenderedFile:
    m = fm.module
    template = "native-wrapper.sh.j2" if w.native else "container-wrapper.sh.j2"
    text = _env.get_template(template).render(
        w=w, site=modules.site, runtime=modules.runtime, prefix=modules.prefix, image=fm.image,
        image_name=fm.image_name, title=FRAMEWORK_TITLES.get(m.name, m.name),
        version=m.version, line=wrapper_line(w),
    )
    return RenderedFile(f"{fm.wrappers_dir}/{w.command}", text, executable=True)


def write_tree(files: list[RenderedFile], out: Path) -> list[Path]:
    """Write every file (already rendered, so a bad site leaves nothing behind) under `out`."""
    # imported here: hpcdl.cli imports this package for its `modulefiles` verb
    from hpcdl.files import write_atomically

    written = []
    for f in files:
        path = Path(out) / f.relpath
        write_atomically(path, f.text, mode=0o755 if f.executable else 0o644)
        written.append(path)
    return written

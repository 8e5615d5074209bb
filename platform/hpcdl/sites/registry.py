"""Finding and loading site profiles.

Profiles are looked up, first match wins, in:
  1. each folder (or file) named in HPCDL_SITE_PATH (colon-separated), so a centre or a
     user can add or override a site without touching the package;
  2. ~/.config/hpcdl/sites/;
  3. the profiles shipped with hpcdl (hpcdl/sites/profiles/).
The site `local` is not a file: it is detected from the node hpcdl runs on, unless a
profile named local.yaml is found first.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import ValidationError

from hpcdl.errors import HpcdlError, validation_message
from hpcdl.files import read_yaml_mapping
from hpcdl.sites.schema import Site

SHIPPED = Path(__file__).parent / "profiles"
USER_DIR = Path("~/.config/hpcdl/sites").expanduser()


def site_search_path() -> list[Path]:
    extra = [Path(p).expanduser() for p in os.environ.get("HPCDL_SITE_PATH", "").split(":") if p]
    return [*extra, USER_DIR, SHIPPED]


def _profile_files() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for entry in site_search_path():
        files = [entry] if entry.is_file() else sorted(entry.glob("*.yaml")) if entry.is_dir() else []
        for f in files:
            found.setdefault(f.stem, f)
    return found


def list_sites() -> dict[str, str]:
    """Site name -> where it comes from (a file, or 'detected')."""
    sites = {name: str(path) for name, path in _profile_files().items()}
    sites.setdefault("local", "detected from this node")
    return dict(sorted(sites.items()))


def load_site_file(path: Path) -> Site:
    data = read_yaml_mapping(path, "a site profile")
    data.setdefault("name", path.stem)
    try:
        site = Site.model_validate(data)
    except ValidationError as exc:
        # pydantic prefixes our own checks with "Value error, "; the field path already says it
        raise HpcdlError(validation_message(exc, str(path)).replace("Value error, ", "")) from None
    if site.name != path.stem:
        raise HpcdlError(f"{path}: name: {site.name!r} does not match the file name {path.stem!r}")
    return site


def load_site(name: str) -> Site:
    files = _profile_files()
    if name in files:
        return load_site_file(files[name])
    if name == "local":
        from hpcdl.sites.detect import detect_local_site

        return detect_local_site()
    raise HpcdlError(f"unknown site {name!r}; known sites: {', '.join(list_sites())} (add one with HPCDL_SITE_PATH)")

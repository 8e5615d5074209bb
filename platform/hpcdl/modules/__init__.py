"""Lmod modulefiles for a site: `module load hpcdl`, and framework modules whose wrapper scripts
run python, hpcdl and torchrun inside the site's image (or from a native install)."""

from hpcdl.images.frameworks import NATIVE, ImageFrameworks, images_table
from hpcdl.modules.generator import DEFAULT_PREFIX, SiteModules, site_modules
from hpcdl.modules.render import RenderedFile, render_site, write_tree

__all__ = [
    "DEFAULT_PREFIX", "NATIVE", "ImageFrameworks", "RenderedFile", "SiteModules",
    "images_table", "render_site", "site_modules", "write_tree",
]

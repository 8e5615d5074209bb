"""Which image a site's framework modules wrap: the runtime decision's image for the site's node kinds.

What an image holds is hpcdl.images.frameworks'; which image (or the centre's own environment)
a node kind runs is hpcdl.plan.runtime's. This module joins the two for the modulefiles.
"""

from __future__ import annotations

from hpcdl.errors import HpcdlError
from hpcdl.images.frameworks import NATIVE, ImageFrameworks, image_specs, image_stem, images_table
from hpcdl.images.spec import IMAGES_YAML, ImageSpec
from hpcdl.plan.runtime import IMAGE, choose_runtime
from hpcdl.runtimes import runtime_for
from hpcdl.sites.schema import Site


def image_spec_for_site(site: Site, node_kind: str | None = None) -> ImageSpec | None:
    """The spec of the hpcdl image the runtime decision (hpcdl.plan.runtime) runs on `node_kind`; None
    where the job runs in the centre's own environment, an image hpcdl does not know, or nothing."""
    name = image_name_for_site(site, node_kind)
    return image_specs().get(name) if name else None


def image_name_for_site(site: Site, node_kind: str | None = None, use_gpus: bool | None = None) -> str | None:
    """The hpcdl image a job on `node_kind` (default: the site's default kind) runs, as the one
    runtime decision (hpcdl.plan.runtime.choose_runtime) has it: an image the compatibility check
    accepts for that kind; None where no hpcdl image runs there (the centre's own environment, or a
    refusal). A GPU node's job uses its GPUs unless `use_gpus` says otherwise."""
    kind, node = site.node_kind(node_kind)
    choice = choose_runtime(site, kind, use_gpus=bool(node.gpus) if use_gpus is None else use_gpus)
    if choice.kind != IMAGE:
        return None
    return image_stem(choice.image)


def frameworks_for_site(site: Site) -> ImageFrameworks | None:
    """What the site's framework modules wrap: hpcdl's own install where the site runs no container,
    the image the runtime decision picks for the default node kind; None where neither holds a
    framework (then only the `hpcdl` module is rendered)."""
    if site.runtime == "none":
        return NATIVE
    if runtime_for(site.runtime).srun_options:
        # pyxis's and the container engine's words are srun's options: a wrapper run outside srun (`python` on a login
        # node, or under another launcher) cannot start the image with them
        return None
    name = image_name_for_site(site)
    if name is None:
        return None
    images = images_table()
    if name not in images:
        raise HpcdlError(f"defaults.image: {name!r} (site {site.name!r}) is not one of {', '.join(sorted(images))} "
                         f"({IMAGES_YAML})")
    return images[name]

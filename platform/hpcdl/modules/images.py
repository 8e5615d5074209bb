"""Which image a site's framework modules wrap, and the framework versions inside it.

This is the seam to containers/images.yaml (issue 5): until that lands, the table below
is the generator's input. To wire it up, build `IMAGES` from images.yaml; nothing else
in hpcdl.modules reads image facts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from hpcdl.errors import HpcdlError
from hpcdl.sites.schema import Site


@dataclass(frozen=True)
class ImageFrameworks:
    """An image (or, for runtime `none`, a native install) and the framework versions it holds."""

    name: str
    frameworks: dict[str, str]  # framework -> version, e.g. {"pytorch": "2.13.0"}


# Versions follow pyproject.toml's pins (torch 2.13.0, tensorflow-cpu 2.21.0) where the image
# holds the same build; MXNet's last release is 1.9.1 and lives in its own environment in
# knl-mkldnn (issue 5). The CUDA images carry the GPU builds of the same versions.
IMAGES: dict[str, ImageFrameworks] = {
    "knl-mkldnn": ImageFrameworks("knl-mkldnn", {"pytorch": "2.13.0", "tensorflow": "2.21.0", "mxnet": "1.9.1"}),
    "volta-cuda": ImageFrameworks("volta-cuda", {"pytorch": "2.13.0", "tensorflow": "2.21.0"}),
    "hopper-cuda": ImageFrameworks("hopper-cuda", {"pytorch": "2.13.0", "tensorflow": "2.21.0"}),
}

# Runtime `none`: the frameworks installed in the prefix (pip install '.[torch,tensorflow]').
NATIVE = ImageFrameworks("native", {"pytorch": "2.13.0", "tensorflow": "2.21.0"})


def image_name_for_site(site: Site) -> str | None:
    """defaults.image (a name, or a path whose stem is the name); else chosen from the hardware;
    None when no image is built for it (e.g. AMD GPUs, or A100s: hopper-cuda is built for sm_90)."""
    if site.defaults.image:
        return PurePosixPath(site.defaults.image).name.split(".")[0]
    _, node = site.node_kind()
    # KNL/Xeon CPUs: the oneDNN image. GPUs: the CUDA image built for their architecture
    # (CUDA 13 dropped Volta, sm_70, so V100 nodes need volta-cuda on CUDA 12).
    if not node.gpus:
        return "knl-mkldnn"
    model = node.gpus[0].model.upper()
    if node.gpus[0].vendor != "nvidia":
        return None
    if "V100" in model or "VOLTA" in model:
        return "volta-cuda"
    if any(h in model for h in ("H100", "H200", "GH200", "HOPPER")):
        return "hopper-cuda"
    return None


def frameworks_for_site(site: Site) -> ImageFrameworks | None:
    """What the site's framework modules wrap; None: no image fits, so only `hpcdl` is rendered."""
    if site.runtime == "none":
        return NATIVE
    name = image_name_for_site(site)
    if name is None:
        return None
    if name not in IMAGES:
        raise HpcdlError(f"defaults.image: {name!r} (site {site.name!r}) is not one of {', '.join(sorted(IMAGES))}")
    return IMAGES[name]

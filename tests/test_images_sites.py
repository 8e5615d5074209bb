"""An image for every architecture a shipped or published site has, chosen by the compat check.

Every node kind of every shipped profile and of every profile under tests/published/ (machines
hpcdl does not ship, written from their centres' pages) is walked: each x86_64 or aarch64 kind
has at least one image `compat` accepts, and each image accepts every site it claims (`serves`).
A GPU no hpcdl image is built for (Stanford Sherlock's Pascal P100/P40, sm_60: the CUDA images start at
Volta) is served by the centre's own environment where the profile names one, and the plan says so.
POWER9 (Summit, Lassen) has no PyPI wheels of PyTorch or TensorFlow to build an image from: no
image claims it, and compat refuses every image there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import ROOT
from hpcdl.images.compat import compat, cpu_family
from hpcdl.images.spec import load_images
from hpcdl.plan.model import NATIVE_KINDS, SITE_CONTAINER
from hpcdl.plan.runtime import choose_runtime
from hpcdl.sites import list_sites, load_site
from hpcdl.sites.registry import load_site_file

SPECS = load_images()
PUBLISHED = ROOT / "tests" / "published" / "profiles"


def _sites() -> dict:
    sites = {name: load_site(name) for name in list_sites()}
    for path in sorted(Path(PUBLISHED).glob("*.yaml")):
        sites.setdefault(path.stem, load_site_file(path))
    return sites


SITES = _sites()
KINDS = [(name, kind) for name, site in SITES.items() for kind in site.node_kinds]


def test_the_walk_covers_the_published_machines_too():
    assert {"alps-gh200", "vista", "stampede3", "expanse", "perlmutter", "summit"} <= set(SITES)


@pytest.mark.parametrize("site,kind", KINDS, ids=[f"{s}:{k}" for s, k in KINDS])
def test_every_node_kind_has_an_image_compat_accepts_unless_it_is_power(site, kind):
    node = SITES[site].node_kind(kind)[1]
    fits = [name for name, spec in SPECS.items() if not compat(spec, SITES[site], kind)]
    if cpu_family(node.cpu_target) == "ppc64le":
        assert fits == [], f"{site}:{kind} is POWER9: no PyPI wheels, yet {fits} pass"
        return
    images = [name for name in fits if SPECS[name].gpu] if node.gpus else fits
    if not images and SITES[site].environment_for(kind) is not None:
        # SiteEnvironment: the centre's own environment (the kind's own, or the site's) runs "where no hpcdl image
        # fits the node kind" (N8 CIR Bede's GH200 nodes: its Open MPI 4 bede-mpirun starts neither aarch64 image's
        # MPI); the job runs there, never a placeholder image
        # for the frameworks it holds: PyTorch, else its first (MASSIVE M3's P100s, for which no hpcdl image is built:
        # TensorFlow 2 from its users' own conda, the one route MASSIVE publishes there)
        held = SITES[site].environment_for(kind).frameworks
        choice = choose_runtime(SITES[site], kind, "pytorch" if "pytorch" in held else held[0], use_gpus=bool(node.gpus))
        assert choice.kind in (*NATIVE_KINDS, SITE_CONTAINER), f"{site}:{kind}: no image fits, yet {choice}"
        return
    assert fits, f"no image serves {site}:{kind}"
    assert images, f"{site}:{kind} has GPUs but only CPU images serve it: {fits}"


@pytest.mark.parametrize("name", sorted(SPECS))
def test_each_image_is_accepted_on_every_site_it_claims(name):
    spec = SPECS[name]
    for claim in spec.serves:
        site, _, kind = claim.partition(":")
        assert site in SITES, f"{name}: serves names unknown site {site!r}"
        assert compat(spec, SITES[site], kind or None) == [], f"{name} on {claim}"


def test_every_architecture_has_a_cpu_and_a_gpu_image():
    archs = {(s.arch, s.gpu) for s in SPECS.values()}
    assert {("x86_64", False), ("x86_64", True), ("aarch64", False), ("aarch64", True)} <= archs
    cuda_archs = {a for s in SPECS.values() if s.cuda for a in s.cuda.gpu_archs}
    assert {"sm_70", "sm_80", "sm_90"} <= cuda_archs


def test_docs_name_every_image_with_its_architecture():
    """docs/images.md's table: one row per image, with the spec's architecture."""
    rows = {line.split("|")[1].strip(): line for line in (ROOT / "docs" / "images.md").read_text().splitlines()
            if line.startswith("| ") and line.count("|") >= 8}
    for name, spec in SPECS.items():
        assert name in rows, f"docs/images.md has no row for {name}"
        assert f"| {spec.arch} |" in rows[name], name

"""Read a SIF file's header and descriptors as the SIF format lays them out, without siftool.

The layout is the one in apptainer/sif, pkg/sif/sif.go (the global header) and
pkg/sif/descriptor.go (rawDescriptor), both written little-endian with Go's encoding/binary,
which packs fields without padding:

    header: launch script [32] | magic "SIF_MAGIC" [10] | version "01" [3] | arch "02" [3] |
            id [16] | ctime, mtime, dfree, dtotal, descroff, descrlen, dataoff, datalen (int64)
    descriptor: datatype int32 | used bool | id, groupid, linkedid uint32 |
                offset, size, size with padding, ctime, mtime, uid, gid int64 | name [128] | extra [384]

A descriptor's group is groupid without the mask 0xf0000000 (0: in no group). `apptainer build`
puts every object in group 1 (sif.NewDescriptorInput's default, DescrDefaultGroup), and
`apptainer sign`/`verify` work per object group, so a SIF whose objects are in no group cannot
be signed. Apptainer's own SIF: a Def.FILE, any JSON.Generic objects, then the SquashFS primary
system partition (internal/pkg/build/assemblers/sif.go, createSIF).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

from hpcdl.errors import HpcdlError

LAUNCH = b"#!/usr/bin/env run-singularity\n"
MAGIC = b"SIF_MAGIC"
HEADER = struct.Struct("<32s10s3s3s16s8q")
DESCRIPTOR = struct.Struct("<i?IIIqqqqqqq128s384s")
PARTITION = struct.Struct("<ii3s")
GROUP_MASK = 0xF0000000
#: sif.go's Datatype values (0x4001 up) and their names as siftool prints them
DATATYPES = {0x4001: "Def.FILE", 0x4002: "Env.Vars", 0x4003: "JSON.Labels", 0x4004: "FS", 0x4005: "Signature",
             0x4006: "JSON.Generic", 0x4007: "Generic/Raw", 0x4008: "Cryptographic Message", 0x4009: "SBOM"}
FSTYPES = {1: "Squashfs", 2: "Ext3", 3: "Archive", 4: "Raw", 5: "Encrypted squashfs"}
PARTTYPES = {1: "System", 2: "PrimSys", 3: "Data", 4: "Overlay"}
#: sif.go's HdrArch codes, by the machine names (uname -m) hpcdl's specs use
ARCH_CODES = {"x86_64": "02", "aarch64": "04", "ppc64le": "06"}


@dataclass
class Descriptor:
    datatype: str
    id: int
    group: int
    link: int
    offset: int
    size: int
    name: str
    fstype: str | None = None
    parttype: str | None = None
    arch: str | None = None


@dataclass
class Sif:
    launch: bytes
    version: str
    arch: str
    descriptors: list[Descriptor] = field(default_factory=list)

    def of_type(self, datatype: str) -> list[Descriptor]:
        return [d for d in self.descriptors if d.datatype == datatype]

    @property
    def primary(self) -> Descriptor | None:
        return next((d for d in self.descriptors if d.parttype == "PrimSys"), None)


def _text(raw: bytes) -> str:
    return raw.rstrip(b"\0").decode("ascii", "replace")


def read_sif(path: Path | str) -> Sif:
    path = Path(path)
    with open(path, "rb") as f:
        head = f.read(HEADER.size)
        if len(head) < HEADER.size:
            raise HpcdlError(f"{path}: not a SIF file (shorter than its header)")
        launch, magic, version, arch, _id, _ct, _mt, _free, total, descroff, descrlen, _doff, _dlen = HEADER.unpack(head)
        if magic.rstrip(b"\0") != MAGIC:
            raise HpcdlError(f"{path}: not a SIF file (no SIF_MAGIC)")
        sif = Sif(launch=launch.rstrip(b"\0"), version=_text(version), arch=_text(arch))
        f.seek(descroff)
        for _ in range(total):
            raw = f.read(DESCRIPTOR.size)
            if len(raw) < DESCRIPTOR.size:
                break
            dtype, used, did, gid, link, offset, size, _pad, _c, _m, _u, _g, name, extra = DESCRIPTOR.unpack(raw)
            if not used:
                continue
            d = Descriptor(datatype=DATATYPES.get(dtype, hex(dtype)), id=did, group=gid & ~GROUP_MASK & 0xFFFFFFFF,
                           link=link & ~GROUP_MASK & 0xFFFFFFFF, offset=offset, size=size, name=_text(name))
            if d.datatype == "FS":
                fs, pt, parch = PARTITION.unpack(extra[:PARTITION.size])
                d.fstype, d.parttype, d.arch = FSTYPES.get(fs, str(fs)), PARTTYPES.get(pt, str(pt)), _text(parch)
            sif.descriptors.append(d)
    return sif


def sif_problems(sif: Sif, arch: str) -> list[str]:
    """Where a SIF differs from what `apptainer build` writes for an image of `arch`."""
    problems = []
    if sif.launch != LAUNCH.rstrip(b"\0"):
        problems.append(f"launch script {sif.launch!r}, not {LAUNCH!r}")
    if sif.version != "01":
        problems.append(f"SIF version {sif.version}, not 01")
    primary = sif.primary
    if primary is None or primary.fstype != "Squashfs":
        problems.append("no SquashFS primary system partition")
    elif primary.arch != ARCH_CODES[arch] or sif.arch != ARCH_CODES[arch]:
        problems.append(f"architecture {sif.arch}/{primary.arch}, not {ARCH_CODES[arch]} ({arch})")
    if not sif.of_type("Def.FILE"):
        problems.append("no definition file object")
    ungrouped = [f"{d.id} ({d.datatype})" for d in sif.descriptors if d.group == 0 and d.datatype != "Signature"]
    if ungrouped:
        problems.append(f"objects {', '.join(ungrouped)} are in no object group (apptainer build puts them in "
                        "group 1; sign and verify work per group)")
    return problems

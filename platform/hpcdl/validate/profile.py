"""Write the thread sweep's best placement back into a site profile file.

The profile's comments carry the sources of its facts, so the two settings are edited in
place (and the result re-read to prove nothing else moved); only a profile whose layout
cannot be edited that way is rewritten whole.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from pydantic import ValidationError

from hpcdl.errors import HpcdlError, validation_message
from hpcdl.files import write_atomically
from hpcdl.sites.detect import site_to_yaml
from hpcdl.sites.schema import Site


def best_placement(measurements: list[dict]) -> tuple[int, int] | None:
    best = [m for m in measurements if m.get("series") == "thread_sweep" and m.get("best")]
    return (best[0]["ranks_per_node"], best[0]["threads_per_rank"]) if best else None


def profile_settings(site: Site, kind: str, ranks_per_node: int, threads: int) -> tuple[dict, list[str]]:
    node = site.node_kinds[kind]
    settings, notes = {"default_threads_per_rank": threads}, []
    if ranks_per_node % node.sockets == 0:
        settings["default_ranks_per_socket"] = ranks_per_node // node.sockets
    else:
        notes.append(f"{ranks_per_node} rank(s) on {node.sockets} sockets is not a whole number per socket: "
                     "only the threads were written (use --mode per-node for one rank per node)")
    if threads > node.cores // ranks_per_node:
        notes.append("more threads than cores per rank: the planner caps default_threads_per_rank at the "
                     "rank's cores, so pass --threads-per-rank to use hardware threads")
    return settings, notes


def write_profile(path: Path, site: Site, kind: str, ranks_per_node: int, threads: int) -> list[str]:
    """Set the node kind's defaults in the profile at `path` (created from `site` if it does not exist)."""
    settings, notes = profile_settings(site, kind, ranks_per_node, threads)
    path = Path(path)
    text = path.read_text() if path.exists() else site_to_yaml(site)
    data = yaml.safe_load(text)
    if not isinstance(data, dict) or kind not in (data.get("node_kinds") or {}):
        raise HpcdlError(f"{path}: node_kinds.{kind}: not in this profile")
    want = yaml.safe_load(text)
    want["node_kinds"][kind].update(settings)
    edited = _edit_in_place(text, kind, settings)
    if edited is None or yaml.safe_load(edited) != want:
        edited = yaml.safe_dump(want, sort_keys=False)
        notes.append(f"{path}: rewritten whole (its layout could not be edited in place; comments are lost)")
    try:
        Site.model_validate(yaml.safe_load(edited))  # still a valid profile, or nothing is written
    except ValidationError as exc:
        raise HpcdlError(validation_message(exc, str(path))) from None
    write_atomically(path, edited)
    return notes


def _edit_in_place(text: str, kind: str, settings: dict) -> str | None:
    lines = text.splitlines(keepends=True)
    top = next((i for i, l in enumerate(lines) if re.match(r"^node_kinds:\s*(#.*)?$", l)), None)
    if top is None:
        return None
    start = next((i for i in range(top + 1, len(lines)) if re.match(rf"^(\s+){re.escape(kind)}:\s*(#.*)?$", lines[i])), None)
    if start is None:
        return None
    indent = len(lines[start]) - len(lines[start].lstrip())
    end, child = start + 1, None
    while end < len(lines):
        line = lines[end]
        if line.strip() and not line.lstrip().startswith("#"):
            depth = len(line) - len(line.lstrip())
            if depth <= indent:
                break
            child = depth if child is None else child
        end += 1
    if child is None:
        return None
    for key, value in settings.items():
        pattern = re.compile(rf"^{' ' * child}{key}:[^#\n]*(#.*)?$")
        hit = next((i for i in range(start + 1, end) if pattern.match(lines[i].rstrip("\n"))), None)
        if hit is not None:
            comment = pattern.match(lines[hit].rstrip("\n")).group(1)
            lines[hit] = f"{' ' * child}{key}: {value}" + (f"  {comment}" if comment else "") + "\n"
        else:
            while end > start + 1 and not lines[end - 1].strip():
                end -= 1
            lines.insert(end, f"{' ' * child}{key}: {value}  # best of `hpcdl validate` thread sweep\n")
            end += 1
    return "".join(lines)

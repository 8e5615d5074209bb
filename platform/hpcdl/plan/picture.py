"""`hpcdl plan --picture FILE.png`: one node of a plan, drawn.

Each socket is a box of cores coloured by the rank bound to them (grey: left to the system,
white: idle), with the socket's GPUs and NIC ports below it, each labelled with the rank(s)
that use it. The picture reads the plan and the site profile only; it decides nothing.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from hpcdl.errors import HpcdlError

from hpcdl.plan.model import Plan
from hpcdl.sites.schema import NodeKind, Site

RESERVED = "#b0b0b0"
IDLE = "#ffffff"


def rank_colours(count: int) -> list[tuple[float, float, float, float]]:
    """Distinct colours, greys left out so no rank looks like a reserved core."""
    import matplotlib

    cmap = matplotlib.colormaps["tab20"]
    order = [i for i in range(0, 20, 2) if i != 14] + [i for i in range(1, 20, 2) if i != 15]
    return [cmap(order[i % len(order)]) for i in range(count)]


def draw_node(site: Site, plan: Plan, path: Path) -> Path:
    """Draw node 0 of `plan` to a PNG at `path`, written atomically."""
    from hpcdl.extras import need

    matplotlib = need("matplotlib", "--picture")

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch, Patch, Rectangle

    node = site.node_kinds[plan.node_kind]
    local = plan.local_ranks()
    colours = rank_colours(len(local))
    # ranks that find their cores near their GPU at run time (rank_cpus: gpu-local) hold none the plan could draw
    near_gpu = plan.rank_cpus == "gpu-local"
    owner = {} if near_gpu else {c: r.local_rank for r in local for c in r.cores}
    usable = {c for s in range(node.sockets) for c in node.usable_cores_of_socket(s)}

    cols = _columns(node)
    rows = math.ceil(node.cores_per_socket / cols)
    device_rows = 2 if node.gpus else 1
    numa_labels = 1.2 if node.domains_per_socket > 1 and cols == node.cores_per_domain else 0.0
    sock_w, sock_h = cols + 1.0 + numa_labels, rows + 1.3 + 1.5 * device_rows
    fig_w = max(7.0, node.sockets * sock_w * 0.62 + 1.0)
    fig, ax = plt.subplots(figsize=(fig_w, sock_h * 0.62 + 1.6))

    for s in range(node.sockets):
        x0 = s * (sock_w + 0.6)
        ax.add_patch(FancyBboxPatch((x0, 0), sock_w, sock_h, boxstyle="round,pad=0.05,rounding_size=0.3",
                                    fc="#f4f4f8", ec="#333333", lw=1.5))
        ax.text(x0 + 0.3, sock_h - 0.45, f"socket {s}", fontsize=11, weight="bold", va="center")
        for i, core in enumerate(node.cores_of_socket(s)):
            cx, cy = x0 + 0.5 + i % cols, sock_h - 1.6 - i // cols
            if core in owner:
                fc = colours[owner[core]]
            else:
                fc = IDLE if core in usable else RESERVED
            ax.add_patch(Rectangle((cx, cy), 0.92, 0.92, fc=fc, ec="#555555", lw=0.6,
                                   hatch="///" if fc == RESERVED else None))
            ax.text(cx + 0.46, cy + 0.46, str(core), ha="center", va="center", fontsize=6.5,
                    color="white" if core in owner else "#333333")
        if node.domains_per_socket > 1 and cols == node.cores_per_domain:
            for d in range(node.domains_per_socket):
                ax.text(x0 + 0.5 + cols + 0.1, sock_h - 1.6 - d + 0.46, f"NUMA {s * node.domains_per_socket + d}",
                        fontsize=7, va="center", color="#333333")
        y = 0.35
        if node.gpus:
            gpus = [g for g, gpu in enumerate(node.gpus) if gpu.socket == s]
            _device_row(ax, x0 + 0.5, y, cols, [
                (f"GPU {g}", [r.local_rank for r in local if g in r.gpus]) for g in gpus], colours)
            y += 1.5
        nics = [n for n in node.nics if n.socket == s]
        _device_row(ax, x0 + 0.5, y, cols, [
            # a port the centre names by neither device nor interface is pinned to no rank (NCCL and UCX pick it)
            (n.name, [r.local_rank for r in local if r.nic == n.name]) if n.name else (n.kind, None) for n in nics],
            colours)

    handles = [Patch(fc=colours[r.local_rank], ec="#555555",
                     label=f"rank {r.local_rank}: {len(r.cores)} cores{' near its GPU, at run time' if near_gpu else ''}, "
                           f"{r.omp_num_threads} threads{_slab(plan, r.rank)}")
               for r in local]
    handles.append(Patch(fc=RESERVED, ec="#555555", hatch="///", label="left to the system"))
    if any(c not in owner for c in usable):
        # with rank_cpus: gpu-local these are every rank's to find near its GPU at run time, not idle
        handles.append(Patch(fc=IDLE, ec="#555555", label="taken at run time near each GPU" if near_gpu else "idle"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.01), ncol=min(4, len(handles)),
              fontsize=8, frameon=False)
    ax.set_title(
        f"{site.name} ({plan.node_kind}): {plan.ranks_per_node} rank(s) per node, {plan.mode}, "
        f"{plan.threads_per_rank} thread(s) each\n{_short(plan.launcher_argv)}\n"
        f"{node.threads_per_core} hardware thread(s) per core, {node.cpu_numbering} numbering{_spatial_line(plan)}",
        fontsize=10,
    )
    ax.set_xlim(-0.3, node.sockets * (sock_w + 0.6) - 0.3)
    ax.set_ylim(-0.3, sock_h + 0.3)
    ax.set_aspect("equal")
    ax.axis("off")
    fig.tight_layout()
    return _save_atomically(fig, Path(path))


def _slab(plan: Plan, rank: int) -> str:
    if not plan.spatial:
        return ""
    group, slab = plan.spatial.group_of(rank)
    return f", spatial group {group} slab {slab}"


def _spatial_line(plan: Plan) -> str:
    s = plan.spatial
    if not s:
        return ""
    groups = " ".join("{" + ",".join(map(str, g)) + "}" for g in s.groups if g[0] < plan.ranks_per_node)
    return (f"\nspatial: {s.ways}-way {s.split} ({s.grid[0]} x {s.grid[1]} slabs); groups on this node {groups}; "
            f"{s.data_parallel_groups} data-parallel group(s)")


def _columns(node: NodeKind) -> int:
    # a socket's cores in a near-square block, wider than tall; with NUMA domains, one per row
    if node.domains_per_socket > 1 and node.cores_per_domain <= 24:
        return node.cores_per_domain
    cols = max(4, math.ceil(math.sqrt(node.cores_per_socket * 2.5)))
    return min(cols, node.cores_per_socket)


def _short(argv: tuple[str, ...], width: int = 100) -> str:
    line = " ".join(argv)
    return line if len(line) <= width else line[: width - 1] + "…"


def _device_row(ax, x: float, y: float, width: int, devices: list[tuple[str, list[int] | None]], colours) -> None:
    from matplotlib.patches import Rectangle

    if not devices:
        return
    w = min(3.2, width / len(devices))
    for i, (label, users) in enumerate(devices):
        left, box_w = x + i * w, w - 0.15
        if not users:
            ax.add_patch(Rectangle((left, y), box_w, 1.2, fc="#ffffff", ec="#333333", lw=1.0))
        # a device shared by several ranks is striped with each rank's colour
        for k, user in enumerate(users or ()):
            ax.add_patch(Rectangle((left + k * box_w / len(users), y), box_w / len(users), 1.2,
                                   fc=colours[user], ec="none"))
        ax.add_patch(Rectangle((left, y), box_w, 1.2, fc="none", ec="#333333", lw=1.0))
        who = ("no device named, no rank pinned" if users is None else "unused" if not users
               else ("rank " if len(users) == 1 else "ranks ") + ", ".join(map(str, users)))
        ax.text(left + box_w / 2, y + 0.6, f"{label}\n{who}", ha="center", va="center", fontsize=7.5,
                color="#111111", bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="none", alpha=0.85))


# formats by file extension; the metadata entry that would carry a timestamp or version is left out
PICTURE_FORMATS = {"png": {"Software": None}, "svg": {"Date": None}, "pdf": {"CreationDate": None}}


def picture_format(path: Path) -> str:
    """The picture's format from its extension (png, svg or pdf); anything else is refused."""
    fmt = Path(path).suffix.lstrip(".").lower()
    if fmt not in PICTURE_FORMATS:
        raise HpcdlError(f"--picture: {path}: give a file ending in {', '.join('.' + f for f in PICTURE_FORMATS)}; "
                         f"the format follows the extension")
    return fmt


def _save_atomically(fig, path: Path) -> Path:
    import io

    import matplotlib.pyplot as plt

    from hpcdl.files import write_atomically

    fmt = picture_format(path)
    if not path.parent.is_dir():
        plt.close(fig)
        raise HpcdlError(f"--picture: folder {path.parent} does not exist; create it first")
    buffer = io.BytesIO()
    try:
        # no timestamp in the PNG, so the checked-in pictures equal what this draws now
        fig.savefig(buffer, dpi=110, format=fmt, bbox_inches="tight", pad_inches=0.15, metadata=PICTURE_FORMATS[fmt])
    finally:
        plt.close(fig)
    umask = os.umask(0)
    os.umask(umask)
    write_atomically(path, buffer.getvalue(), mode=0o666 & ~umask)  # a picture is for everyone
    return path

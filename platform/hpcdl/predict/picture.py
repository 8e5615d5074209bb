"""The prediction as a picture: throughput against ideal, efficiency, and where an iteration's time goes."""

from __future__ import annotations

from pathlib import Path


def draw_prediction(prediction, path: Path) -> Path:
    from hpcdl.extras import need

    matplotlib = need("matplotlib", "--picture")

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = prediction.rows
    nodes = [r.nodes for r in rows]
    fig, (ax_x, ax_e, ax_t) = plt.subplots(1, 3, figsize=(14, 4))
    base = rows[0].images_per_sec / rows[0].nodes
    ax_x.plot(nodes, [r.images_per_sec for r in rows], marker="o", label="predicted")
    ax_x.plot(nodes, [base * n for n in nodes], ls="--", color="grey", label="ideal")
    ax_x.set(xscale="log", yscale="log", xlabel="nodes", ylabel="images/s", title="Throughput")
    ax_e.plot(nodes, [r.efficiency for r in rows], marker="o")
    ax_e.set(xscale="log", xlabel="nodes", ylabel="E(N)", title=f"{prediction.mode} scaling efficiency", ylim=(0, 1.05))
    bottom = [0.0] * len(rows)
    for label, part in (("compute", "compute_s"), ("halo", "halo_s"), ("exposed comm", "exposed_comm_s"),
                        ("data", "data_s"), ("update", "update_s"), ("wait for slowest", "straggler_s")):
        values = [getattr(r, part) * 1e3 for r in rows]
        ax_t.bar([str(n) for n in nodes], values, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax_t.set(xlabel="nodes", ylabel="ms per iteration", title="Time per iteration")
    for ax in (ax_x, ax_e, ax_t):
        ax.grid(alpha=0.3)
    ax_x.legend(fontsize=8)
    ax_t.legend(fontsize=8)
    fig.suptitle(f"{prediction.site}: {prediction.net}, {prediction.plan.ranks_per_node} rank(s) per node")
    fig.tight_layout()
    return write_png(fig, path, dpi=100)


def write_png(fig, path: Path, dpi: int) -> Path:
    """A matplotlib figure as a PNG, written whole (no half picture on a crash) and without a date, so
    the same figures give the same bytes; the figure is closed."""
    import io

    import matplotlib.pyplot as plt

    from hpcdl.files import PNG_METADATA, write_atomically

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, metadata=PNG_METADATA)
    plt.close(fig)
    write_atomically(Path(path), buffer.getvalue(), mode=0o644)
    return Path(path)

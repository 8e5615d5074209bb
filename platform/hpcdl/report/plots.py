"""The report's plots (matplotlib, Agg): scaling, thread sweep, collectives, throughput."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# no version or date in the files, so the same results give the same pictures
PNG_METADATA = {"Software": None}


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata=PNG_METADATA)
    plt.close(fig)
    return path


def scaling_plot(points: list[dict], path: Path) -> Path | None:
    if not points:
        return None
    fig, (ax_x, ax_e) = plt.subplots(1, 2, figsize=(10, 4))
    unit = points[0].get("unit", "node")
    for mode, marker in (("weak", "o"), ("strong", "s")):
        mine = sorted((p for p in points if p["mode"] == mode), key=lambda p: p["p"])
        if not mine:
            continue
        ps = [p["p"] for p in mine]
        line = ax_x.plot(ps, [p["images_per_sec"] for p in mine], marker=marker, label=f"{mode} (measured)")[0]
        base = mine[0].get("baseline_images_per_sec")
        if base:
            ax_x.plot(ps, [p * base for p in ps], ls="--", color=line.get_color(), alpha=0.6, label=f"{mode} (ideal)")
        eff = [(p["p"], p["efficiency"]) for p in mine if p.get("efficiency") is not None]
        if eff:
            ax_e.plot(*zip(*eff), marker=marker, label=mode)
            for x, e in eff:
                ax_e.annotate(f"{e:.0%}", (x, e), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
    label = "nodes" if unit == "node" else "ranks on one node"
    ax_x.set(xlabel=label, ylabel="images/s (measured aggregate)", title="Training throughput")
    ax_e.axhline(1.0, color="grey", lw=0.8, ls=":")
    ax_e.set(xlabel=label, ylabel="E(p) = X(p) / (p X(1))", title="Scaling efficiency", ylim=(0, 1.2))
    for ax in (ax_x, ax_e):
        ax.set_xticks(sorted({p["p"] for p in points}))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return _save(fig, path)


def thread_sweep_plot(points: list[dict], path: Path) -> Path | None:
    if not points:
        return None
    points = sorted(points, key=lambda p: (p["ranks_per_node"], p["threads_per_rank"]))
    fig, ax = plt.subplots(figsize=(6, 4))
    labels = [f"{p['ranks_per_node']} x {p['threads_per_rank']}" for p in points]
    colours = ["tab:green" if p.get("best") else "tab:blue" for p in points]
    bars = ax.bar(labels, [p["images_per_sec"] for p in points], color=colours)
    for bar, p in zip(bars, points):
        ax.annotate(f"{p['images_per_sec']:,.0f}" + (" (best)" if p.get("best") else ""),
                    (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=8)
    ax.set(xlabel="ranks per node x OpenMP threads per rank", ylabel="images/s", title="Thread sweep on one node")
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def collectives_plot(points: list[dict], path: Path) -> Path | None:
    if not points:
        return None
    series = defaultdict(list)
    for p in points:
        series[(p["backend"], p["scope"], p["ranks"])].append(p)
    fig, (ax_bw, ax_t) = plt.subplots(1, 2, figsize=(10, 4))
    for (backend, scope, ranks), mine in sorted(series.items()):
        mine.sort(key=lambda p: p["bytes"])
        sizes = [p["bytes"] for p in mine]
        name = f"{backend}, {scope}, {ranks} ranks"
        line = ax_bw.plot(sizes, [p["busbw_GBps"] for p in mine], marker="o", ms=3, label=f"{name}: busbw")[0]
        ax_bw.plot(sizes, [p["algbw_GBps"] for p in mine], ls="--", color=line.get_color(), alpha=0.6, label=f"{name}: algbw")
        ax_t.plot(sizes, [p["time_us"] for p in mine], marker="o", ms=3, color=line.get_color(), label=name)
    ax_bw.set(xscale="log", yscale="log", xlabel="message size (bytes)", ylabel="GB/s",
              title="Allreduce bandwidth (nccl-tests definitions)")
    ax_t.set(xscale="log", yscale="log", xlabel="message size (bytes)", ylabel="time per allreduce (us)",
             title="Allreduce time")
    for ax in (ax_bw, ax_t):
        ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    return _save(fig, path)


def throughput_plot(points: list[dict], path: Path) -> Path | None:
    if not points:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    labels = [f"{p['net']}\n{p['framework']}, {p['ranks']} ranks" for p in points]
    bars = ax.bar(labels, [p["images_per_sec"] for p in points], color="tab:purple")
    for bar, p in zip(bars, points):
        ax.annotate(f"{p['images_per_sec']:,.0f}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=8)
    ax.set(ylabel="images/s", title="Single-node training throughput")
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)

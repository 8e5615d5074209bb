"""The report's plots (matplotlib, Agg): scaling, thread sweep, collectives, throughput, trend.

Where a value was judged, its reference (dotted) and bound (dashed, red) are drawn on the plot,
so a bar or a point that failed is seen against the line it missed.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from hpcdl.files import PNG_METADATA  # noqa: E402


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata=PNG_METADATA)
    plt.close(fig)
    return path


def _judged(verdicts, prefix: str) -> list:
    return [v for v in (verdicts or ()) if v.name.startswith(prefix) and v.bound is not None]


def _ref_lines(ax, reference: float | None, bound: float | None, label: str = "") -> None:
    if reference is not None:
        ax.axhline(reference, color="grey", ls=":", lw=1, label=f"reference{label}")
    if bound is not None:
        ax.axhline(bound, color="tab:red", ls="--", lw=1, label=f"bound{label}")


def scaling_plot(points: list[dict], path: Path, verdicts=()) -> Path | None:
    if not points:
        return None
    fig, (ax_x, ax_e) = plt.subplots(1, 2, figsize=(10, 4))
    unit = points[0].get("unit", "node")
    # weak labels above their points, strong below: the two often meet at the same p
    for mode, marker, label_at in (("weak", "o", (0, 6)), ("strong", "s", (0, -13))):
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
                ax_e.annotate(f"{e:.0%}", (x, e), textcoords="offset points", xytext=label_at, ha="center", fontsize=8)
    for v in _judged(verdicts, "scaling/")[:1]:  # one efficiency reference serves all points (patterns)
        if v.name.endswith("/efficiency"):
            _ref_lines(ax_e, v.reference, v.bound)
    label = "nodes" if unit == "node" else "ranks on one node"
    ax_x.set(xlabel=label, ylabel="images/s (measured aggregate)", title="Training throughput")
    ax_e.axhline(1.0, color="grey", lw=0.8, ls=":")
    ax_e.set(xlabel=label, ylabel="E(p) = X(p) / (p X(1))", title="Scaling efficiency", ylim=(0, 1.2))
    for ax in (ax_x, ax_e):
        ax.set_xticks(sorted({p["p"] for p in points}))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return _save(fig, path)


def thread_sweep_plot(points: list[dict], path: Path, verdicts=()) -> Path | None:
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
    for v in _judged(verdicts, "threads/best/")[:1]:  # one pair of lines, one pair of legend entries
        _ref_lines(ax, v.reference, v.bound, " (best)")
        ax.legend(fontsize=8)
    ax.set(xlabel="ranks per node x OpenMP threads per rank", ylabel="images/s", title="Thread sweep on one node")
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def collectives_plot(points: list[dict], path: Path, verdicts=()) -> Path | None:
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
        busbw, algbw = [p["busbw_GBps"] for p in mine], [p["algbw_GBps"] for p in mine]
        # busbw = algbw x 2(n-1)/n: on 2 ranks the two are one line, said once rather than hidden
        same = all(abs(b - a) <= 1e-9 * max(abs(a), 1e-30) for a, b in zip(algbw, busbw))
        line = ax_bw.plot(sizes, busbw, marker="o", ms=3,
                          label=f"{name}: busbw" + (" = algbw" if same else ""))[0]
        if not same:
            ax_bw.plot(sizes, algbw, ls="--", color=line.get_color(), alpha=0.6, label=f"{name}: algbw")
        ax_t.plot(sizes, [p["time_us"] for p in mine], marker="o", ms=3, color=line.get_color(), label=name)
        # the judged points: busbw at the largest message, time at the smallest, against their bounds
        for v in _judged(verdicts, f"collectives/{backend}/{scope}/"):
            ax, x = (ax_bw, sizes[-1]) if v.name.endswith("busbw_GBps") else (ax_t, sizes[0])
            ax.plot([x], [v.bound], marker="_", ms=18, mew=2, color="tab:red")
            ax.annotate(f"bound {v.bound:.3g}", (x, v.bound), textcoords="offset points", xytext=(0, 4),
                        ha="right" if x == sizes[-1] else "left", fontsize=7, color="tab:red")
    ax_bw.set(xscale="log", yscale="log", xlabel="message size (bytes)", ylabel="GB/s",
              title="Allreduce bandwidth (nccl-tests definitions)")
    ax_t.set(xscale="log", yscale="log", xlabel="message size (bytes)", ylabel="time per allreduce (us)",
             title="Allreduce time")
    for ax in (ax_bw, ax_t):
        ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    return _save(fig, path)


def throughput_plot(points: list[dict], path: Path, verdicts=()) -> Path | None:
    if not points:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    labels = [f"{p['net']}\n{p['framework']}, {p['ranks']} ranks" for p in points]
    bars = ax.bar(labels, [p["images_per_sec"] for p in points], color="tab:purple")
    for bar, p in zip(bars, points):
        ax.annotate(f"{p['images_per_sec']:,.0f}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=8)
    for bar, p in zip(bars, points):
        name = f"throughput/{p['net']}/{p['framework']}/images_per_sec"
        for v in _judged(verdicts, name):
            x0, w = bar.get_x(), bar.get_width()
            ax.hlines(v.reference, x0, x0 + w, colors="grey", linestyles=":", lw=1.5)
            ax.hlines(v.bound, x0, x0 + w, colors="tab:red", linestyles="--", lw=1.5)
            # inside the bar's span, right-aligned: past its edge the label leaves the axes
            ax.annotate(f"bound {v.bound:,.0f}", (x0 + w, v.bound), fontsize=7, color="tab:red", va="bottom",
                        ha="right")
    ax.set(ylabel="images/s", title="Single-node training throughput\n(dotted: reference, dashed: bound)")
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def trend_plot(runs: list[tuple[str, object]], path: Path, most: int = 12) -> Path | None:
    """Each judged value over the runs (oldest first), with its reference and bound; needs two runs."""
    labels = sorted({r for r, _ in runs})
    if len(labels) < 2:
        return None
    series: dict[str, list] = defaultdict(list)
    for run, v in runs:
        # performance over time; the environment's rank count is a yes/no fact, a flat line
        if v.name.startswith("environment/"):
            continue
        if v.result in ("pass", "fail") and isinstance(v.value, (int, float)) and not isinstance(v.value, bool):
            series[v.name].append((labels.index(run), v))
    names = [n for n in sorted(series) if len({i for i, _ in series[n]}) >= 2][:most]
    if not names:
        return None
    cols = min(3, len(names))
    rows = (len(names) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.8 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names):
        mine = sorted(series[name], key=lambda p: p[0])
        xs = [i for i, _ in mine]
        ax.plot(xs, [v.value for _, v in mine], marker="o", ms=4, color="tab:blue")
        for i, v in mine:
            if v.result == "fail":
                ax.plot([i], [v.value], marker="x", ms=8, mew=2, color="tab:red")
        last = mine[-1][1]
        ax.plot(xs, [v.reference for _, v in mine], color="grey", ls=":", lw=1)
        ax.plot(xs, [v.bound for _, v in mine], color="tab:red", ls="--", lw=1)
        ax.set_title(name, fontsize=8)
        ax.set_ylabel(last.unit or "", fontsize=7)
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels([_run_label(lab, labels) for lab in labels], rotation=45, ha="right", fontsize=6)
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    return _save(fig, path)


def _run_label(label: str, labels: list[str]) -> str:
    """'11-27 02:26' for a run started 2026-11-27 02:26:14; with its seconds when two runs share the minute."""
    minute = label[5:16]
    return minute if sum(lab[5:16] == minute for lab in labels) == 1 else label[5:19]

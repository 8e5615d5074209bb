"""Calibration from a site's validation results: link latency and bandwidth, and a rank's rate.

`calibrate(records)` reads the records of `hpcdl validate` (results.jsonl): the collectives
check's allreduce sweeps give each level's alpha and beta through the ring cost the library
used (t = 2(p-1) alpha + 2 (p-1)/p n beta; nccl-tests' busbw is the same correction), and the
one-rank (or one-node) point of the scaling check gives the rate of one rank in training
FLOP/s. The result is kept beside the site's references as `<site>.calibration.yaml`
(`hpcdl predict --calibrate-from RESULTS --save`), and found the way references are.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import yaml

from hpcdl.errors import HpcdlError
from hpcdl.predict.collectives import Link


@dataclass(frozen=True)
class MeasuredLink:
    library: str
    scope: str  # intra-node or inter-node
    ranks: int
    latency_us: float
    gbyte_s: float
    # the sweep itself, [bytes, microseconds] per size: the model reads a message's time off it where
    # the message falls inside it among as many ranks (files written before it have none)
    points: tuple = ()

    def link(self) -> Link:
        link = Link.of(self.latency_us, self.gbyte_s)
        sweep = tuple((float(b), float(us) * 1e-6) for b, us in self.points)
        return replace(link, measured=sweep, measured_ranks=self.ranks) if sweep else link


@dataclass(frozen=True)
class MeasuredCompute:
    net: str
    gpu: bool
    threads_per_rank: int
    batch: int
    images_per_sec_per_rank: float  # as measured
    cpu_share: float  # of a core per thread during that job (1: cores to itself)
    flops_per_s: float  # training FLOP/s of one rank with the host to itself, at a large batch
    source: str
    precision: str = "fp32"
    # spread of the rank's time per display window (stdev / mean) in that job: a lower bound of the
    # per-iteration jitter the wait for the slowest rank is computed from; 0: not measured
    iteration_jitter: float = 0.0

    def batch_half(self, threads: int) -> float:
        return 5.0 if self.gpu else max(1.0, threads / 4)


@dataclass(frozen=True)
class Calibration:
    site: str
    source: str
    links: tuple[MeasuredLink, ...] = ()
    compute: tuple[MeasuredCompute, ...] = ()
    notes: tuple[str, ...] = field(default=())

    def links_for(self, library: str) -> dict[str, Link]:
        wanted = {"horovod": "nccl"}.get(library, library)
        return {m.scope: m.link() for m in self.links if m.library == wanted}

    def compute_for(self, gpu: bool, net: str | None = None, precision: str | None = None) -> MeasuredCompute | None:
        """The measured rate for this kind of rank: the same net and precision first, then the same precision
        (another net's FLOP rate), then any; None where nothing was measured for this kind of rank."""
        kind = [c for c in self.compute if c.gpu == gpu]
        for wanted in ((net, precision), (None, precision), (None, None)):
            for c in kind:
                if (wanted[0] is None or c.net == wanted[0]) and (wanted[1] is None or c.precision == wanted[1]):
                    return c
        return None

    def to_yaml(self) -> str:
        data = {"site": self.site, "source": self.source, "notes": list(self.notes),
                "links": [{**asdict(m), "points": [list(pt) for pt in m.points]} for m in self.links],
                "compute": [asdict(c) for c in self.compute]}
        return yaml.safe_dump(data, sort_keys=False)

    @classmethod
    def from_mapping(cls, data: dict, where: str) -> "Calibration":
        try:
            return cls(site=data["site"], source=data.get("source", where),
                       links=tuple(MeasuredLink(**m) for m in data.get("links") or ()),
                       compute=tuple(MeasuredCompute(**c) for c in data.get("compute") or ()),
                       notes=tuple(data.get("notes") or ()))
        except (KeyError, TypeError) as exc:
            raise HpcdlError(f"{where}: not a calibration file hpcdl understands ({exc})") from None


def fit_link(points: list[dict]) -> MeasuredLink:
    """alpha from the small messages' times, beta from the largest, through the ring cost for p ranks."""
    points = sorted(points, key=lambda r: r["bytes"])
    p = max(2, int(points[0]["ranks"]))
    steps = 2 * (p - 1)
    # the median of the small-message times: one descheduled rank on a shared host turns one
    # point into milliseconds, the median keeps what the wire and the library cost
    small = statistics.median(r["time_us"] for r in points[: max(1, min(3, len(points) // 2))])
    alpha_us = small / steps
    large = points[-1]
    wire_s = max(large["time_us"] - small, 1e-3) * 1e-6
    gbyte_s = (2 * (p - 1) / p) * large["bytes"] / wire_s / 1e9
    sweep = tuple((int(r["bytes"]), float(r["time_us"])) for r in points)
    return MeasuredLink(points[0]["backend"], points[0]["scope"], p, alpha_us, gbyte_s, sweep)


def calibrate(records: list[dict], site: str, source: str) -> Calibration:
    from hpcdl.nets import load_net
    from hpcdl.predict.costs import net_cost

    series: dict[tuple[str, str], list[dict]] = {}
    for r in records:
        if r.get("event") == "measurement" and r.get("series") == "collective":
            series.setdefault((r["backend"], r["scope"]), []).append(r)
    links = tuple(fit_link(points) for _, points in sorted(series.items()))
    compute = []
    for r in records:
        if not (r.get("event") == "measurement" and r.get("series") == "scaling" and r.get("p") == 1
                and r.get("mode") == "weak"):
            continue
        net = r.get("net") or "cifar10_quick"
        ranks = int(r["ranks"])
        threads = int(r.get("threads_per_rank") or 1)
        batch = int(r["global_batch"]) // ranks
        per_rank = r["images_per_sec"] / ranks
        share = r.get("cpu_share") or 1.0
        gpu = bool(r.get("gpu", False))
        half = 5.0 if gpu else max(1.0, threads / 4)
        flops = per_rank * net_cost(load_net(net)).train_flops * (batch + half) / batch / share
        # a CPU rank's single iterations where the trainer timed them, else the display windows' spread (a
        # lower bound); a GPU rank's loop times only the host's queueing of its steps
        jitter = (None if gpu else r.get("iteration_jitter")) or r.get("window_jitter") or 0.0
        compute.append(MeasuredCompute(net, gpu, threads, batch, per_rank, share, flops,
                                       f"{source}: {r.get('job', 'scaling')} ({ranks} rank(s) x {threads} thread(s))",
                                       r.get("precision") or "fp32", float(jitter)))
    if not links and not compute:
        raise HpcdlError(f"{source}: no collectives or one-node scaling measurements to calibrate from "
                         "(run hpcdl validate with the collectives and scaling checks)")
    return Calibration(site, source, links, tuple(compute))


def calibration_path(site: str) -> Path | None:
    from hpcdl.validate.references import references_search_path

    for folder in references_search_path():
        candidate = folder / f"{site}.calibration.yaml"
        if candidate.is_file():
            return candidate
    return None


def load_calibration(site: str, path: Path | None = None) -> Calibration | None:
    """The calibration for `site`: from `path` (a calibration file or a results.jsonl), else found beside its references."""
    import json

    path = Path(path) if path else calibration_path(site)
    if path is None:
        return None
    if path.is_dir():
        path = path / "results.jsonl"
    if not path.is_file():
        raise HpcdlError(f"{path}: no such calibration or results file")
    if path.suffix == ".jsonl":
        records = []
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    raise HpcdlError(f"{path}:{number}: not a JSON record") from None
        return calibrate(records, site, str(path))
    from hpcdl.files import read_yaml_mapping

    return Calibration.from_mapping(read_yaml_mapping(path, "a calibration file"), str(path))

"""Reference values per site, with a tolerance on the worse side only, and the verdicts they give.

A references file (YAML) maps a measurement's name to the value this site should reach:

    references:
      throughput/cifar10_quick/pytorch/images_per_sec: {value: 1500, tolerance: -0.5}
      collectives/gloo/intra-node/latency_us: {value: 300, tolerance: 3.0}
      scaling/weak/*/efficiency: {value: 0.9, tolerance: -0.3}

The model is ReFrame's `reference = {'sys:part': {'pvar': (target, lower, upper, unit)}}`
with thresholds as fractions of the target (reframe docs/tutorial.rst), restricted to the
bound that matters: a throughput may fall at most |tolerance| below its reference (the
tolerance is negative), a latency or time may rise at most `tolerance` above it (positive).
CSCS keeps -5 to -10 % on its ML throughput checks (cscs-reframe-tests); what a value above
a throughput reference means is good news, never a failure. Keys may use shell patterns
(`*`); an exact key wins over a pattern, and the first matching pattern in the file wins.

Files are found, first match wins, as `references/<site>.<node kind>.yaml`, then
`references/<site>.yaml`, beside the site profiles on HPCDL_SITE_PATH, then in
~/.config/hpcdl/sites/references/, then the ones shipped here (hpcdl/validate/references/).
A file names the hardware it was measured on:

    hardware: {node_kind: cpu, cpu_model: "AMD EPYC 7763", gpu_model: ""}

A file for another node kind is not used (the values are logged, and the run says why);
one measured on another CPU (or GPU) model than the site profile's node kind is used, and
every run says so in its output, its results and its report.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal


from hpcdl.errors import HpcdlError
from hpcdl.files import read_yaml_mapping
from hpcdl.sites.registry import site_search_path

SHIPPED = Path(__file__).parent / "references"

Better = Literal["higher", "lower"]


@dataclass(frozen=True)
class Reference:
    value: float
    tolerance: float  # fraction of value; negative for higher-is-better, positive for lower-is-better
    source: str = ""

    def bound(self) -> float:
        return self.value * (1 + self.tolerance)


@dataclass(frozen=True)
class Verdict:
    """One judged measurement: what a person reads in the summary table."""

    check: str
    name: str
    result: Literal["pass", "fail", "info"]
    value: float | str | None
    unit: str = ""
    better: Better | None = None
    reference: float | None = None
    tolerance: float | None = None
    bound: float | None = None
    message: str = ""
    nodes: int | None = None
    nodelist: tuple[str, ...] = ()
    job: str | None = None

    def to_record(self) -> dict:
        data = asdict(self)
        data["nodelist"] = list(self.nodelist)
        return {"event": "verdict", **data}


@dataclass(frozen=True)
class References:
    site: str
    entries: dict[str, Reference]
    expect: dict  # what the environment must provide: framework versions, GPU stack
    source: str
    hardware: dict = field(default_factory=dict)  # what the values were measured on
    warnings: tuple[str, ...] = ()  # said on every run: a different CPU model, another node kind

    def lookup(self, name: str) -> Reference | None:
        if name in self.entries:
            return self.entries[name]
        for key, ref in self.entries.items():
            if any(c in key for c in "*?[") and fnmatch.fnmatchcase(name, key):
                return ref
        return None


def references_search_path() -> list[Path]:
    folders = []
    for entry in site_search_path():
        folder = entry.parent if entry.is_file() else entry
        folders.append(folder / "references")
    return [*folders, SHIPPED]


def find_references(site: str, node_kind: str | None = None) -> Path | None:
    names = ([f"{site}.{node_kind}.yaml"] if node_kind else []) + [f"{site}.yaml"]
    for folder in references_search_path():
        for name in names:
            candidate = folder / name
            if candidate.is_file():
                return candidate
    return None


FIELDS = ("site", "description", "sources", "hardware", "expect", "references")
HARDWARE = ("node_kind", "cpu_model", "gpu_model")


def _same_model(a: str, b: str) -> bool:
    return " ".join(a.lower().split()) == " ".join(b.lower().split())


def load_references(site: str, path: Path | None = None, node_kind: str | None = None, node=None) -> References:
    """The references for `site` (from `path` when given); none found: an empty set, values only logged.

    With `node_kind` and `node` (the site profile's NodeKind), the file's `hardware` is compared
    with them: another node kind's file is not used; another CPU or GPU model is said.
    """
    path = path or find_references(site, node_kind)
    if path is None:
        return References(site, {}, {}, "none (values are logged, not judged)")
    data = read_yaml_mapping(Path(path), "a references file", empty_ok=True)
    unknown = set(data) - set(FIELDS)
    if unknown:
        raise HpcdlError(f"{path}: {sorted(unknown)[0]}: unknown field (known: {', '.join(FIELDS)})")
    hardware = data.get("hardware") or {}
    if not isinstance(hardware, dict) or set(hardware) - set(HARDWARE):
        raise HpcdlError(f"{path}: hardware: give {{node_kind: NAME, cpu_model: TEXT, gpu_model: TEXT}} "
                         "(what the references were measured on)")
    hardware = {k: str(v) for k, v in hardware.items() if v not in (None, "")}
    shown = _shown(Path(path))
    warnings = []
    if node_kind and hardware.get("node_kind") and hardware["node_kind"] != node_kind:
        return References(site, {}, {}, f"none: {shown} was measured on node kind {hardware['node_kind']!r}, "
                          f"not {node_kind!r} (values are logged, not judged)", hardware,
                          (f"{shown} is for node kind {hardware['node_kind']!r}; {node_kind!r} has no references: "
                           f"values are logged, not judged",))
    if node is not None:
        if hardware.get("cpu_model") and node.cpu_model and not _same_model(hardware["cpu_model"], node.cpu_model):
            warnings.append(f"{shown} was measured on {hardware['cpu_model']!r}; this node kind is "
                            f"{node.cpu_model!r}: the references are applied to a different CPU model")
        gpus = {g.model for g in node.gpus if getattr(g, "model", "")}
        if hardware.get("gpu_model") and gpus and not any(_same_model(hardware["gpu_model"], g) for g in gpus):
            warnings.append(f"{shown} was measured on {hardware['gpu_model']!r} GPUs; this node kind has "
                            f"{', '.join(sorted(gpus))}: the references are applied to a different GPU model")
    entries = {}
    for key, raw in (data.get("references") or {}).items():
        entries[str(key)] = _reference(raw, f"{path}: references.{key}", shown)
        _check_side(str(key), entries[str(key)], f"{path}: references.{key}")
    expect = data.get("expect") or {}
    if not isinstance(expect, dict):
        raise HpcdlError(f"{path}: expect: must be a mapping (frameworks, gpu)")
    frameworks = expect.get("frameworks") or {}
    if not isinstance(frameworks, dict):
        raise HpcdlError(f"{path}: expect.frameworks: must map a framework to its version, e.g. pytorch: '2.13.0'")
    return References(site, entries, {**expect, "frameworks": {k: str(v) for k, v in frameworks.items()}}, shown,
                      hardware, tuple(warnings))


def _shown(path: Path) -> str:
    """Shipped files by their place in the package (the same on every machine), others by path."""
    try:
        return f"hpcdl/validate/references/{Path(path).resolve().relative_to(SHIPPED.resolve())}"
    except ValueError:
        return str(path)


LOWER_IS_BETTER = ("latency_us", "time_us", "time_to_solution_s")


def better_for(name: str) -> Better:
    """Times and latencies are better low; throughput, bandwidth, efficiency and accuracy high."""
    return "lower" if name.rsplit("/", 1)[-1] in LOWER_IS_BETTER else "higher"


def _check_side(name: str, ref: Reference, where: str) -> None:
    better = better_for(name)
    if better == "higher" and ref.tolerance > 0 or better == "lower" and ref.tolerance < 0:
        side = "negative (how far below it may fall)" if better == "higher" else "positive (how far above it may rise)"
        raise HpcdlError(f"{where}: {better} is better for this value, so its tolerance must be {side}")


def _reference(raw, where: str, source: str) -> Reference:
    if not isinstance(raw, dict) or set(raw) - {"value", "tolerance", "note"} or "value" not in raw:
        raise HpcdlError(f"{where}: give {{value: NUMBER, tolerance: FRACTION}} (and an optional note)")
    try:
        value, tolerance = float(raw["value"]), float(raw.get("tolerance", 0.0))
    except (TypeError, ValueError):
        raise HpcdlError(f"{where}: value and tolerance must be numbers") from None
    if not math.isfinite(value) or not math.isfinite(tolerance) or tolerance <= -1:
        raise HpcdlError(f"{where}: tolerance must be a finite fraction above -1 (e.g. -0.1 for 10 % below)")
    return Reference(value, tolerance, source)


def judge(
    check: str, name: str, value: float | None, unit: str, better: Better, references: References,
    default: Reference | None = None, **context,
) -> Verdict:
    """Compare one value with its reference; a failure says by how much it missed the bound."""
    ref = references.lookup(name) or default
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return Verdict(check, name, "fail", None, unit, better, message="no value was measured", **context)
    if ref is None:
        return Verdict(check, name, "info", value, unit, better, message="no reference for this site: logged only", **context)
    _check_side(name, ref, f"{ref.source}: references.{name}")
    bound = ref.bound()
    ok = value >= bound if better == "higher" else value <= bound
    fields = dict(reference=ref.value, tolerance=ref.tolerance, bound=bound, **context)
    if ok:
        return Verdict(check, name, "pass", value, unit, better, **fields)
    miss = (value - bound) / bound if bound else float("inf")
    word = "below" if better == "higher" else "above"
    message = (
        f"{_num(value)} {unit} is {abs(miss):.0%} {word} the bound {_num(bound)} {unit} "
        f"(reference {_num(ref.value)}, tolerance {ref.tolerance:+.0%})"
    )
    return Verdict(check, name, "fail", value, unit, better, message=message, **fields)


def _num(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"

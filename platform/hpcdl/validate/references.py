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

Files are found, first match wins, as `references/<site>.yaml` beside the site profiles
on HPCDL_SITE_PATH, then in ~/.config/hpcdl/sites/references/, then the ones shipped
here (hpcdl/validate/references/<site>.yaml).
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import asdict, dataclass
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


def find_references(site: str) -> Path | None:
    for folder in references_search_path():
        candidate = folder / f"{site}.yaml"
        if candidate.is_file():
            return candidate
    return None


def load_references(site: str, path: Path | None = None) -> References:
    """The references for `site` (from `path` when given); none found: an empty set, values only logged."""
    path = path or find_references(site)
    if path is None:
        return References(site, {}, {}, "none (values are logged, not judged)")
    data = read_yaml_mapping(Path(path), "a references file", empty_ok=True)
    unknown = set(data) - {"site", "description", "sources", "expect", "references"}
    if unknown:
        raise HpcdlError(f"{path}: {sorted(unknown)[0]}: unknown field (known: site, description, sources, expect, references)")
    shown = _shown(Path(path))
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
    return References(site, entries, {**expect, "frameworks": {k: str(v) for k, v in frameworks.items()}}, shown)


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

"""Predict scaling before submitting: a compute and communication model of one training iteration.

    prediction = predict(site, recipe, nodes=[1, 2, 4, ...], mode="weak")

Layers (each pure; I/O only in calibration's loading and in the command line):
  costs        FLOPs and gradient bytes per layer, from the net definition
  devices      per-device training rates with their sources
  fabric       latency and bandwidth inside and across nodes, from the site profile
  collectives  alpha-beta costs of ring, tree, recursive doubling, Rabenseifner, hierarchical
  model        the iteration's timeline: compute, per-bucket allreduce overlapped with backward
  calibration  the same numbers measured by `hpcdl validate`
  scenario     site + plan + recipe -> the model's inputs
"""

from __future__ import annotations

from dataclasses import dataclass

from hpcdl.plan import JobRequest, Plan, make_plan
from hpcdl.predict.calibration import Calibration
from hpcdl.predict.costs import net_cost
from hpcdl.predict.model import Iteration, Machine, Workload, scaling
from hpcdl.predict.scenario import Options, machine_for, workload_for
from hpcdl.nets import load_net
from hpcdl.sites.schema import Site


@dataclass(frozen=True)
class Prediction:
    site: str
    net: str
    mode: str
    plan: Plan
    machine: Machine
    workload: Workload
    rows: tuple[Iteration, ...]
    notes: tuple[str, ...]

    def to_list(self) -> list[dict]:
        return [{"site": self.site, "net": self.net, "scaling": self.mode, **row.to_dict()} for row in self.rows]


def predict(site: Site, net: str, batch_per_rank: int, nodes: list[int], mode: str = "weak",
            request: JobRequest | None = None, calibration: Calibration | None = None,
            options: Options = Options(), global_batch: int | None = None) -> Prediction:
    """Images/s, efficiency and the parts of one iteration at each node count (the plan of one node repeats)."""
    request = (request or JobRequest()).model_copy(update={"nodes": 1})
    plan = make_plan(site, request)
    cost = net_cost(load_net(net))
    machine = machine_for(site, plan, calibration, options, cost)
    work = workload_for(plan, cost, batch_per_rank, options)
    rows = scaling(machine, work, plan.ranks_per_node, list(nodes), mode, global_batch)
    notes = [f"compute: {machine.compute_source}", f"network: {machine.network_source}",
             f"gradients: {cost.parameters:,} parameters, {work.gradient_bytes_per_parameter:g} bytes each, "
             + (f"Horovod fusion buffers (up to {work.bucket_bytes / 2**20:g} MiB, closed each "
                f"{work.cycle_s * 1e3:g} ms cycle)" if work.cycle_s else
                f"buckets of {work.bucket_bytes / 2**20:g} MiB" if work.bucket_bytes else "one allreduce per layer")
             + ("" if work.overlap else ", not overlapped with backward"),
             "data: assumed prefetched from node-local storage and hidden behind compute",
             f"wait for the slowest rank: {machine.jitter_source}",
             ("fabric: past " f"{machine.leaf_nodes} nodes (one leaf switch) the bytes cross uplinks tapered "
              f"{machine.taper:g}:1 (the site profile)" if machine.leaf_nodes and machine.taper > 1 else
              "fabric: no leaf size or taper in the profile (nics[].leaf_nodes, nics[].taper): no contention "
              "between nodes counted"),
             *options.notes]
    limit = site.defaults.max_nodes
    if limit and max(nodes) > limit:
        notes.append(f"site {site.name} allows {limit} nodes in one job; larger counts need a reservation")
    return Prediction(site.name, net, mode, plan, machine, work, tuple(rows), tuple(notes))


__all__ = ["Prediction", "predict", "Options", "Calibration"]

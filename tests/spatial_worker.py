"""One rank of the spatial exactness tests (started by tests/test_spatial.py through `hpcdl launch`).

For each case: the same weights and batch on every rank, this rank's slab through SpatialNet,
its part of the loss, backward, the gradient reduction; then every rank saves its loss,
gradients, output slab and batch-norm running statistics for the test to compare with one
rank computing the whole batch.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

from hpcdl.nets.spec import build_spec
from hpcdl.nets.torch_build import build_torch
from hpcdl.train.backends.pytorch.spatial.net import SpatialNet
from hpcdl.train.backends.pytorch.spatial.parallel import loss_part, make_layout, reduce_gradients, slab


def spec_of(case: dict):
    if "net_data" in case:
        return build_spec(case["name"], case["net_data"], tuple(case["shape"]), case["classes"])
    import yaml

    from hpcdl.nets.spec import NET_DIR

    data = yaml.safe_load((NET_DIR / f"{case['net']}.yaml").read_text())
    return build_spec(case["net"], data, tuple(case["shape"]), case["classes"])


def batch_of(case: dict, spec, per_pixel: bool):
    g = torch.Generator().manual_seed(case["seed"])
    n = case["batch"] * case.get("groups", 1)
    x = torch.randn((n, *spec.input_shape), generator=g)
    if per_pixel:
        y = torch.randint(0, spec.num_classes, (n, *spec.input_shape[1:]), generator=g)
    else:
        y = torch.randint(0, spec.num_classes, (n,), generator=g)
    return x, y


def run_case(case: dict, rank: int, world: int, out_dir: str) -> None:
    torch.manual_seed(case["seed"])
    spec = spec_of(case)
    net = build_torch(spec)
    net.train()
    layout = make_layout(case["ways"], case["split"], rank, world)
    model = SpatialNet(net, layout.sg, overlap=case.get("overlap", True))
    per_pixel = model.split_output
    x, y = batch_of(case, spec, per_pixel)
    b = case["batch"]
    x, y = x[layout.data_index * b:(layout.data_index + 1) * b], y[layout.data_index * b:(layout.data_index + 1) * b]
    xs = slab(x, layout)
    ys = slab(y, layout) if per_pixel else y
    weights = torch.tensor(case["class_weights"]) if case.get("class_weights") else None
    out = model(xs)
    pixels = spec.input_shape[1] * spec.input_shape[2]
    loss = loss_part(out, ys, layout, per_pixel, pixels, weights)
    loss.backward()
    params = [p for p in net.parameters()]
    reduce_gradients(params, layout)
    total = loss.detach().clone()
    dist.all_reduce(total)
    total /= layout.data_groups
    rect = None
    if per_pixel:
        rect = layout.sg.grid.owned(layout.sg.index, *spec.layers[-1].out_shape[1:])
    torch.save({
        "loss": float(total), "grads": {n: p.grad.clone() for n, p in net.named_parameters()},
        "output": out.detach().clone(), "rect": rect, "data_index": layout.data_index,
        "buffers": {n: t.clone() for n, t in net.named_buffers()},
    }, os.path.join(out_dir, f"{case['id']}-rank{rank}.pt"))


def main() -> int:
    cases = json.loads(open(sys.argv[1]).read())
    out_dir = sys.argv[2]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=120))
    for case in cases:
        run_case(case, rank, world, out_dir)
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)  # gloo threads may still be joinable at interpreter exit (see hpcdl.train.main)


if __name__ == "__main__":
    sys.exit(main())

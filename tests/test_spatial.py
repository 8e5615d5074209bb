"""Spatial parallelism as a specification: slabs with halo exchange give the loss, gradients,
outputs and batch-norm statistics of one rank computing the whole sample, forward and backward.

The ranks are real processes (hpcdl launch, torch.distributed gloo); one rank computing the
whole batch with the plain CaffeNet is the reference.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hpcdl.nets.spec import build_spec
from hpcdl.nets.torch_build import build_torch
from hpcdl.train.slabs import Grid, Window, bounds, segments

HERE = Path(__file__).parent
THREADS = {"OMP_NUM_THREADS": "1", "HPCDL_PROGRESS": "plain"}

# pooling (MAX with Caffe's ceil mode, AVE with padding), strided convolution, batch norm with
# and without affine, a 5x5 halo, then global pooling and a classifier run replicated;
# a non-square input catches a swapped axis
POOLED_BN = {
    "layers": [
        {"type": "Convolution", "name": "conv1", "num_output": 8, "kernel_size": 3, "pad": 1},
        {"type": "BatchNorm", "name": "bn1"},
        {"type": "Scale", "name": "scale1"},
        {"type": "ReLU", "name": "relu1"},
        {"type": "Pooling", "name": "pool1", "pool": "MAX", "kernel_size": 3, "stride": 2},
        {"type": "Convolution", "name": "conv2", "num_output": 8, "kernel_size": 3, "stride": 2, "pad": 1},
        {"type": "BatchNorm", "name": "bn2", "affine": True},
        {"type": "ReLU", "name": "relu2"},
        {"type": "Pooling", "name": "pool2", "pool": "AVE", "kernel_size": 3, "stride": 1, "pad": 1},
        {"type": "Convolution", "name": "conv3", "num_output": 6, "kernel_size": 5, "pad": 2},
        {"type": "ReLU", "name": "relu3"},
        {"type": "Pooling", "name": "pool3", "pool": "AVE", "global_pooling": True},
        {"type": "InnerProduct", "name": "fc", "num_output": "classes"},
    ],
}
MESH_WEIGHTS = [0.2, 0.8]


def mesh_case(ident, ways, split, **kw):
    return {"id": ident, "net": "mesh", "shape": [18, 16, 12], "classes": 2, "batch": 2, "seed": 3,
            "ways": ways, "split": split, "class_weights": MESH_WEIGHTS, **kw}


def pooled_case(ident, ways, split, **kw):
    return {"id": ident, "name": "pooled_bn", "net_data": POOLED_BN, "shape": [3, 27, 22], "classes": 5,
            "batch": 3, "seed": 4, "ways": ways, "split": split, **kw}


def reference(case: dict) -> dict:
    """One rank, the whole batch, the plain CaffeNet and the plain loss."""
    torch.manual_seed(case["seed"])
    if "net_data" in case:
        spec = build_spec(case["name"], case["net_data"], tuple(case["shape"]), case["classes"])
    else:
        spec = build_spec(case["net"], _net_yaml(case["net"]), tuple(case["shape"]), case["classes"])
    net = build_torch(spec)
    net.train()
    g = torch.Generator().manual_seed(case["seed"])
    n = case["batch"] * case.get("groups", 1)
    x = torch.randn((n, *spec.input_shape), generator=g)
    per_pixel = len(spec.layers[-1].out_shape) == 3
    shape = (n, *spec.input_shape[1:]) if per_pixel else (n,)
    y = torch.randint(0, spec.num_classes, shape, generator=g)
    out = net(x)
    if per_pixel:
        w = torch.tensor(case["class_weights"])
        loss = (torch.nn.functional.cross_entropy(out, y, reduction="none") * w[y]).mean()
    else:
        loss = torch.nn.functional.cross_entropy(out, y)
    loss.backward()
    return {"loss": float(loss.detach()), "grads": {k: p.grad for k, p in net.named_parameters()}, "output": out.detach(),
            "buffers": dict(net.named_buffers())}


def _net_yaml(name):
    import yaml

    from hpcdl.nets.spec import NET_DIR

    return yaml.safe_load((NET_DIR / f"{name}.yaml").read_text())


def run_ranks(world: int, cases: list[dict], tmp_path: Path) -> Path:
    spec = tmp_path / "cases.json"
    spec.write_text(json.dumps(cases))
    out = tmp_path / "out"
    out.mkdir()
    argv = [sys.executable, "-m", "hpcdl", "launch", "-n", str(world), "--oversubscribe", "--",
            sys.executable, str(HERE / "spatial_worker.py"), str(spec), str(out)]
    env = {**os.environ, **THREADS, "PYTHONPATH": os.pathsep.join([str(HERE.parent / "platform"), str(HERE)])}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def check(case: dict, out: Path, world: int) -> None:
    ref = reference(case)
    b = case["batch"]
    for rank in range(world):
        got = torch.load(out / f"{case['id']}-rank{rank}.pt")
        where = f"{case['id']} rank {rank}"
        assert got["loss"] == pytest.approx(ref["loss"], rel=1e-5, abs=1e-6), where
        for name, g in ref["grads"].items():
            torch.testing.assert_close(got["grads"][name], g, rtol=1e-4, atol=1e-5, msg=lambda m: f"{where} {name}: {m}")
        samples = slice(got["data_index"] * b, (got["data_index"] + 1) * b)
        full = ref["output"][samples]
        if got["rect"] is not None:
            (r0, r1), (c0, c1) = got["rect"]
            full = full[..., r0:r1, c0:c1]
        torch.testing.assert_close(got["output"], full, rtol=1e-4, atol=1e-5, msg=lambda m: f"{where} output: {m}")
        if case.get("groups", 1) == 1:
            for name, t in ref["buffers"].items():
                torch.testing.assert_close(got["buffers"][name].to(t.dtype), t, rtol=1e-4, atol=1e-5,
                                           msg=lambda m: f"{where} {name}: {m}")


def test_two_way_rows_give_the_loss_gradients_and_outputs_of_one_rank(tmp_path):
    cases = [mesh_case("mesh-2r", 2, "rows"), pooled_case("pooled-2r", 2, "rows"),
             mesh_case("mesh-2r-no-overlap", 2, "rows", overlap=False)]
    out = run_ranks(2, cases, tmp_path)
    for case in cases:
        check(case, out, 2)


def test_four_way_rows_and_two_by_two_and_hybrid_give_the_results_of_one_rank(tmp_path):
    cases = [mesh_case("mesh-4r", 4, "rows"), mesh_case("mesh-2x2", 4, "rows_and_columns"),
             pooled_case("pooled-4r", 4, "rows"), pooled_case("pooled-2x2", 4, "rows_and_columns"),
             # 2 data-parallel groups of 2-way spatial: gradients averaged across groups, summed inside
             mesh_case("mesh-2x2way", 2, "rows", groups=2)]
    out = run_ranks(4, cases, tmp_path)
    for case in cases:
        check(case, out, 4)


# --- the geometry, pure arithmetic ---------------------------------------------------------

def test_bounds_cover_every_row_once_and_differ_by_at_most_one():
    for n in (1, 7, 16, 1023):
        for parts in (1, 2, 3, 4):
            if parts > n:
                continue
            b = bounds(n, parts)
            assert b[0][0] == 0 and b[-1][1] == n
            assert all(x[1] == y[0] for x, y in zip(b, b[1:]))
            assert max(hi - lo for lo, hi in b) - min(hi - lo for lo, hi in b) <= 1


def test_rows_and_columns_use_the_squarest_grid():
    assert Grid.of(4, "rows_and_columns") == Grid(2, 2)
    assert Grid.of(8, "rows_and_columns") == Grid(4, 2)
    assert Grid.of(6, "rows") == Grid(6, 1)
    assert Grid.of(5, "rows_and_columns") == Grid(5, 1)


def test_a_3x3_window_reads_one_halo_row_each_side_and_its_interior_needs_none():
    w = Window(3, 1, 1)
    assert w.needed((8, 16)) == (7, 17)
    assert w.inside((8, 16), (8, 16)) == (9, 15)
    assert Window(3, 2, 1).needed((4, 8)) == (7, 16)


def test_segments_cut_a_halo_at_the_owners_edges_with_padding_outside():
    assert segments((-1, 9), 16, 2) == [((-1, 0), None), ((0, 8), 0), ((8, 9), 1)]
    assert segments((7, 17), 16, 2) == [((7, 8), 0), ((8, 16), 1), ((16, 17), None)]


# --- the mesh data source ------------------------------------------------------------------

def test_a_mesh_slab_is_the_same_pixels_whatever_the_decomposition():
    import numpy as np

    from hpcdl.train.mesh_data import MeshSamples

    samples = MeshSamples(18, 40, seed=5, count=3)
    x, y = samples.slab(np.array([2, 0]))
    assert x.shape == (2, 18, 40, 40) and y.shape == (2, 40, 40) and x.dtype == np.float32
    part_x, part_y = samples.slab(np.array([2, 0]), ((10, 23), (7, 40)))
    assert np.array_equal(part_x, x[:, :, 10:23, 7:40]) and np.array_equal(part_y, y[:, 10:23, 7:40])


def test_the_rare_class_is_about_one_pixel_in_ten_and_weighted_by_inverse_frequency():
    import numpy as np

    from hpcdl.train.mesh_data import MeshSamples, inverse_frequency_weights

    freq = MeshSamples(18, 1024, seed=1, count=32).class_frequencies()
    assert 0.03 < freq[1] < 0.2
    w = inverse_frequency_weights(freq)
    assert w.sum() == pytest.approx(1.0) and w[1] / w[0] == pytest.approx(freq[0] / freq[1], rel=1e-5)
    assert np.all(w > 0)

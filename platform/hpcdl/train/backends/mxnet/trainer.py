"""The MXNet backend: Gluon blocks, MXNet's own kvstore across ranks.

MXNet 1.9.1 (2022, the last release; Apache retired the project in 2023) imports only with
numpy < 1.24, so this backend runs from its own venv (.venv-mxnet). One process trains
with a `local` kvstore. Several processes use `dist_sync`: a parameter-server job whose
scheduler and server roles are started beside the workers (hpcdl.train.backends.mxnet.kvstore does
that on one node; DMLC_* variables name the roles). Workers push gradients, which the
servers sum, and pull the sum back; each worker then takes the same SGD step from the
same initial weights, so the weights stay equal.
"""

from __future__ import annotations

import os

import numpy as np

from hpcdl.errors import HpcdlError
from hpcdl.train.ranks import RankInfo
from hpcdl.train.recipe import Recipe
from hpcdl.train.results import ResultsWriter


def kvstore_kind(environ, world_size: int) -> str:
    """`dist_sync` for a worker of a parameter-server job, `local` for one process."""
    if environ.get("DMLC_ROLE") == "worker" and int(environ.get("DMLC_NUM_WORKER", "1")) > 1:
        return "dist_sync"
    if world_size > 1:
        raise HpcdlError(
            "mxnet: several ranks need MXNet's parameter-server roles (DMLC_ROLE, DMLC_PS_ROOT_URI, ...); "
            "start them with python -m hpcdl.train.backends.mxnet.kvstore"
        )
    return "local"


GRADIENT_KEYS = 0  # kvstore keys 0..n-1 carry the learned parameters' gradients


def world_size_of(kvstore) -> int:
    return kvstore.num_workers if kvstore is not None else 1


class GluonTrainer:
    """The verbs framework_loop needs, on a Gluon block with hpcdl.train.update_rule taking the step."""

    framework = "mxnet"

    def __init__(self, mx, net, recipe: Recipe, kvstore, me: RankInfo, from_logits: bool, multipliers: bool = False):
        from mxnet import autograd

        self.mx, self.net, self.autograd = mx, net, autograd
        self.recipe, self.rank, self.world_size, self.kvstore = recipe, me.rank, me.world_size, kvstore
        self.params = net.collect_params()
        # iter_size micro-batches accumulate into the gradients (zeroed after each step); with
        # one micro-batch, backward writes them: no zeroing pass, no add into every gradient
        self.accumulate = recipe.iter_size > 1
        if self.accumulate:
            for param in self.params.values():
                if param.grad_req != "null":
                    param.grad_req = "add"
        # The update is hpcdl.train.update_rule (Caffe's momentum convention, LARS/LARC,
        # clipping, no_bias_decay), shared with TensorFlow; gradients are summed through the
        # kvstore below with a separate push and pull per parameter (Gluon's fused pushpull in
        # dist_sync let the ranks' weights drift apart in about one run of two here), and the
        # servers only summing keeps the Caffe schedule on the workers.
        self.learned = [p for p in self.params.values() if p.grad_req != "null"]
        if world_size_of(kvstore) > 1:
            # one source of initial weights: kvstore init keeps the first worker's values
            keys = [GRADIENT_KEYS + i for i in range(len(self.learned))]
            kvstore.init(keys, [p.data() for p in self.learned])
            kvstore.pull(keys, out=[p.data() for p in self.learned])
            mx.nd.waitall()
        from hpcdl.train.update_rule import SGDRule

        mults = None
        if multipliers:  # the net's Caffe lr_mult/decay_mult (an hpcdl CaffeNet)
            from hpcdl.nets.gluon_build import gluon_multipliers

            mults = gluon_multipliers(net, self.learned)
        self.rule = SGDRule.from_recipe(recipe, [tuple(p.shape) for p in self.learned], mults)
        self.from_logits = from_logits

    def _loss(self, out, labels):
        """Each image's cross-entropy, with label smoothing as torch's cross_entropy has it."""
        mx = self.mx
        log_p = mx.nd.log_softmax(out, axis=1) if self.from_logits else mx.nd.log(mx.nd.maximum(out, 1e-12))
        nll = -mx.nd.pick(log_p, labels, axis=1)
        e = self.recipe.label_smoothing
        if e:
            nll = (1.0 - e) * nll - e * mx.nd.mean(log_p, axis=1)
        return nll

    def train_step(self, xs, ys, lr, read: bool = True):
        """One iteration; its mean loss as a float when `read`, else None without waiting for the step.

        Reading the loss waits for MXNet's engine to finish the step; framework_loop reads
        it at display iterations only, so the Python side of the next step overlaps this one.
        """
        mx = self.mx
        means = []
        for k in range(len(xs)):
            x, y = mx.nd.array(xs[k]), mx.nd.array(ys[k])
            with self.autograd.record():
                out = self.net(x)
                if isinstance(out, (list, tuple)):  # main and auxiliary heads: Caffe's loss_weight
                    loss = self._loss(out[0], y)
                    for (_, weight), aux in zip(self.net.spec.aux_outputs, out[1:]):
                        loss = loss + weight * self._loss(aux, y)
                else:
                    loss = self._loss(out, y)
            loss.backward()  # the sum over the batch; step() divides by the global batch
            means.append(loss.mean())
        if self.world_size > 1:
            for i, param in enumerate(self.learned):
                self.kvstore.push(GRADIENT_KEYS + i, param.grad(), priority=-i)
            for i, param in enumerate(self.learned):
                self.kvstore.pull(GRADIENT_KEYS + i, out=param.grad(), priority=-i)
        # the summed gradients are divided by the global batch inside the fused update
        images = len(xs) * len(xs[0]) * self.world_size
        if not self.rule.on_host:
            self._fused_update().step(1.0 / images, lr)
        else:  # the other Caffe solver types and L1: hpcdl.train.update_rule on the host (FusedUpdate is SGD with L2)
            new = self.rule.step([p.data().asnumpy() for p in self.learned],
                                 [p.grad().asnumpy() / images for p in self.learned], lr)
            for p, w in zip(self.learned, new):
                p.data()[:] = mx.nd.array(w, dtype=p.dtype)
        if self.accumulate:
            for param in self.learned:
                param.zero_grad()
        if not read:
            return None
        total = 0.0
        for mean in means:
            total += float(mean.asscalar()) / len(xs)
        return total

    def _fused_update(self):
        """The rule's step in MXNet's multi-tensor kernels (hpcdl.train.backends.mxnet.update), made once."""
        if not hasattr(self, "_update"):
            from hpcdl.train.backends.mxnet.update import FusedUpdate

            self._update = FusedUpdate(self.mx, self.rule, self.learned)
        return self._update

    def predict(self, x):
        out = self.net(self.mx.nd.array(x))
        if isinstance(out, (list, tuple)):  # (main, aux...): Caffe tests on the main head
            out = out[0]
        return out.asnumpy()

    def sum(self, values):
        if self.world_size == 1:
            return [float(v) for v in values]
        mx = self.mx
        if not hasattr(self, "_sum_key"):
            self._sum_key = 1_000_003  # a key no parameter uses
            self.kvstore.init(self._sum_key, mx.nd.zeros(len(values) or 1, dtype="float64"))
            self._sum_width = len(values) or 1
        width = max(self._sum_width, len(values))
        if width != self._sum_width:
            self._sum_key += 1
            self.kvstore.init(self._sum_key, mx.nd.zeros(width, dtype="float64"))
            self._sum_width = width
        padded = np.zeros(width)
        padded[: len(values)] = values
        out = mx.nd.zeros(width, dtype="float64")
        self.kvstore.push(self._sum_key, mx.nd.array(padded, dtype="float64"))
        self.kvstore.pull(self._sum_key, out=out)
        return [float(v) for v in out.asnumpy()[: len(values)]]

    def max(self, value):
        if self.world_size == 1:
            return float(value)
        values = [0.0] * self.world_size
        values[self.rank] = float(value)
        return max(self.sum(values))

    def weights(self):
        return [p.data().asnumpy() for p in self.params.values() if p.grad_req != "null"]

    def state(self):
        arrays = {f"p:{name}": p.data().asnumpy() for name, p in self.params.items()}
        if not self.rule.on_host:  # else the rule itself holds the histories
            self._fused_update().to_rule()
        arrays.update(self.rule.state("m:"))
        return arrays

    def load_state(self, arrays):
        mx = self.mx
        for name, p in self.params.items():
            p.set_data(mx.nd.array(arrays[f"p:{name}"]))
        self.rule.load_state(arrays, len(self.learned), "m:")
        if self.rule.velocity and not self.rule.on_host:
            self._fused_update().from_rule()


def train(recipe: Recipe, me: RankInfo, results: ResultsWriter, context: dict) -> dict:
    if context.get("distributed") == "horovod":
        raise HpcdlError(
            "mxnet: Horovod here is built for PyTorch only (HOROVOD_WITHOUT_MXNET); the tested MXNet "
            "distribution is its kvstore (dist_sync)"
        )
    if recipe.precision != "fp32":
        raise HpcdlError(f"precision: the MXNet backend trains fp32 only on CPU, not {recipe.precision}")
    kind = kvstore_kind(os.environ, me.world_size)
    context = {**context, "distributed": f"kvstore:{kind}"}
    import mxnet as mx

    from hpcdl.nets import load_net
    from hpcdl.nets.gluon_build import build_gluon
    from hpcdl.train.data import load_dataset, net_input_size
    from hpcdl.train.framework_loop import run_loop

    mx.random.seed(recipe.random_seed)
    np.random.seed(recipe.random_seed)
    kvstore = mx.kv.create(kind)
    spec0 = load_net(recipe.net)
    # the net's input size follows the data: Caffe's crop_size, else the image size (the
    # images are stored at image_size; framework_loop crops and mirrors them)
    size = net_input_size(recipe.data, spec0.input_shape[1])
    shape = (spec0.input_shape[0], size, size)
    data = load_dataset(recipe.data, shape, recipe.random_seed, net=recipe.net)
    spec = load_net(recipe.net, num_classes=data.num_classes, image_size=size, channels=shape[0],
                    aux_heads=recipe.aux_heads)
    net = build_gluon(spec)
    net.initialize()  # the same seed on every worker gives the same initial weights
    if recipe.weights:
        from hpcdl.caffe.weights import read_caffemodel, to_gluon

        to_gluon(net, spec, read_caffemodel(recipe.weights))  # Caffe's --weights
    net.hybridize(static_alloc=True, static_shape=True)  # one batch shape: memory planned once
    trainer = GluonTrainer(mx, net, recipe, kvstore, me, from_logits=spec.layers[-1].type != "Softmax", multipliers=True)
    return run_loop(recipe, me, results, context, data, spec, trainer)

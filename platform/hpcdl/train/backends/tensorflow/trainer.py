"""The TensorFlow backend: Keras layers, tf.distribute.MultiWorkerMirroredStrategy across ranks.

Each rank is one MultiWorkerMirroredStrategy worker with one (CPU) replica. Its cluster
spec (TF_CONFIG) is built from whatever started the ranks: Slurm's node list and task
counts, hpcdl launch / torchrun's MASTER_ADDR and WORLD_SIZE on one node, or the host
names MPI ranks exchange. TensorFlow's thread pools take the plan's intra-op and
inter-op counts, set before the runtime starts. Horovod is not offered: Horovod 0.28.1
(the last release) fails with Keras 3, i.e. TensorFlow >= 2.16 (horovod#4290).
"""

from __future__ import annotations

import json
import os
import re
import socket

import numpy as np

from hpcdl.errors import HpcdlError
from hpcdl.train.backends import HOROVOD_TF_INSTEAD_TRAIN, HOROVOD_TF_PROBLEM
from hpcdl.train.ranks import RankInfo, gpu_index
from hpcdl.train.recipe import Recipe
from hpcdl.train.results import ResultsWriter

# --- cluster spec -----------------------------------------------------------------------

def expand_nodelist(nodelist: str) -> list[str]:
    """Slurm's compressed host list ('nid[001-003,007],login1', 'n[1-2]-ib') as host names, in order.

    python-hostlist (NSC's implementation of Slurm's syntax) expands it; without it, Slurm's
    own `scontrol show hostnames`.
    """
    try:
        import hostlist
    except ImportError:
        return _scontrol_hostnames(nodelist)
    try:
        return hostlist.expand_hostlist(nodelist)
    except hostlist.BadHostlist as exc:
        raise HpcdlError(f"SLURM_JOB_NODELIST: {nodelist!r} is not a Slurm host list: {exc}") from None


def _scontrol_hostnames(nodelist: str) -> list[str]:
    import shutil
    import subprocess

    if shutil.which("scontrol") is None:
        raise HpcdlError("expanding SLURM_JOB_NODELIST needs python-hostlist (pip install python-hostlist) or scontrol")
    proc = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise HpcdlError(f"scontrol show hostnames {nodelist}: {proc.stderr.strip()}")
    return proc.stdout.split()


def expand_tasks_per_node(spec: str) -> list[int]:
    """Slurm's SLURM_STEP_TASKS_PER_NODE ('2(x3),1') as one count per node."""
    try:
        import hostlist
    except ImportError:
        counts: list[int] = []
        for count, repeat in re.findall(r"(\d+)(?:\(x(\d+)\))?", spec):
            counts += [int(count)] * int(repeat or 1)
        return counts
    return hostlist.parse_slurm_tasks_per_node(spec)


def slurm_base_port(environ) -> int:
    """Ports per job, so two jobs sharing a node do not collide: 20000 + 10 * (job id mod 1200), below
    Linux's ephemeral ports (32768 and up), where any outgoing connection may hold the one a job picks."""
    return 20000 + 10 * (int(environ.get("SLURM_JOB_ID", "0")) % 1200)


MPI_LAUNCHERS = ("openmpi", "mpich", "mvapich2", "jsrun")


def local_world_size(environ, me: RankInfo) -> int:
    """How many ranks share this node, as the launcher tells it (all of them when it does not)."""
    for name in ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"):
        if environ.get(name):
            return int(environ[name])
    return me.world_size


def tf_config(environ, me: RankInfo, mpi_hosts: list[str] | None = None) -> dict:
    """The TF_CONFIG cluster spec of this rank: {"cluster": {"worker": [host:port,...]}, "task": ...}.

    Worker i is rank i. An explicit TF_CONFIG wins; HPCDL_TF_PORT overrides the first port.
    """
    if environ.get("TF_CONFIG"):
        return json.loads(environ["TF_CONFIG"])
    override = environ.get("HPCDL_TF_PORT")
    if me.launcher == "srun":
        hosts = expand_nodelist(environ.get("SLURM_STEP_NODELIST") or environ["SLURM_JOB_NODELIST"])
        per_node = expand_tasks_per_node(environ.get("SLURM_STEP_TASKS_PER_NODE") or environ["SLURM_TASKS_PER_NODE"])
        base = int(override) if override else slurm_base_port(environ)
        # srun's default block distribution: node 0 holds ranks 0..n0-1, and so on
        workers = [f"{host}:{base + i}" for host, n in zip(hosts, per_node) for i in range(n)]
    elif local_world_size(environ, me) == me.world_size:
        # one node (hpcdl launch, torchrun, or mpirun on one host): ports after MASTER_PORT
        host = environ.get("MASTER_ADDR", "127.0.0.1")
        base = int(override) if override else int(environ.get("MASTER_PORT", "19999")) + 1
        workers = [f"{host}:{base + i}" for i in range(me.world_size)]
    elif mpi_hosts is not None:
        base = int(override or 20000)
        seen: dict[str, int] = {}
        workers = []
        for host in mpi_hosts:
            workers.append(f"{host}:{base + seen.get(host, 0)}")
            seen[host] = seen.get(host, 0) + 1
    else:
        raise HpcdlError(
            f"tensorflow: ranks on several nodes under launcher {me.launcher!r} need Slurm (srun), MPI or an "
            "explicit TF_CONFIG for the worker list"
        )
    if len(workers) != me.world_size:
        raise HpcdlError(f"tensorflow: the launcher describes {len(workers)} workers but WORLD_SIZE is {me.world_size}")
    return {"cluster": {"worker": workers}, "task": {"type": "worker", "index": me.rank}}


def _mpi_hosts(me: RankInfo) -> list[str] | None:
    """Every rank's host name, exchanged over MPI only when the ranks span several nodes.

    MPI is finalized straight after: TensorFlow does not use it, and ranks leave through
    os._exit, which mpirun would otherwise report as an improper exit.
    """
    if me.launcher not in MPI_LAUNCHERS or os.environ.get("TF_CONFIG") or local_world_size(os.environ, me) == me.world_size:
        return None
    from mpi4py import MPI

    hosts = MPI.COMM_WORLD.allgather(socket.gethostname())
    MPI.Finalize()
    return hosts


def thread_counts(environ) -> tuple[int, int]:
    """(intra-op, inter-op) from the plan's settings; 0 lets TensorFlow choose."""
    intra = environ.get("HPCDL_INTRA_OP_THREADS") or environ.get("TF_NUM_INTRAOP_THREADS") or environ.get("OMP_NUM_THREADS") or 0
    inter = environ.get("HPCDL_INTER_OP_THREADS") or environ.get("TF_NUM_INTEROP_THREADS") or 0
    return int(intra), int(inter)


def configure_threads(tf, intra: int, inter: int) -> None:
    """Size TensorFlow's pools; possible only before its runtime starts (a second run in
    one process keeps the first run's pools, which is what the caller asked for then)."""
    try:
        if intra:
            tf.config.threading.set_intra_op_parallelism_threads(intra)
        if inter:
            tf.config.threading.set_inter_op_parallelism_threads(inter)
    except RuntimeError:
        pass


def select_device(tf, recipe: Recipe, me: RankInfo) -> str:
    """The one device this rank trains on, made the only one TensorFlow sees; before its runtime starts.

    A worker of MultiWorkerMirroredStrategy mirrors its model over every GPU it sees, so
    where each rank sees the whole node's GPUs (profile launch.gpu_visibility: node) every
    rank would use all of them: keep the plan's GPU (HPCDL_GPU), else the local rank's, as
    the PyTorch trainer does. `device: cpu` hides the GPUs; `cuda` without one is refused.
    """
    gpus = tf.config.list_physical_devices("GPU")
    if recipe.device == "cpu" or (recipe.device == "auto" and not gpus):
        if gpus:
            tf.config.set_visible_devices([], "GPU")
        return "cpu"
    if not gpus:
        raise HpcdlError("device: cuda asked for, but TensorFlow sees no GPU here")
    gpu = gpus[gpu_index(me, len(gpus))]
    if len(gpus) > 1:
        tf.config.set_visible_devices(gpu, "GPU")
    return gpu.name


# --- training ---------------------------------------------------------------------------

class KerasTrainer:
    """The verbs framework_loop needs, on a Keras model under a tf.distribute strategy."""

    framework = "tensorflow"

    def __init__(self, tf, keras, strategy, model, recipe: Recipe, me: RankInfo, from_logits: bool,
                 multipliers: list[tuple[float, float]] | None = None, aux_weights: tuple[float, ...] = (),
                 device: str = "cpu"):
        from hpcdl.train.update_rule import SGDRule

        self.tf, self.strategy, self.model = tf, strategy, model
        self.device, self.precision = device, recipe.precision  # select_device's choice, for the start record
        self.rank, self.world_size = me.rank, me.world_size
        world_size = me.world_size
        self.variables = list(model.trainable_variables)
        # the update itself is hpcdl.train.update_rule, shared with MXNet: Caffe's momentum
        # convention, the net's lr_mult/decay_mult, LARS/LARC, clipping and no_bias_decay as
        # the PyTorch optimizer has them
        self.rule = SGDRule.from_recipe(recipe, [tuple(v.shape) for v in self.variables], multipliers)
        # fp16: dynamic loss scaling as hpcdl.train.backends.pytorch.trainer.Precision does it
        self.scaling = recipe.precision == "fp16"
        self.dynamic = recipe.loss_scale == "dynamic"
        self.scale = 65536.0 if self.dynamic else float(recipe.loss_scale)
        self.good_steps = 0
        smoothing = recipe.label_smoothing

        def loss_fn(labels, out):
            # the mean over this replica's batch; Keras' own losses divide again by the replica
            # count under a tf.distribute strategy, which would halve the gradient on 2 ranks
            out = tf.cast(out, tf.float32)
            log_p = tf.nn.log_softmax(out) if from_logits else tf.math.log(tf.maximum(out, 1e-12))
            nll = -tf.gather(log_p, labels, batch_dims=1)
            if smoothing:
                # as torch's cross_entropy(label_smoothing=e): (1 - e) * nll + e * mean over classes of -log p
                nll = (1.0 - smoothing) * nll - smoothing * tf.reduce_mean(log_p, axis=1)
            return tf.reduce_mean(nll)

        iter_size = recipe.iter_size
        variables = self.variables

        def net_loss(labels, outputs):
            """Caffe's total loss: the main head's, plus loss_weight times each auxiliary head's."""
            if not aux_weights:
                return loss_fn(labels, outputs)
            main, *aux = outputs
            total = loss_fn(labels, main)
            for weight, out in zip(aux_weights, aux):
                total = total + weight * loss_fn(labels, out)
            return total

        def replica_step(xs, ys, scale):
            grads, total = None, None
            for k in range(iter_size):
                with tf.GradientTape() as tape:
                    loss = net_loss(ys[k], model(xs[k], training=True))
                    # summed over replicas below: divide here to average them
                    scaled_loss = loss * scale / (iter_size * world_size)
                micro = [tf.cast(g, v.dtype) for g, v in zip(tape.gradient(scaled_loss, variables), variables)]
                # the first micro-batch's gradients as they are (no zeros to add them to)
                grads = micro if grads is None else [a + b for a, b in zip(grads, micro)]
                total = loss / iter_size if total is None else total + loss / iter_size
            if world_size > 1:
                grads = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, grads)
            return total, grads

        @tf.function
        def step(xs, ys, scale):
            per_replica = strategy.run(replica_step, args=(xs, ys, scale))
            loss, grads = strategy.experimental_local_results(per_replica)[0]
            return loss, grads

        self._step = step
        self._compile_update()

    def _compile_update(self) -> None:
        """Gradients and the rule's update in one tf.function (hpcdl.train.backends.tensorflow.update): no host copies."""
        from hpcdl.train.backends.tensorflow.update import CompiledUpdate

        tf, step = self.tf, self._step
        self.update = update = CompiledUpdate(tf, self.rule, self.variables, loss_scaling=self.scaling)

        @tf.function
        def step_and_update(xs, ys, scalars):
            scale, lr, correction = scalars[0], scalars[1], scalars[2]
            loss, grads = step(xs, ys, scale)
            return loss, update.apply(grads, scale, lr, correction)

        self._step_and_update = step_and_update
        self._scalars = (None, None)  # (scale, lr, correction) and its tensor, made again when one changes

    def start_fields(self) -> dict:
        return {"device": self.device, "precision": self.precision}

    def train_step(self, xs, ys, lr, read: bool = True):
        """One iteration; its mean loss as a float, or None when not `read` (no copy to the host)."""
        tf = self.tf
        scale = self.scale if self.scaling else 1.0
        if self.rule.on_host:
            return self._host_step(xs, ys, lr, scale, read)
        key = (scale, lr, self.update.correction(lr))
        if self._scalars[0] != key:  # the rate changes at the schedule's steps only: one small tensor per change
            self._scalars = (key, tf.constant(key, tf.float32))
        loss, finite = self._step_and_update(tf.constant(xs), tf.constant(ys), self._scalars[1])
        if self.scaling:
            if not bool(finite):
                if self.dynamic:  # the step was skipped: halve the scale (NVIDIA's mixed-precision guide)
                    self.scale /= 2.0
                    self.good_steps = 0
                return float(loss) if read else None
            self.good_steps += 1
            if self.dynamic and self.good_steps % 2000 == 0:
                self.scale *= 2.0
        self.rule.last_lr = lr
        return float(loss) if read else None

    def _host_step(self, xs, ys, lr, scale, read):
        """Caffe's solver types other than SGD, and L1 decay: the gradients from the compiled step,
        the update by hpcdl.train.update_rule on the host (CompiledUpdate carries out SGD with L2 only)."""
        tf = self.tf
        loss, grads = self._step(tf.constant(xs), tf.constant(ys), tf.constant(scale, tf.float32))
        gs = [np.asarray(g.numpy(), dtype=np.float64) / scale for g in grads]
        if self.scaling and not all(np.isfinite(g).all() for g in gs):
            if self.dynamic:
                self.scale /= 2.0
                self.good_steps = 0
            return float(loss) if read else None
        ws = [np.asarray(v.numpy()) for v in self.variables]
        for v, old, w in zip(self.variables, ws, self.rule.step(ws, gs, lr)):
            v.assign(w.astype(old.dtype))
        if self.scaling:
            self.good_steps += 1
            if self.dynamic and self.good_steps % 2000 == 0:
                self.scale *= 2.0
        return float(loss) if read else None

    def predict(self, x):
        out = self.model(x, training=False)
        if isinstance(out, (list, tuple)):  # [main, aux...]: Caffe tests on the main head
            out = out[0]
        return np.asarray(out, dtype=np.float32)

    def _reduce(self, values, op):
        tf = self.tf
        if self.world_size == 1:
            return [float(v) for v in values]
        tensor = tf.constant(values, dtype=tf.float64)
        reduced = self.strategy.reduce(op, self.strategy.run(lambda: tf.identity(tensor)), axis=None)
        return [float(v) for v in reduced.numpy()]

    def sum(self, values):
        return self._reduce(values, self.tf.distribute.ReduceOp.SUM)

    def farewell(self) -> None:
        """One more reduce before the worker exits, whose failure is let go. A TensorFlow collective
        is pulled: each worker fetches its peers' parts from their gRPC servers (RecvBuf), so a worker
        that finished the run's last reduce and exited at once closed the server a slower peer was
        still reading, which then failed with "Socket closed" (seen in CI, at the final weights
        digest). A worker that completes this reduce knows every peer has entered it, so is past
        the last one that mattered; a peer that finds it gone here loses nothing."""
        if self.world_size == 1:
            return
        try:
            self._reduce([0.0], self.tf.distribute.ReduceOp.SUM)
        except (self.tf.errors.UnavailableError, self.tf.errors.CancelledError, self.tf.errors.AbortedError):
            pass

    def max(self, value):
        if self.world_size == 1:
            return float(value)
        # tf.distribute reduces by SUM or MEAN only: gather every rank's value and take the largest
        values = [0.0] * self.world_size
        values[self.rank] = float(value)
        return max(self.sum(values))

    def weights(self):
        return [np.asarray(v.numpy()) for v in self.model.trainable_weights]

    def state(self):
        arrays = {f"w{i}": np.asarray(v.numpy()) for i, v in enumerate(self.model.weights)}
        if not self.rule.on_host:  # else the rule itself holds the histories
            self.update.to_rule()
        arrays.update(self.rule.state("v"))
        arrays["loss_scale"] = np.float64(self.scale)
        return arrays

    def load_state(self, arrays):
        for i, v in enumerate(self.model.weights):
            v.assign(arrays[f"w{i}"])
        self.rule.load_state(arrays, len(self.variables), "v")
        if not self.rule.on_host:
            self.update.from_rule()
        self.scale = float(arrays.get("loss_scale", self.scale))


def train(recipe: Recipe, me: RankInfo, results: ResultsWriter, context: dict) -> dict:
    if context.get("distributed") == "horovod":
        raise HpcdlError(f"{HOROVOD_TF_PROBLEM}; {HOROVOD_TF_INSTEAD_TRAIN}")
    if me.world_size > 1:
        os.environ["TF_CONFIG"] = json.dumps(tf_config(os.environ, me, _mpi_hosts(me)))
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep the rank's log to hpcdl's lines
    import keras
    import tensorflow as tf

    from hpcdl.nets import load_net
    from hpcdl.nets.keras_build import build_keras, keras_multipliers
    from hpcdl.train.data import load_dataset, net_input_size
    from hpcdl.train.framework_loop import run_loop

    configure_threads(tf, *thread_counts(os.environ))
    device = select_device(tf, recipe, me)
    if me.world_size > 1:
        strategy = tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=tf.distribute.experimental.CommunicationOptions(
                implementation=tf.distribute.experimental.CommunicationImplementation.RING
            )
        )
    else:
        strategy = tf.distribute.get_strategy()
    if recipe.precision in ("bf16", "fp16"):
        keras.mixed_precision.set_global_policy("mixed_bfloat16" if recipe.precision == "bf16" else "mixed_float16")
    keras.utils.set_random_seed(recipe.random_seed)

    spec0 = load_net(recipe.net)
    # the net's input size follows the data: Caffe's crop_size, else the image size (the
    # images are stored at image_size; framework_loop crops and mirrors them)
    size = net_input_size(recipe.data, spec0.input_shape[1])
    shape = (spec0.input_shape[0], size, size)
    data = load_dataset(recipe.data, shape, recipe.random_seed, net=recipe.net)
    spec = load_net(recipe.net, num_classes=data.num_classes, image_size=size, channels=shape[0],
                    aux_heads=recipe.aux_heads)
    with strategy.scope():
        model = build_keras(spec)
        if recipe.weights:
            from hpcdl.caffe.weights import read_caffemodel, to_keras

            to_keras(model, spec, read_caffemodel(recipe.weights))  # Caffe's --weights
    trainer = KerasTrainer(tf, keras, strategy, model, recipe, me, from_logits=spec.layers[-1].type != "Softmax",
                           multipliers=keras_multipliers(model, spec), aux_weights=tuple(w for _, w in spec.aux_outputs),
                           device=device)
    pools = {"intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
             "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads()}
    summary = run_loop(recipe, me, results, context, data, spec, trainer, final_fields=lambda: pools)
    trainer.farewell()
    return summary

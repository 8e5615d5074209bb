"""The framework backends: one folder each, behind the same verb.

Every backend is a module with `train(recipe, me, results, context) -> summary dict`, chosen
by the framework and the distribution a plan names and imported only when chosen, so the
trainer starts without the frameworks it does not use:

    pytorch/     torch.distributed data parallelism (DDP), the spatial loop, DALI input
    tensorflow/  Keras layers under tf.distribute.MultiWorkerMirroredStrategy
    mxnet/       Gluon blocks and MXNet's own kvstore
    horovod/     PyTorch with Horovod's DistributedOptimizer (the seed papers' path)

TensorFlow, MXNet and Horovod share the framework-free loop in hpcdl.train.framework_loop;
PyTorch keeps its own (hpcdl.train.backends.pytorch.trainer), read top to bottom. A new
backend is a folder here with its `trainer.train` and one line in BACKENDS.
"""

from __future__ import annotations

import importlib

from hpcdl.errors import HpcdlError

# (framework, distribution) -> the module whose train() runs it; Horovod on PyTorch is a
# backend of its own (hvd.DistributedOptimizer replaces the optimizer, not the process group).
BACKENDS = {
    ("pytorch", "horovod"): "hpcdl.train.backends.horovod.trainer",
    ("pytorch", None): "hpcdl.train.backends.pytorch.trainer",
    ("tensorflow", None): "hpcdl.train.backends.tensorflow.trainer",
    ("mxnet", None): "hpcdl.train.backends.mxnet.trainer",
}

# Told by the plan when it is asked for, and by the TensorFlow backend if started anyway; what
# to do instead is said in the words of the verb that refused: plan/render/run/submit take
# --dist auto (TensorFlow's ranks then run MultiWorkerMirroredStrategy); only `hpcdl train` takes mwms.
HOROVOD_TF_PROBLEM = (
    "Horovod with TensorFlow is not available: Horovod 0.28.1, its last release, fails with Keras 3 "
    "(TensorFlow >= 2.16; horovod#4290, open upstream) and does not build against TensorFlow 2.21's headers"
)
HOROVOD_TF_INSTEAD_PLAN = ("use --dist auto (TensorFlow's ranks run tf.distribute.MultiWorkerMirroredStrategy) "
                           "and drop `distributed: horovod` from the recipe, or use Horovod with -f pytorch")
HOROVOD_TF_INSTEAD_TRAIN = "use --dist mwms (tf.distribute.MultiWorkerMirroredStrategy), or Horovod with PyTorch"


def backend_for(framework: str, distributed: str | None):
    """The backend's train(recipe, me, results, context), imported only when chosen."""
    key = (framework, "horovod") if (framework, "horovod") in BACKENDS and distributed == "horovod" else (framework, None)
    if key not in BACKENDS:
        raise HpcdlError(f"framework: {framework!r} is not one of pytorch, tensorflow, mxnet")
    try:
        return importlib.import_module(BACKENDS[key]).train
    except ImportError as exc:
        raise HpcdlError(f"framework: the {framework} backend cannot start here ({exc})") from None

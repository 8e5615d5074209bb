"""Caffe solver prototxt to an hpcdl recipe.

Every SolverParameter field of caffe.proto falls in one of three groups:
- mapped: the recipe field of the same meaning (base_lr, lr_policy, gamma, power,
  stepsize, stepvalue, momentum, weight_decay, max_iter, iter_size, clip_gradients,
  test_iter, test_interval, display, snapshot, snapshot_prefix, random_seed, weights, type and
  the old solver_type enum (SGD, Nesterov, AdaGrad, RMSProp, AdaDelta, Adam), momentum2, delta,
  rms_decay, regularization_type L2 or L1);
- accepted and reported as ignored, because they change no weight: logging, devices and
  file formats (average_loss, test_initialization, test_compute_loss, debug_info,
  solver_mode, device_id, snapshot_format, snapshot_after_train, layer_wise_reduce);
- refused when set to anything but caffe.proto's default, because hpcdl cannot do what
  they ask (the plateau policy, several test nets, snapshot_diff, inline nets).

caffe.proto's defaults are written out where hpcdl's differ: momentum 0, gamma 0 and
power 0 when the file leaves them out. A solver without lr_policy is refused, as Caffe
itself stops on it.

A chain of solvers, each resuming from the previous one's last snapshot (Caffe's
cifar10 `solver` to 4,000 iterations, then `solver_lr1` to 5,000 at a tenth of the rate),
becomes one recipe when every stage uses the `fixed` policy and the rate falls by the same
factor at each hand-over: a `multistep` schedule with the hand-over iterations as step
values. Caffe restores the momentum history from the solverstate, so one uninterrupted
hpcdl run is the same trajectory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hpcdl.caffe.common import f32, read_text
from hpcdl.caffe.solver_types import SOLVER_FIELDS as TYPE_FIELDS
from hpcdl.caffe.solver_types import SOLVERS
from hpcdl.errors import HpcdlError

POLICIES = ("fixed", "step", "exp", "inv", "multistep", "poly", "sigmoid")
IGNORED = ("average_loss", "test_initialization", "test_compute_loss", "debug_info", "solver_mode", "device_id",
           "snapshot_format", "snapshot_after_train", "layer_wise_reduce")
REFUSED = {
    "snapshot_diff": (False, "hpcdl snapshots hold no gradients"),
}
#: caffe.proto's SolverType enum (solver_type, before `type` replaced it) by number
SOLVER_ENUM = dict(enumerate(SOLVERS))  # SGD 0, NESTEROV 1, ADAGRAD 2, RMSPROP 3, ADADELTA 4, ADAM 5


def _set(msg, field: str) -> bool:
    d = msg.DESCRIPTOR.fields_by_name[field]
    repeated = d.is_repeated if hasattr(d, "is_repeated") else d.label == d.LABEL_REPEATED
    return len(getattr(msg, field)) > 0 if repeated else msg.HasField(field)


def solver_fields(path: str | Path) -> tuple[dict[str, Any], list[str], Any]:
    """The recipe fields of one solver file, notes, and the parsed message."""
    path = Path(path)
    msg, _ = read_text(path, "SolverParameter")
    notes: list[str] = []
    where = str(path)
    for field, (default, why) in REFUSED.items():
        if not _set(msg, field):
            continue
        value = getattr(msg, field)
        if default is None or value != default:
            shown = value if not isinstance(value, float) else f32(value)
            raise HpcdlError(f"{where}: {field}: {shown!r} is not supported ({why})")
    if len(msg.weights) > 1:
        raise HpcdlError(f"{where}: weights: hpcdl starts from one .caffemodel (this solver lists {len(msg.weights)})")
    for field in ("train_net_param", "net_param", "test_net_param"):
        if _set(msg, field):
            raise HpcdlError(f"{where}: {field} (a net written inside the solver) is not supported; "
                             f"put the net in its own file and name it with `net:`")
    for field in ("train_state", "test_state"):
        # a NetState picks layers by level and stage; hpcdl builds Caffe's default state (level 0, no
        # stage), so a state that says only its phase, or nothing, builds the same net
        if not _set(msg, field):
            continue
        value = getattr(msg, field)
        states = list(value) if field == "test_state" else [value]  # test_state: one per test net
        for state in states:
            if state.level == 0 and not list(state.stage):
                continue
            raise HpcdlError(f"{where}: {field} with level {state.level} and stage {list(state.stage)} is not "
                             f"supported: hpcdl builds each phase's net in Caffe's default NetState (level 0, no "
                             f"stage); remove {field} and the `stage`/`min_level`/`max_level` rules it selects by")
    if len(msg.test_net) > 1 or len(msg.test_iter) > 1:
        raise HpcdlError(f"{where}: test_net/test_iter: hpcdl tests one net (this solver has several)")
    for field in IGNORED:
        if _set(msg, field):
            d = msg.DESCRIPTOR.fields_by_name[field]
            value = getattr(msg, field)
            shown = d.enum_type.values_by_number[value].name if d.enum_type is not None else value
            notes.append(f"{field}: {shown} is ignored (it changes no weight)")
    solver = _solver_type(msg, where)
    for field in ("momentum2", "delta", "rms_decay"):
        if msg.HasField(field) and field not in TYPE_FIELDS.get(solver, ()):
            notes.append(f"{field}: {f32(getattr(msg, field))} is ignored (type {solver} does not read it)")
    if solver in ("AdaGrad", "RMSProp") and msg.momentum != 0:
        # AdaGradSolver and RMSPropSolver stop on this in their constructors
        raise HpcdlError(f"{where}: momentum: {f32(msg.momentum)} cannot be used with type {solver} "
                         f"(Caffe stops on it too); remove momentum")
    if msg.regularization_type not in ("L1", "L2"):
        raise HpcdlError(f"{where}: regularization_type: {msg.regularization_type!r} is not supported "
                         f"(Caffe knows L1 and L2)")
    if not msg.HasField("lr_policy"):
        raise HpcdlError(f"{where}: lr_policy is not set (Caffe stops on this too: 'Unknown learning rate policy')")
    if msg.lr_policy not in POLICIES:
        raise HpcdlError(f"{where}: lr_policy: {msg.lr_policy!r} is not supported (supported: {', '.join(POLICIES)})")
    if not msg.HasField("base_lr"):
        raise HpcdlError(f"{where}: base_lr is not set")
    if not msg.HasField("max_iter"):
        raise HpcdlError(f"{where}: max_iter is not set")
    out: dict[str, Any] = {
        "base_lr": f32(msg.base_lr),
        "lr_policy": msg.lr_policy,
        # caffe.proto's defaults, written out because hpcdl's differ (0.1, 1.0 and 0.9)
        "gamma": f32(msg.gamma),
        "power": f32(msg.power),
        "momentum": f32(msg.momentum),
        "weight_decay": f32(msg.weight_decay),
        "max_iter": int(msg.max_iter),
    }
    if solver != "SGD":
        out["type"] = solver
        # caffe.proto's defaults (delta 1e-8, momentum2 0.999, rms_decay 0.99) are hpcdl's too
        out.update({field: f32(getattr(msg, field)) for field in TYPE_FIELDS.get(solver, ())})
    if msg.regularization_type == "L1":
        out["regularization_type"] = "L1"
    if msg.HasField("stepsize"):
        out["stepsize"] = int(msg.stepsize)
    if msg.stepvalue:
        steps = [int(s) for s in msg.stepvalue]
        if steps != sorted(steps):
            raise HpcdlError(f"{where}: stepvalue {steps} does not increase")
        out["stepvalue"] = steps
    if msg.iter_size != 1:
        out["iter_size"] = int(msg.iter_size)
    if msg.clip_gradients >= 0:
        if msg.clip_gradients == 0:
            raise HpcdlError(f"{where}: clip_gradients: 0 scales every gradient to zero in Caffe; "
                             f"remove it (no clipping) or give a positive bound")
        out["clip_gradients"] = f32(msg.clip_gradients)
    if msg.test_iter:
        out["test_iter"] = int(msg.test_iter[0])
    if msg.test_interval:
        out["test_interval"] = int(msg.test_interval)
    if msg.HasField("display"):
        if msg.display > 0:
            out["display"] = int(msg.display)
        else:
            notes.append("display: 0 (no display) is not available; hpcdl's default display is kept")
    if msg.snapshot:
        out["snapshot"] = int(msg.snapshot)
    if msg.snapshot_prefix:
        out["snapshot_prefix"] = msg.snapshot_prefix
    if msg.weights:
        out["weights"] = msg.weights[0]
    if msg.random_seed >= 0:
        out["random_seed"] = int(msg.random_seed)
    else:
        notes.append("random_seed: Caffe's default -1 seeds from the clock; hpcdl's runs are seeded (random_seed 1)")
    return out, notes, msg


def _solver_type(msg, where: str) -> str:
    """Caffe's solver type: the `type` string, or the old `solver_type` enum (not both, as
    Caffe's UpgradeSolverType refuses)."""
    if _set(msg, "solver_type"):
        if _set(msg, "type"):
            raise HpcdlError(f"{where}: solver_type and type are both set (Caffe refuses this too); keep `type`")
        return SOLVER_ENUM[msg.solver_type]
    if msg.type not in SOLVER_ENUM.values():
        raise HpcdlError(f"{where}: type: {msg.type!r} is not a Caffe solver type "
                         f"(known: {', '.join(SOLVER_ENUM.values())})")
    return msg.type


MUST_AGREE = ("type", "momentum2", "delta", "rms_decay", "regularization_type", "momentum", "weight_decay", "iter_size", "clip_gradients", "test_iter", "test_interval", "display",
              "random_seed", "gamma", "power")


def chain(stages: list[tuple[dict, str]]) -> tuple[dict, list[str]]:
    """One recipe's fields from solvers that resume from each other, in order."""
    if len(stages) == 1:
        return dict(stages[0][0]), []
    notes = []
    first = stages[0][0]
    for fields, where in stages:
        if fields["lr_policy"] != "fixed":
            raise HpcdlError(f"{where}: lr_policy {fields['lr_policy']!r}: a chain of solvers is imported when "
                             f"every stage is `fixed` (one multistep schedule)")
    for fields, where in stages[1:]:
        for key in MUST_AGREE:
            if key in ("gamma", "power"):
                continue
            if fields.get(key) != first.get(key):
                raise HpcdlError(f"{where}: {key} {fields.get(key)!r} differs from the first solver's "
                                 f"{first.get(key)!r}; one recipe has one value")
    ends = [f["max_iter"] for f, _ in stages]
    if ends != sorted(ends) or len(set(ends)) != len(ends):
        raise HpcdlError(f"{stages[-1][1]}: max_iter must grow from solver to solver (each resumes the last): {ends}")
    rates = [f["base_lr"] for f, _ in stages]
    ratios = [f32(rates[i + 1] / rates[i]) for i in range(len(rates) - 1)]
    if any(abs(r - ratios[0]) > 1e-6 * abs(ratios[0]) for r in ratios):
        raise HpcdlError(f"{stages[-1][1]}: the rates {rates} do not fall by one factor at each hand-over; "
                         f"a multistep schedule has one gamma")
    out = dict(first)
    out.update({"lr_policy": "multistep", "gamma": ratios[0], "stepvalue": ends[:-1], "max_iter": ends[-1]})
    for key in ("snapshot", "snapshot_prefix"):  # the last stage's, as its run is the one that finishes
        value = stages[-1][0].get(key, first.get(key))
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    notes.append(f"{len(stages)} solvers chained: base_lr {rates[0]}, x{ratios[0]} at iteration(s) "
                 f"{', '.join(map(str, ends[:-1]))}, to {ends[-1]}")
    return out, notes


def import_recipe(paths: list[str | Path], net: str | None = None, name: str | None = None) -> tuple[dict, list[str], str | None]:
    """Recipe mapping, notes, and the Caffe net file the (first) solver names (or None)."""
    stages, notes = [], []
    net_file = None
    for p in paths:
        fields, n, msg = solver_fields(p)
        stages.append((fields, str(p)))
        notes.extend(f"{p}: {x}" for x in n)
        named = msg.net or msg.train_net
        if named and net_file is None:
            net_file = _resolve(named, Path(p))
    recipe, chain_notes = chain(stages)
    notes.extend(chain_notes)
    ordered: dict[str, Any] = {"name": name or Path(paths[0]).stem}
    ordered["net"] = net or "NET"
    ordered.update(recipe)
    return ordered, notes, net_file


def named_test_net(paths: list[str | Path]) -> str | None:
    """The separate test net file (`test_net:`) the first solver naming one gives, resolved as `net:` is."""
    for p in paths:
        msg, _ = read_text(Path(p), "SolverParameter")
        if msg.test_net:
            return _resolve(msg.test_net[0], Path(p))
    return None


def test_net_fields(test_file: str, notes: list[str]) -> dict:
    """What hpcdl takes from a solver's separate `test_net:` file: its data layer's batch size.

    hpcdl tests the model it trains (the train net's layers) on the held-out data, so the
    test net's layers are not built; its data layer says how many images a test iteration
    takes, as a train_val file's TEST-phase data layer does. Said in one note either way.
    """
    from hpcdl.caffe.nets import phase_data

    if not Path(test_file).is_file():
        notes.append(f"test_net: {test_file} was not found, so its batch size is not imported "
                     f"(test_batch_size defaults to batch_size)")
        return {}
    info = phase_data(test_file, "test")
    if not info.get("batch_size"):
        notes.append(f"test_net: {test_file} has no TEST data layer with a batch_size; the test runs the trained "
                     f"net's layers on the held-out data")
        return {}
    notes.append(f"test_net: {test_file}: test_batch_size {info['batch_size']} from its data layer; the test runs "
                 f"the trained net's layers on the held-out data (its own layers are not imported)")
    return {"test_batch_size": int(info["batch_size"])}


def _resolve(named: str, solver: Path) -> str:
    """A solver's `net:` is relative to where Caffe ran (usually its root): try the usual places."""
    candidates = [Path(named), solver.parent / named, solver.parent / Path(named).name]
    for c in candidates:
        if c.is_file():
            return str(c)
    return named


def data_fields(net_data: dict) -> dict:
    """Recipe fields from an imported net's `caffe.data` (batch sizes, crop, mirror)."""
    out: dict[str, Any] = {}
    train = net_data.get("train") or {}
    test = net_data.get("test") or {}
    if train.get("batch_size"):
        out["batch_size"] = int(train["batch_size"])
    if test.get("batch_size"):
        out["test_batch_size"] = int(test["batch_size"])
    data: dict[str, Any] = {"source": "synthetic"}
    if train.get("crop_size"):
        data["crop"] = int(train["crop_size"])
    if train.get("mirror"):
        data["mirror"] = True
    out["data"] = data
    return out

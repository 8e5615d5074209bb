"""Caffe prototxt nets to hpcdl net definitions and back.

`import_net(path)` reads a `train_val.prototxt` or `deploy.prototxt` with protobuf's
text_format against caffe.proto's messages (hpcdl.caffe.proto) and returns the mapping
an hpcdl net YAML holds. The net is the one Caffe builds in the TRAIN phase (NetState
phase TRAIN, level 0, no stages; `include`/`exclude` rules are Caffe's StateMeetsRule),
plus what the TEST phase adds that hpcdl keeps: the test data layer's batch size and
transform, and Accuracy layers as test metrics.

Caffe writes in-place layers (ReLU, BatchNorm, Scale, Dropout) onto their input blob;
hpcdl names every layer's output after the layer, so blobs are renamed as they are
rewritten. Every value the file leaves to a caffe.proto default is written out, because
several of hpcdl's own defaults differ (LRN alpha, Scale bias_term, BatchNorm
moving_average_fraction, a missing weight filler).

`export_net(spec)` writes an hpcdl net back as prototxt with protobuf's text_format;
in-place layers go back in place. Import, export and import give the same mapping.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from google.protobuf import text_format

from hpcdl.caffe.common import f32, layer_lines, read_text
from hpcdl.caffe.proto import message
from hpcdl.errors import HpcdlError

DATA_TYPES = ("Data", "ImageData", "HDF5Data", "MemoryData", "WindowData", "DummyData", "Input")
# Caffe type -> hpcdl spec type (Split has no layer of its own: its tops alias its bottom)
MAPPED = {
    "Convolution": "Convolution", "Deconvolution": "Deconvolution", "Pooling": "Pooling", "LRN": "LRN",
    "InnerProduct": "InnerProduct", "ReLU": "ReLU", "Sigmoid": "Sigmoid", "TanH": "TanH", "Dropout": "Dropout",
    "Concat": "Concat", "Flatten": "Flatten", "BatchNorm": "BatchNorm", "Scale": "Scale", "Eltwise": "Eltwise",
    "Softmax": "Softmax", "PReLU": "PReLU", "ELU": "ELU", "AbsVal": "AbsVal", "Power": "Power", "BNLL": "BNLL",
    "Exp": "Exp", "Log": "Log", "Threshold": "Threshold", "Bias": "Bias", "Reshape": "Reshape", "Crop": "Crop", "Slice": "Slice",
}
HANDLED = set(MAPPED) | set(DATA_TYPES) | {"Split", "SoftmaxWithLoss", "Accuracy", "Silence"}
IN_PLACE = ("ReLU", "Sigmoid", "TanH", "Dropout", "BatchNorm", "Scale", "PReLU", "ELU")
PARAM_FIELD = {
    "Convolution": "convolution_param", "Deconvolution": "convolution_param", "Pooling": "pooling_param",
    "LRN": "lrn_param", "InnerProduct": "inner_product_param", "ReLU": "relu_param", "Dropout": "dropout_param",
    "Concat": "concat_param", "Flatten": "flatten_param", "BatchNorm": "batch_norm_param", "Scale": "scale_param",
    "Eltwise": "eltwise_param", "Softmax": "softmax_param", "Sigmoid": "sigmoid_param", "TanH": "tanh_param",
    "PReLU": "prelu_param", "ELU": "elu_param", "Power": "power_param", "Exp": "exp_param", "Log": "log_param",
    "Threshold": "threshold_param", "Bias": "bias_param", "Reshape": "reshape_param", "Crop": "crop_param", "Slice": "slice_param",
}
FILLERS = ("constant", "gaussian", "xavier", "msra", "uniform", "bilinear")


class _Refuse(HpcdlError):
    pass


def _meets(state_phase: int, rule) -> bool:
    """Caffe's Net::StateMeetsRule for NetState {phase, level 0, no stage}."""
    if rule.HasField("phase") and rule.phase != state_phase:
        return False
    if rule.HasField("min_level") and 0 < rule.min_level:
        return False
    if rule.HasField("max_level") and 0 > rule.max_level:
        return False
    if list(rule.stage):  # the state has no stages
        return False
    return True


def _in_phase(layer, phase: int) -> bool:
    """Caffe's Net::FilterNet for one layer."""
    if layer.include:
        return any(_meets(phase, r) for r in layer.include)
    if layer.exclude:
        return not any(_meets(phase, r) for r in layer.exclude)
    return True


def _filler(f, where: str, default: dict) -> dict:
    """A FillerParameter as the hpcdl mapping; a missing filler is caffe.proto's default."""
    if f is None:
        return dict(default)
    kind = f.type
    if kind not in FILLERS:
        raise _Refuse(f"{where}: filler type {kind!r} is not supported (hpcdl fills {', '.join(FILLERS)})")
    if kind == "constant":
        return {"type": "constant", "value": f32(f.value)}
    if kind == "gaussian":
        if f.sparse != -1:
            raise _Refuse(f"{where}: gaussian filler with sparse {f.sparse} is not supported")
        out = {"type": "gaussian", "std": f32(f.std)}
        if f.mean:
            out["mean"] = f32(f.mean)
        return out
    if kind == "uniform":
        return {"type": "uniform", "min": f32(f.min), "max": f32(f.max)}
    out = {"type": kind}
    if kind == "bilinear":
        return out
    norm = f.DESCRIPTOR.fields_by_name["variance_norm"].enum_type.values_by_number[f.variance_norm].name
    # always for xavier: an hpcdl `{type: xavier}` without it is the builders' own Xavier, and
    # Caffe's XavierFiller is U(+-sqrt(3 / fan_in)) unless the file says otherwise
    if norm != "FAN_IN" or kind == "xavier":
        out["variance_norm"] = norm
    return out


def _opt_filler(msg, field: str):
    return getattr(msg, field) if msg.HasField(field) else None


def _pair(values: list[int], h, w, default: int, name: str, where: str):
    """Caffe's repeated kernel/pad/stride with *_h/*_w alternatives, as an int or [h, w]."""
    if h is not None or w is not None:
        if values:
            raise _Refuse(f"{where}: give {name} or {name}_h/{name}_w, not both")
        hv, wv = (h if h is not None else default), (w if w is not None else default)
    elif len(values) == 0:
        hv = wv = default
    elif len(values) == 1:
        hv = wv = int(values[0])
    elif len(values) == 2:
        hv, wv = int(values[0]), int(values[1])
    else:
        raise _Refuse(f"{where}: {name} with {len(values)} values: only 2-D layers are supported")
    return hv if hv == wv else [hv, wv]


def _conv_params(layer, where: str) -> dict:
    c = layer.convolution_param
    if not c.HasField("num_output"):
        raise _Refuse(f"{where}: convolution_param.num_output is required")
    if any(d != 1 for d in c.dilation):
        raise _Refuse(f"{where}: dilation {list(c.dilation)} is not supported")
    if c.axis != 1:
        raise _Refuse(f"{where}: convolution_param.axis {c.axis} is not supported (only 1)")
    kh = c.kernel_h if c.HasField("kernel_h") else None
    kw = c.kernel_w if c.HasField("kernel_w") else None
    if not c.kernel_size and kh is None:
        raise _Refuse(f"{where}: convolution_param needs kernel_size")
    out: dict[str, Any] = {
        "num_output": int(c.num_output),
        "kernel_size": _pair(list(c.kernel_size), kh, kw, 0, "kernel", where),
        "stride": _pair(list(c.stride), c.stride_h if c.HasField("stride_h") else None,
                        c.stride_w if c.HasField("stride_w") else None, 1, "stride", where),
        "pad": _pair(list(c.pad), c.pad_h if c.HasField("pad_h") else None,
                     c.pad_w if c.HasField("pad_w") else None, 0, "pad", where),
    }
    if c.group != 1:
        out["group"] = int(c.group)
    out["weight_filler"] = _filler(_opt_filler(c, "weight_filler"), f"{where}: weight_filler", {"type": "constant", "value": 0.0})
    if c.bias_term:
        out["bias_filler"] = _filler(_opt_filler(c, "bias_filler"), f"{where}: bias_filler", {"type": "constant", "value": 0.0})
    else:
        out["bias_term"] = False
    return out


def _layer_params(layer, ltype: str, where: str) -> dict:
    if ltype in ("Convolution", "Deconvolution"):
        return _conv_params(layer, where)
    if ltype == "Pooling":
        p = layer.pooling_param
        pool = p.DESCRIPTOR.fields_by_name["pool"].enum_type.values_by_number[p.pool].name
        if pool == "STOCHASTIC":
            raise _Refuse(f"{where}: STOCHASTIC pooling is not supported (MAX and AVE are)")
        out: dict[str, Any] = {"pool": pool}
        if p.global_pooling:
            if p.HasField("kernel_size") or p.HasField("kernel_h"):
                raise _Refuse(f"{where}: global_pooling with a kernel size (Caffe refuses it too)")
            if p.pad or p.pad_h or p.pad_w or p.stride != 1:
                raise _Refuse(f"{where}: global_pooling needs pad 0 and stride 1 (Caffe's check)")
            out["global_pooling"] = True
        else:
            def one(v):
                return None if v is None else int(v)
            kh = one(p.kernel_h) if p.HasField("kernel_h") else None
            kw = one(p.kernel_w) if p.HasField("kernel_w") else None
            if not p.HasField("kernel_size") and kh is None:
                raise _Refuse(f"{where}: pooling_param needs kernel_size (or global_pooling)")
            out["kernel_size"] = _pair([p.kernel_size] if p.HasField("kernel_size") else [], kh, kw, 0, "kernel", where)
            out["stride"] = _pair([p.stride] if p.HasField("stride") else [],
                                  p.stride_h if p.HasField("stride_h") else None,
                                  p.stride_w if p.HasField("stride_w") else None, 1, "stride", where)
            out["pad"] = _pair([p.pad] if p.HasField("pad") else [], p.pad_h if p.HasField("pad_h") else None,
                               p.pad_w if p.HasField("pad_w") else None, 0, "pad", where)
        if p.round_mode == 1:
            out["round_mode"] = "FLOOR"
        return out
    if ltype == "LRN":
        p = layer.lrn_param
        out = {"local_size": int(p.local_size), "alpha": f32(p.alpha), "beta": f32(p.beta), "k": f32(p.k)}
        if p.norm_region == 1:
            out["norm_region"] = "WITHIN_CHANNEL"
        if p.local_size % 2 == 0:
            raise _Refuse(f"{where}: LRN local_size {p.local_size}: Caffe needs an odd size")
        return out
    if ltype == "InnerProduct":
        p = layer.inner_product_param
        if not p.HasField("num_output"):
            raise _Refuse(f"{where}: inner_product_param.num_output is required")
        if p.axis != 1 or p.transpose:
            raise _Refuse(f"{where}: InnerProduct with axis {p.axis} or transpose is not supported")
        out = {"num_output": int(p.num_output)}
        out["weight_filler"] = _filler(_opt_filler(p, "weight_filler"), f"{where}: weight_filler", {"type": "constant", "value": 0.0})
        if p.bias_term:
            out["bias_filler"] = _filler(_opt_filler(p, "bias_filler"), f"{where}: bias_filler", {"type": "constant", "value": 0.0})
        else:
            out["bias_term"] = False
        return out
    if ltype == "ReLU":
        slope = f32(layer.relu_param.negative_slope)
        return {"negative_slope": slope} if slope else {}
    if ltype == "Dropout":
        return {"dropout_ratio": f32(layer.dropout_param.dropout_ratio)}
    if ltype == "Concat":
        p = layer.concat_param
        axis = p.axis if p.HasField("axis") else p.concat_dim
        if axis != 1:
            raise _Refuse(f"{where}: Concat along axis {axis} is not supported (only channels, axis 1)")
        return {}
    if ltype == "Flatten":
        p = layer.flatten_param
        if p.axis != 1 or p.end_axis != -1:
            raise _Refuse(f"{where}: Flatten with axis {p.axis}, end_axis {p.end_axis} is not supported (only 1, -1)")
        return {}
    if ltype == "BatchNorm":
        p = layer.batch_norm_param
        out = {"moving_average_fraction": f32(p.moving_average_fraction), "eps": f32(p.eps)}
        if p.HasField("use_global_stats"):
            out["use_global_stats"] = bool(p.use_global_stats)
        return out
    if ltype == "Scale":
        p = layer.scale_param
        if p.axis != 1 or p.num_axes != 1:
            raise _Refuse(f"{where}: Scale with axis {p.axis}, num_axes {p.num_axes} is not supported (per-channel only)")
        out = {"bias_term": bool(p.bias_term),
               "filler": _filler(_opt_filler(p, "filler"), f"{where}: filler", {"type": "constant", "value": 1.0})}
        if p.bias_term:
            out["bias_filler"] = _filler(_opt_filler(p, "bias_filler"), f"{where}: bias_filler", {"type": "constant", "value": 0.0})
        return out
    if ltype == "Eltwise":
        p = layer.eltwise_param
        op = p.DESCRIPTOR.fields_by_name["operation"].enum_type.values_by_number[p.operation].name
        out = {"operation": op}
        if p.coeff:
            if op != "SUM":
                raise _Refuse(f"{where}: Eltwise coeff is only for SUM (Caffe refuses it too)")
            if len(p.coeff) != len(layer.bottom):
                raise _Refuse(f"{where}: Eltwise needs one coeff per bottom")
            coeff = [f32(c) for c in p.coeff]
            if any(c != 1.0 for c in coeff):
                out["coeff"] = coeff
        return out
    if ltype == "Softmax":
        if layer.softmax_param.axis != 1:
            raise _Refuse(f"{where}: Softmax along axis {layer.softmax_param.axis} is not supported (only 1)")
        return {}
    if ltype == "PReLU":
        p = layer.prelu_param
        out = {"filler": _filler(_opt_filler(p, "filler"), f"{where}: prelu_param.filler", {"type": "constant", "value": 0.25})}
        if p.channel_shared:
            out["channel_shared"] = True
        return out
    if ltype == "ELU":
        return {"alpha": f32(layer.elu_param.alpha)}
    if ltype == "Power":
        p = layer.power_param
        return {"power": f32(p.power), "scale": f32(p.scale), "shift": f32(p.shift)}
    if ltype in ("Exp", "Log"):
        p = layer.exp_param if ltype == "Exp" else layer.log_param
        if p.base != -1 and p.base <= 0:
            raise _Refuse(f"{where}: {PARAM_FIELD[ltype]}.base {p.base}: Caffe needs -1 (e) or a positive base")
        return {"base": f32(p.base), "scale": f32(p.scale), "shift": f32(p.shift)}
    if ltype == "Threshold":
        return {"threshold": f32(layer.threshold_param.threshold)}
    if ltype == "Bias":
        p = layer.bias_param
        if p.axis != 1 or p.num_axes != 1:
            raise _Refuse(f"{where}: bias_param axis {p.axis}, num_axes {p.num_axes} is not supported (per-channel only: 1, 1)")
        return {"filler": _filler(_opt_filler(p, "filler"), f"{where}: bias_param.filler", {"type": "constant", "value": 0.0})}
    if ltype == "Reshape":
        p = layer.reshape_param
        out = {"shape": [int(d) for d in p.shape.dim]}
        if p.axis != 0:
            out["axis"] = int(p.axis)
        if p.num_axes != -1:
            out["num_axes"] = int(p.num_axes)
        return out
    if ltype == "Crop":
        p = layer.crop_param
        return {"axis": int(p.axis), "offset": [int(o) for o in p.offset]}
    return {}


def _params(layer, where: str) -> list[dict] | None:
    if not layer.param:
        return None
    out = []
    for spec in layer.param:
        if spec.name:
            raise _Refuse(f"{where}: shared parameter {spec.name!r} (param.name): weight sharing is not supported")
        out.append({"lr_mult": f32(spec.lr_mult), "decay_mult": f32(spec.decay_mult)})
    return out


def _data_info(layer) -> dict:
    """Batch size, shape and transform of a data layer (Caffe's DataTransformer fields)."""
    info: dict[str, Any] = {"type": layer.type}
    t = layer.transform_param
    batch = None
    if layer.type == "Data":
        d = layer.data_param
        batch = d.batch_size if d.HasField("batch_size") else None
        if d.source:
            info["source"] = d.source
        for legacy in ("crop_size", "mirror", "mean_file"):
            if d.HasField(legacy):
                raise _Refuse(f"layer {layer.name!r}: data_param.{legacy} is deprecated; use transform_param")
    elif layer.type == "ImageData":
        d = layer.image_data_param
        batch = d.batch_size
        if d.source:
            info["source"] = d.source
        if d.new_height or d.new_width:
            info["resize"] = [int(d.new_height), int(d.new_width)]
    elif layer.type == "HDF5Data":
        batch = layer.hdf5_data_param.batch_size or None
        if layer.hdf5_data_param.source:
            info["source"] = layer.hdf5_data_param.source
    elif layer.type == "WindowData":
        batch = layer.window_data_param.batch_size or None
    elif layer.type == "MemoryData":
        m = layer.memory_data_param
        batch = m.batch_size or None
        info["shape"] = [int(m.channels), int(m.height), int(m.width)]
    elif layer.type in ("Input", "DummyData"):
        shapes = layer.input_param.shape if layer.type == "Input" else layer.dummy_data_param.shape
        if shapes and len(shapes[0].dim) == 4:
            dims = [int(d) for d in shapes[0].dim]
            batch = dims[0]
            info["shape"] = dims[1:]
        elif layer.type == "DummyData" and layer.dummy_data_param.num:
            d = layer.dummy_data_param
            batch = int(d.num[0])
            info["shape"] = [int(d.channels[0]), int(d.height[0]), int(d.width[0])]
    if batch:
        info["batch_size"] = int(batch)
    if t.crop_size:
        info["crop_size"] = int(t.crop_size)
    if t.mirror:
        info["mirror"] = True
    if t.mean_file:
        info["mean_file"] = t.mean_file
    if t.mean_value:
        info["mean_value"] = [f32(v) for v in t.mean_value]
    if t.scale != 1:
        info["scale"] = f32(t.scale)
    if t.force_gray:
        info["force_gray"] = True
    return info


def import_net(path: str | Path, input_size: int | None = None, channels: int | None = None) -> tuple[dict, list[str]]:
    """The hpcdl net mapping of a Caffe prototxt, and notes on what was left out."""
    path = Path(path)
    # first pass: tolerant, to find the layer types (an unsupported layer's own parameter
    # message is not in hpcdl's schema, and is refused by its type and line below)
    try:
        loose, text = read_text(path, "NetParameter", lenient=True)
    except HpcdlError as exc:
        raise _v1_enum_error(path, exc) from None
    v1 = len(loose.layers) > 0
    lines = layer_lines(text, "layers" if v1 else "layer")
    if v1:
        loose = upgrade_v1(loose, lines, path)
    for i, layer in enumerate(loose.layer):
        line = lines[i] if i < len(lines) else "?"
        if layer.type not in HANDLED:
            raise HpcdlError(f"{path}:{line}: layer {layer.name!r} has type {layer.type!r}, which hpcdl does not "
                             f"support (supported: {', '.join(sorted(HANDLED))})")
    net, _ = read_text(path, "NetParameter")  # strict: a misspelt field is an error with its line
    if v1:
        net = upgrade_v1(net, lines, path)
    try:
        return _convert(net, lines, path, input_size, channels)
    except _Refuse as exc:
        # a layer's refusal starts with its line ("12: layer ..."); a whole-net one is said after "FILE: "
        # (HpcdlError folds the leading space away, and "bad.prototxt:2 output blobs" reads as line 2)
        msg = str(exc)
        raise HpcdlError(f"{path}:{msg}" if re.match(r"(\d+|\?): ", msg) else f"{path}: {msg}") from None


def phase_data(path: str | Path, phase: str) -> dict:
    """The data layer of one phase ("train" or "test") of a Caffe net file, as `_data_info` gives
    it ({} when there is none). Only the data layers are read, so a test net's other layers
    need not be ones hpcdl builds."""
    path = Path(path)
    net, text = read_text(path, "NetParameter", lenient=True)
    if len(net.layers):
        net = upgrade_v1(net, layer_lines(text, "layers"), path)
    for layer in net.layer:
        if layer.type in DATA_TYPES and _in_phase(layer, {"train": 0, "test": 1}[phase]):
            return _data_info(layer)
    return {}


# V1LayerParameter.LayerType -> the LayerParameter type string (Caffe's UpgradeV1LayerType)
V1_TYPES = {
    "NONE": "", "ABSVAL": "AbsVal", "ACCURACY": "Accuracy", "ARGMAX": "ArgMax", "BNLL": "BNLL", "CONCAT": "Concat",
    "CONTRASTIVE_LOSS": "ContrastiveLoss", "CONVOLUTION": "Convolution", "DECONVOLUTION": "Deconvolution",
    "DATA": "Data", "DROPOUT": "Dropout", "DUMMY_DATA": "DummyData", "EUCLIDEAN_LOSS": "EuclideanLoss",
    "ELTWISE": "Eltwise", "EXP": "Exp", "FLATTEN": "Flatten", "HDF5_DATA": "HDF5Data", "HDF5_OUTPUT": "HDF5Output",
    "HINGE_LOSS": "HingeLoss", "IM2COL": "Im2col", "IMAGE_DATA": "ImageData", "INFOGAIN_LOSS": "InfogainLoss",
    "INNER_PRODUCT": "InnerProduct", "LRN": "LRN", "MEMORY_DATA": "MemoryData",
    "MULTINOMIAL_LOGISTIC_LOSS": "MultinomialLogisticLoss", "MVN": "MVN", "POOLING": "Pooling", "POWER": "Power",
    "RELU": "ReLU", "SIGMOID": "Sigmoid", "SIGMOID_CROSS_ENTROPY_LOSS": "SigmoidCrossEntropyLoss",
    "SILENCE": "Silence", "SOFTMAX": "Softmax", "SOFTMAX_LOSS": "SoftmaxWithLoss", "SPLIT": "Split",
    "SLICE": "Slice", "TANH": "TanH", "WINDOW_DATA": "WindowData", "THRESHOLD": "Threshold",
}
# V1 data layers whose deprecated scale/mean_file/crop_size/mirror Caffe moves into
# transform_param (UpgradeNetDataTransformation)
_V1_DATA_PARAM = {"DATA": "data_param", "IMAGE_DATA": "image_data_param", "WINDOW_DATA": "window_data_param"}


def _v1_enum_error(path: Path, exc: HpcdlError) -> HpcdlError:
    """A V1 layer whose type is no value of caffe.proto's LayerType enum (a fork's layer), said
    the way any unsupported layer is: its line, name and type; other parse errors as they are."""
    m = re.search(r":(\d+):\d+: .*Enum type \"caffe\.V1LayerParameter\.LayerType\" has no value named (\w+)", str(exc))
    if not m:
        return exc
    line, ltype = int(m.group(1)), m.group(2)
    text = path.read_text(errors="replace")
    starts = [n for n in layer_lines(text, "layers") if n <= line]
    start = starts[-1] if starts else line
    following = [n for n in layer_lines(text, "layers") if n > start]
    block = "\n".join(text.splitlines()[start - 1:(following[0] - 1) if following else None])
    name = re.search(r"\bname\s*:\s*[\"']([^\"']*)[\"']", block)
    who = f"layer {name.group(1)!r}" if name else "a layer"
    return HpcdlError(f"{path}:{start}: {who} has type {ltype}, which is not a layer type of Caffe's V1 format "
                      f"(caffe.proto's V1LayerParameter.LayerType); hpcdl does not support it")


def upgrade_v1(v1net, lines: list[int], path: Path):
    """A V1 NetParameter (`layers { type: CONVOLUTION }`) as the current one, as Caffe reads it.

    Caffe's upgrade_proto.cpp, in the order UpgradeNetAsNeeded applies it: the data
    layers' deprecated transform fields move to transform_param, then each
    V1LayerParameter becomes a LayerParameter (UpgradeV1LayerParameter): name, bottom,
    top, include/exclude, blobs, loss_weight and every *_param carry over; the type enum
    becomes its type string; `blobs_lr` and `weight_decay` become `param { lr_mult
    decay_mult }`, and `param` (blob names) becomes `param { name }`. A V0 layer
    (`layers { layer { ... } }`) is refused.
    """
    if len(v1net.layer):
        raise HpcdlError(f"{path}: the file has both `layer` and V1 `layers` fields (Caffe refuses it too); "
                         f"use one format")
    net = message("NetParameter")
    net.CopyFrom(v1net)
    del net.layers[:]
    type_names = v1net.layers[0].DESCRIPTOR.fields_by_name["type"].enum_type.values_by_number if len(v1net.layers) else {}
    new_fields = net.layer.add().DESCRIPTOR.fields_by_name
    del net.layer[:]
    for i, old in enumerate(v1net.layers):
        line = lines[i] if i < len(lines) else "?"
        if old.HasField("layer"):
            raise HpcdlError(f"{path}:{line}: layer {old.layer.name or old.name!r} is in the V0 format "
                             f"(`layers {{ layer {{ ... }} }}`, Caffe before 2014), which hpcdl does not read")
        enum_name = type_names[old.type].name if old.HasField("type") else "NONE"
        layer = net.layer.add()
        layer.bottom.extend(old.bottom)
        layer.top.extend(old.top)
        if old.HasField("name"):
            layer.name = old.name
        for rule in old.include:
            layer.include.add().CopyFrom(rule)
        for rule in old.exclude:
            layer.exclude.add().CopyFrom(rule)
        if old.HasField("type"):
            layer.type = V1_TYPES[enum_name]
        for blob in old.blobs:
            layer.blobs.add().CopyFrom(blob)
        # V1's per-blob lists become one ParamSpec per blob
        for v1_field, field in (("param", "name"), ("blob_share_mode", "share_mode"), ("blobs_lr", "lr_mult"),
                                ("weight_decay", "decay_mult")):
            for j, value in enumerate(getattr(old, v1_field)):
                while len(layer.param) <= j:
                    layer.param.add()
                setattr(layer.param[j], field, value)
        layer.loss_weight.extend(old.loss_weight)
        data_field = _V1_DATA_PARAM.get(enum_name)
        if data_field and old.HasField(data_field):
            legacy, t = getattr(old, data_field), old.transform_param
            for f in ("scale", "mean_file", "crop_size", "mirror"):
                if legacy.HasField(f):
                    setattr(t, f, getattr(legacy, f))
                    legacy.ClearField(f)
        for fd, value in old.ListFields():
            if fd.name.endswith("_param") and fd.name in new_fields:
                getattr(layer, fd.name).CopyFrom(value)
            # a *_param hpcdl's LayerParameter does not declare belongs to a layer type
            # hpcdl does not build, which is refused by its type
    return net


def _convert(net, lines: list[int], path: Path, input_size, channels) -> tuple[dict, list[str]]:
    TRAIN, TEST = 0, 1
    notes: list[str] = []
    layers_train = [(i, l) for i, l in enumerate(net.layer) if _in_phase(l, TRAIN)]
    layers_test = [(i, l) for i, l in enumerate(net.layer) if _in_phase(l, TEST)]

    def where(i: int, layer) -> str:
        return f"{lines[i] if i < len(lines) else '?'}: layer {layer.name!r} ({layer.type})"

    # the input blob: a data layer's first top, an Input layer, or the deprecated input/input_shape fields
    data: dict[str, Any] = {}
    input_blob, label_blobs, shape = None, set(), None
    if net.input:
        input_blob = net.input[0]
        dims = list(net.input_shape[0].dim) if net.input_shape else list(net.input_dim[:4])
        if len(dims) == 4:
            shape = [int(d) for d in dims[1:]]
            data["deploy"] = {"type": "Input", "batch_size": int(dims[0]), "shape": shape}
        label_blobs.update(net.input[1:])
    for phase, layers in (("train", layers_train), ("test", layers_test)):
        for i, layer in layers:
            if layer.type not in DATA_TYPES:
                continue
            if not layer.top:
                raise _Refuse(f"{where(i, layer)}: a data layer without a top")
            if input_blob is None:
                input_blob = layer.top[0]
            elif layer.top[0] != input_blob:
                raise _Refuse(f"{where(i, layer)}: a second input blob {layer.top[0]!r} (hpcdl nets take one image input)")
            label_blobs.update(layer.top[1:])
            info = _data_info(layer)
            key = phase if layer.type != "Input" else "deploy"
            if key in data and key != "deploy":
                raise _Refuse(f"{where(i, layer)}: two data layers in the {phase.upper()} phase")
            data[key] = info
            shape = shape or info.get("shape")
    if input_blob is None:
        raise HpcdlError(f"{path}: no input: the net has no data layer, Input layer or `input:` field")
    first = data.get("train") or data.get("test") or {}
    crop = first.get("crop_size")
    if input_size is not None:
        size = [input_size, input_size]
    elif crop:
        size = [crop, crop]
    elif first.get("resize") and all(first["resize"]):
        size = list(first["resize"])  # ImageData new_height/new_width without a crop
    elif shape:
        size = shape[1:]
    else:
        kind = first.get("type", "data")
        source = f" reading {first['source']}" if first.get("source") else ""
        raise HpcdlError(f"{path}: the net's input size is not in the file (its {kind} layer{source} has no "
                         f"crop_size, and there is no Input shape): Caffe takes it from the images; give it "
                         f"with --input-size (and --channels when they are not 3-channel, e.g. --input-size 28 "
                         f"--channels 1 for MNIST)")
    chans = channels or (shape[0] if shape else (1 if (data.get("train") or {}).get("force_gray") else 3))

    # walk the TRAIN net: Caffe blob name -> hpcdl top; in-place layers get new names
    blob: dict[str, str] = {input_blob: "data"}
    producer: dict[str, dict] = {}
    out_layers: list[dict] = []
    losses: list[tuple[str, float, str]] = []  # (hpcdl blob, weight, loss layer)
    names: set[str] = set()
    for i, layer in layers_train:
        w = where(i, layer)
        t = layer.type
        if t in DATA_TYPES or t == "Silence":
            continue
        if t in ("SoftmaxWithLoss", "Accuracy"):
            continue  # handled after the walk (they read the final blobs)
        if layer.name in names:
            raise _Refuse(f"{w}: the layer name is used twice")
        if layer.name == "data":
            raise _Refuse(f"{w}: a computing layer named 'data' (hpcdl's input blob has that name)")
        names.add(layer.name)
        if layer.loss_weight and any(x != 0 for x in layer.loss_weight):
            raise _Refuse(f"{w}: loss_weight on a {t} layer: only SoftmaxWithLoss losses are supported")
        for b in layer.bottom:
            if b not in blob:
                raise _Refuse(f"{w}: bottom {b!r} is not produced by an earlier layer")
        if t == "Split":
            for top in layer.top:
                blob[top] = blob[layer.bottom[0]]
            continue
        if t == "Slice":
            # one hpcdl layer per top, named after its blob; export writes them back as one Slice
            if len(layer.bottom) != 1:
                raise _Refuse(f"{w}: Slice takes one bottom, not {len(layer.bottom)}")
            sp = layer.slice_param
            axis = int(sp.slice_dim) if sp.HasField("slice_dim") else int(sp.axis)  # slice_dim: the deprecated alias
            for i, top in enumerate(layer.top):
                if top in names or top in blob:
                    raise _Refuse(f"{w}: top {top!r} is also the name of another layer or blob (hpcdl names each "
                                  f"slice after its top)")
                names.add(top)
                entry = {"type": "Slice", "name": top, "bottom": blob[layer.bottom[0]], "slice": layer.name,
                         "axis": axis, "slice_point": [int(x) for x in sp.slice_point], "count": len(layer.top),
                         "index": i}
                blob[top] = top
                producer[top] = entry
                out_layers.append(entry)
            continue
        if len(layer.top) != 1:
            raise _Refuse(f"{w}: {len(layer.top)} tops; hpcdl layers have one")
        need = {"Concat": None, "Eltwise": None, "Crop": None}
        if t == "Bias" and len(layer.bottom) != 1:
            raise _Refuse(f"{w}: Bias with {len(layer.bottom)} bottoms (the bias given as bottom[1]) is not "
                          f"supported; hpcdl builds the one-bottom form, whose bias is a learned blob (bias_param)")
        if t == "Crop" and len(layer.bottom) != 2:
            raise _Refuse(f"{w}: Crop takes two bottoms (the blob, and the one whose size it takes), not {len(layer.bottom)}")
        if t not in need and len(layer.bottom) != 1:
            raise _Refuse(f"{w}: {len(layer.bottom)} bottoms; a {t} layer takes one here")
        if t in need and len(layer.bottom) < 2 and t == "Eltwise":
            raise _Refuse(f"{w}: Eltwise needs two or more bottoms")
        entry: dict[str, Any] = {"type": MAPPED[t], "name": layer.name}
        bottoms = [blob[b] for b in layer.bottom]
        entry["bottom"] = bottoms if t in need else bottoms[0]
        entry.update(_layer_params(layer, t, w))
        mults = _params(layer, w)
        if mults:
            entry["param"] = mults
        blob[layer.top[0]] = layer.name
        producer[layer.name] = entry
        out_layers.append(entry)

    for i, layer in layers_train:
        if layer.type != "SoftmaxWithLoss":
            continue
        w = where(i, layer)
        weight = f32(layer.loss_weight[0]) if layer.loss_weight else 1.0
        lp = layer.loss_param
        if lp.HasField("ignore_label") or (lp.HasField("normalization") and lp.normalization != 1) or \
                (lp.HasField("normalize") and not lp.normalize):
            raise _Refuse(f"{w}: loss_param other than the default (VALID normalisation, no ignore_label) is not supported")
        if layer.softmax_param.axis != 1:
            raise _Refuse(f"{w}: SoftmaxWithLoss along axis {layer.softmax_param.axis} is not supported")
        if len(layer.bottom) != 2 or layer.bottom[1] not in label_blobs:
            raise _Refuse(f"{w}: SoftmaxWithLoss must read (scores, label) with the label from the data layer")
        if layer.bottom[0] not in blob:
            raise _Refuse(f"{w}: bottom {layer.bottom[0]!r} is not produced by an earlier layer")
        if weight:
            losses.append((blob[layer.bottom[0]], weight, layer.name))

    # Caffe builds the TEST net too: a layer only it has (GoogLeNet-BN's `loss3/prob`, a Softmax
    # over the classifier) may sit between the trained blobs and an Accuracy. A Softmax keeps
    # each example's order of classes, so the accuracy of its output is the accuracy of its
    # input; any other TEST-only layer would change what is measured.
    train_index = {i for i, _ in layers_train}
    test_made: dict[str, Any] = {}  # blob -> the TEST-only layer that writes it
    for i, layer in layers_test:
        if i not in train_index and layer.type not in DATA_TYPES and layer.type != "Accuracy":
            for top in layer.top:
                test_made[top] = layer

    def trained_blob(src: str | None, w: str) -> str:
        seen = set()
        while src not in blob:
            if src not in test_made or src in seen:
                raise _Refuse(f"{w}: bottom {src!r} is not produced by any layer of the TRAIN or TEST net")
            seen.add(src)
            made = test_made[src]
            if made.type != "Softmax" or len(made.bottom) != 1 or made.softmax_param.axis != 1:
                raise _Refuse(f"{w}: it reads {src!r}, which the TEST-phase layer {made.name!r} ({made.type}) makes "
                              f"from the class scores; hpcdl measures accuracy on the trained net's class scores, "
                              f"which only a Softmax (over axis 1) leaves in the same order")
            src = made.bottom[0]
        return blob[src]

    metrics = []
    for i, layer in layers_test:
        if layer.type != "Accuracy":
            continue
        w = where(i, layer)
        if layer.accuracy_param.axis != 1 or layer.accuracy_param.HasField("ignore_label"):
            raise _Refuse(f"{w}: Accuracy with an axis other than 1 or an ignore_label is not supported")
        src = trained_blob(layer.bottom[0] if layer.bottom else None, w)
        metrics.append({"name": layer.name, "bottom": src, "top_k": int(layer.accuracy_param.top_k)})

    # the main output: the loss with the largest weight (the last of equals), or with no
    # loss (a deploy file) the top of the last layer
    consumers: dict[str, list[str]] = {}
    for entry in out_layers:
        for b in _bottoms(entry):
            consumers.setdefault(b, []).append(entry["name"])
    if losses:
        main_top, main_weight, _ = max(reversed(losses), key=lambda r: r[1])
        if main_weight != 1.0:
            raise _Refuse(f" the main loss has loss_weight {main_weight}; hpcdl's main loss weighs 1")
        aux = [(top, wt) for top, wt, name in losses if top != main_top]
    else:
        if not out_layers:
            raise HpcdlError(f"{path}: the net has no layers hpcdl builds")
        ends = [e["name"] for e in out_layers if e["name"] not in consumers]
        main_top = out_layers[-1]["name"]
        if len(ends) > 1:
            raise _Refuse(f" {len(ends)} output blobs ({', '.join(ends)}) and no loss layer to say which is the output")
        aux = []
    if main_top == "data":
        raise _Refuse(" the loss reads the input blob directly")

    def ancestors(top: str) -> set[str]:
        seen, stack = set(), [top]
        while stack:
            t = stack.pop()
            if t in seen or t == "data":
                continue
            seen.add(t)
            stack.extend(_bottoms(producer[t]))
        return seen

    main_set = ancestors(main_top)
    aux_set: set[str] = set()
    for top, weight in aux:
        if top in main_set:
            raise _Refuse(f" an auxiliary loss reads {top!r}, which the main output also needs")
        aux_set |= ancestors(top) - main_set
        producer[top]["loss_weight"] = weight
    dropped = [e["name"] for e in out_layers if e["name"] not in main_set and e["name"] not in aux_set]
    if dropped:
        notes.append(f"left out {len(dropped)} layer(s) that feed no loss or output: {', '.join(dropped)}")
    kept = [e for e in out_layers if e["name"] in main_set or e["name"] in aux_set]
    for e in kept:
        if e["name"] in aux_set:
            e["aux"] = True
    if kept[-1]["name"] != main_top:
        # build_spec's output is the last main-tower layer; aux layers may come after it
        last_main = [e for e in kept if not e.get("aux")][-1]["name"]
        if last_main != main_top:
            raise _Refuse(f" the main output {main_top!r} is not the last layer of the main tower")

    # the class count: the classifier that makes the main output (through shape-keeping layers)
    classes = None
    top = main_top
    while top in producer:
        e = producer[top]
        if e["type"] in ("InnerProduct", "Convolution", "Deconvolution"):
            classes = e["num_output"]
            e["num_output"] = "classes"
            break
        # shape-keeping layers, and Pooling, which keeps the channels (SqueezeNet and NIN pool their
        # class maps: the classifier is the convolution before the global pooling)
        if e["type"] not in ("Softmax", "Dropout", "ReLU", "Sigmoid", "TanH", "Flatten", "Scale", "BatchNorm", "Pooling",
                             "PReLU", "ELU", "Bias"):
            break
        top = e["bottom"]
    if classes is not None:
        for e in kept:
            if e.get("aux") and e.get("loss_weight") is not None and e.get("num_output") == classes:
                e["num_output"] = "classes"

    # write defaults out of the mapping: bottom when it is the previous layer's top
    previous = main_previous = "data"
    for e in kept:
        is_aux = bool(e.get("aux"))
        default = previous if is_aux else main_previous
        if e["bottom"] == default:
            del e["bottom"]
        previous = e["name"]
        if not is_aux:
            main_previous = e["name"]

    result: dict[str, Any] = {
        "description": f"Caffe net {net.name or path.stem!r}, imported from prototxt",
        "reference": f"Caffe prototxt (net {net.name or path.stem!r})",
        "input": {"channels": int(chans), "size": int(size[0])} if size[0] == size[1]
        else {"channels": int(chans), "height": int(size[0]), "width": int(size[1])},
        "classes": int(classes) if classes else 1000,
        "layers": kept,
    }
    caffe: dict[str, Any] = {"name": net.name or path.stem}
    if data:
        caffe["data"] = data
    if metrics:
        caffe["metrics"] = metrics
    result["caffe"] = caffe
    return result, notes


def _bottoms(entry: dict) -> list[str]:
    b = entry.get("bottom")
    return list(b) if isinstance(b, list) else [b]


# ---------------------------------------------------------------- export

def _set_filler(msg, filler: dict | None):
    filler = filler or {}
    msg.type = filler.get("type", "constant")
    if msg.type == "constant":
        msg.value = float(filler.get("value", 0.0))
    elif msg.type == "gaussian":
        msg.std = float(filler.get("std", 1.0))
        if filler.get("mean"):
            msg.mean = float(filler["mean"])
    elif msg.type == "uniform":
        msg.min = float(filler.get("min", 0.0))
        msg.max = float(filler.get("max", 1.0))
    elif msg.type == "bilinear":
        pass
    elif msg.type in ("xavier", "msra"):
        norm = filler.get("variance_norm", "FAN_IN")
        if norm != "FAN_IN":
            msg.variance_norm = msg.DESCRIPTOR.fields_by_name["variance_norm"].enum_type.values_by_name[norm].number
    else:
        raise HpcdlError(f"export: filler type {msg.type!r} has no Caffe equivalent")


# hpcdl's builders' defaults where a bundled net file leaves a value out (they differ
# from caffe.proto's, so the export writes them)
HPCDL_DEFAULT_WEIGHT_FILLER = {"type": "msra", "variance_norm": "FAN_OUT"}


def _hw(v):
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


def _set_spatial(msg, key: str, value, repeated: bool):
    h, w = _hw(value)
    if repeated:
        del getattr(msg, key)[:]
        getattr(msg, key).extend([h] if h == w else [h, w])
    elif h == w:
        setattr(msg, key, h)
    else:
        setattr(msg, f"{key}_h", h)
        setattr(msg, f"{key}_w", w)


def export_net(spec, data: dict | None = None, deploy: bool = False) -> str:
    """Prototxt text of a NetSpec built with its aux heads (load_net(..., aux_heads=True)).

    `data` is the net file's `caffe:` mapping, when it has one (an imported net): its
    data layers and Accuracy metrics are written back. Without one the input is an Input
    layer (with a label blob unless deploy).
    """
    data = data or {}
    net = message("NetParameter")
    net.name = data.get("name", spec.name)
    aux_tops = dict(spec.aux_outputs)
    aux_names = _aux_layers(spec)
    layers = [l for l in spec.layers if not (deploy and l.name in aux_names)]
    # Caffe blob names: in-place layers write onto their bottom when nothing else reads it
    readers: dict[str, int] = {}
    for l in layers:
        for b in l.bottom:
            readers[b] = readers.get(b, 0) + 1
    outputs = {spec.output, *aux_tops}
    cblob = {"data": "data"}
    for l in layers:
        b = l.bottom[0]
        if l.type in IN_PLACE and len(l.bottom) == 1 and b != "data" and readers.get(b) == 1 and b not in outputs:
            cblob[l.top] = cblob[b]
        else:
            cblob[l.top] = l.top

    sources = data.get("data") or {}
    label = "label"
    batch_c = (spec.input_shape[0], spec.input_shape[1], spec.input_shape[2])
    if deploy or not (sources.get("train") or sources.get("test")):
        inp = net.layer.add(name="data", type="Input")
        inp.top.append("data")
        batch = (sources.get("deploy") or {}).get("batch_size", 1) if deploy else \
            (sources.get("deploy") or {}).get("batch_size", 1)
        inp.input_param.shape.add().dim.extend([batch, *batch_c])
        if not deploy:
            inp.top.append(label)
            inp.input_param.shape.add().dim.extend([batch])
    else:
        for phase in ("train", "test"):
            info = sources.get(phase)
            if not info:
                continue
            _data_layer(net, info, phase)
    slices: dict[str, dict[int, str]] = {}  # a Slice's tops by index, from its one-top hpcdl layers
    for l in layers:
        if l.type == "Slice":
            slices.setdefault(l.params["slice"], {})[int(l.params["index"])] = cblob[l.top]
    for l in layers:
        if l.type == "Slice":
            group = l.params["slice"]
            if group not in slices:
                continue  # written with its first top
            tops = slices.pop(group)
            layer = net.layer.add(name=group, type="Slice")
            layer.bottom.append(cblob[l.bottom[0]])
            # a top no kept layer reads was left out on import; Caffe needs one per piece
            layer.top.extend(tops.get(i, f"{group}_unused{i}") for i in range(int(l.params["count"])))
            layer.slice_param.axis = int(l.params.get("axis", 1))
            layer.slice_param.slice_point.extend(int(x) for x in l.params.get("slice_point", []))
            continue
        _export_layer(net, l, cblob, aux_tops)
    if deploy and {l.top: l.type for l in layers}[spec.output] != "Softmax":
        # a zoo deploy file ends in the class probabilities its train_val's SoftmaxWithLoss
        # computed inside the loss: `layer { name: "prob" type: "Softmax" }` (BVLC AlexNet,
        # CaffeNet, GoogLeNet, KaimingHe's ResNets)
        taken = {l.name for l in layers} | set(cblob.values())
        prob = net.layer.add(name="prob" if "prob" not in taken else f"{spec.output}/prob", type="Softmax")
        prob.bottom.append(cblob[spec.output])
        prob.top.append(prob.name)
    if not deploy:
        for top, weight in [(spec.output, 1.0), *spec.aux_outputs]:
            loss = net.layer.add(name=f"{top}/loss" if top != spec.output else "loss", type="SoftmaxWithLoss")
            loss.bottom.extend([cblob[top], label])
            loss.top.append(loss.name)
            if weight != 1.0:
                loss.loss_weight.append(weight)
        for m in data.get("metrics", []):
            acc = net.layer.add(name=m["name"], type="Accuracy")
            acc.bottom.extend([cblob[m["bottom"]], label])
            acc.top.append(m["name"])
            acc.include.add().phase = 1
            if m.get("top_k", 1) != 1:
                acc.accuracy_param.top_k = int(m["top_k"])
    return text_format.MessageToString(net)


def _aux_layers(spec) -> set[str]:
    """Names of the layers only the auxiliary outputs need."""
    producer = {l.top: l for l in spec.layers}

    def anc(top):
        seen, stack = set(), [top]
        while stack:
            t = stack.pop()
            if t in seen or t not in producer:
                continue
            seen.add(t)
            stack.extend(producer[t].bottom)
        return seen

    main = anc(spec.output)
    aux = set()
    for top, _ in spec.aux_outputs:
        aux |= anc(top) - main
    return {producer[t].name for t in aux}


def _data_layer(net, info: dict, phase: str):
    ltype = info.get("type", "Data")
    layer = net.layer.add(name="data", type=ltype)
    layer.top.extend(["data", "label"])
    layer.include.add().phase = 0 if phase == "train" else 1
    t = layer.transform_param
    if info.get("crop_size"):
        t.crop_size = int(info["crop_size"])
    if info.get("mirror"):
        t.mirror = True
    if info.get("mean_file"):
        t.mean_file = info["mean_file"]
    if info.get("mean_value"):
        t.mean_value.extend(info["mean_value"])
    if "scale" in info:
        t.scale = float(info["scale"])
    if info.get("force_gray"):
        t.force_gray = True
    batch = info.get("batch_size")
    if ltype == "Data":
        if info.get("source"):
            layer.data_param.source = info["source"]
        if batch:
            layer.data_param.batch_size = int(batch)
    elif ltype == "ImageData":
        if info.get("source"):
            layer.image_data_param.source = info["source"]
        if batch:
            layer.image_data_param.batch_size = int(batch)
        if info.get("resize"):
            layer.image_data_param.new_height, layer.image_data_param.new_width = info["resize"]
    elif ltype == "HDF5Data":
        if info.get("source"):
            layer.hdf5_data_param.source = info["source"]
        if batch:
            layer.hdf5_data_param.batch_size = int(batch)
    elif ltype == "WindowData":
        if batch:
            layer.window_data_param.batch_size = int(batch)
    elif ltype == "MemoryData":
        m = layer.memory_data_param
        if batch:
            m.batch_size = int(batch)
        m.channels, m.height, m.width = info["shape"]
    elif ltype == "DummyData":
        layer.dummy_data_param.shape.add().dim.extend([batch or 1, *info["shape"]])
        layer.dummy_data_param.shape.add().dim.extend([batch or 1])


def _export_layer(net, l, cblob: dict, aux_tops: dict):
    p = l.params
    layer = net.layer.add(name=l.name, type=l.type)
    layer.bottom.extend(cblob[b] for b in l.bottom)
    layer.top.append(cblob[l.top])
    for m in p.get("param") or []:
        spec = layer.param.add()
        spec.lr_mult = float(m.get("lr_mult", 1.0))
        spec.decay_mult = float(m.get("decay_mult", 1.0))
    t = l.type
    if t in ("Convolution", "Deconvolution"):
        c = layer.convolution_param
        c.num_output = int(p["num_output"])
        _set_spatial(c, "kernel_size", p["kernel_size"], True)
        if _hw(p.get("stride", 1)) != (1, 1):
            _set_spatial(c, "stride", p.get("stride", 1), True)
        if _hw(p.get("pad", 0)) != (0, 0):
            _set_spatial(c, "pad", p.get("pad", 0), True)
        if p.get("group", 1) != 1:
            c.group = int(p["group"])
        _set_filler(c.weight_filler, p.get("weight_filler") or HPCDL_DEFAULT_WEIGHT_FILLER)
        if p.get("bias_term", True):
            _set_filler(c.bias_filler, p.get("bias_filler") or {"type": "constant", "value": 0.0})
        else:
            c.bias_term = False
    elif t == "InnerProduct":
        c = layer.inner_product_param
        c.num_output = int(p["num_output"])
        _set_filler(c.weight_filler, p.get("weight_filler") or HPCDL_DEFAULT_WEIGHT_FILLER)
        if p.get("bias_term", True):
            _set_filler(c.bias_filler, p.get("bias_filler") or {"type": "constant", "value": 0.0})
        else:
            c.bias_term = False
    elif t == "Pooling":
        c = layer.pooling_param
        c.pool = c.DESCRIPTOR.fields_by_name["pool"].enum_type.values_by_name[p.get("pool", "MAX")].number
        if p.get("global_pooling"):
            c.global_pooling = True
        else:
            _set_spatial(c, "kernel_size", p["kernel_size"], False)
            if _hw(p.get("stride", 1)) != (1, 1):
                _set_spatial(c, "stride", p.get("stride", 1), False)
            if _hw(p.get("pad", 0)) != (0, 0):
                _set_spatial(c, "pad", p.get("pad", 0), False)
        if p.get("round_mode", "CEIL") == "FLOOR":
            c.round_mode = 1
    elif t == "LRN":
        c = layer.lrn_param
        c.local_size = int(p.get("local_size", 5))
        c.alpha = float(p.get("alpha", 1e-4))  # hpcdl's builders' default (caffe.proto's is 1)
        c.beta = float(p.get("beta", 0.75))
        c.k = float(p.get("k", 1.0))
        if p.get("norm_region") == "WITHIN_CHANNEL":
            c.norm_region = 1
    elif t == "ReLU":
        if p.get("negative_slope"):
            layer.relu_param.negative_slope = float(p["negative_slope"])
    elif t == "Dropout":
        layer.dropout_param.dropout_ratio = float(p.get("dropout_ratio", 0.5))
    elif t == "BatchNorm":
        if p.get("affine"):
            raise HpcdlError(f"export: layer {l.name}: BatchNorm with affine has no Caffe equivalent (use BatchNorm + Scale)")
        c = layer.batch_norm_param
        c.moving_average_fraction = float(p.get("moving_average_fraction", 0.9))  # hpcdl's default
        c.eps = float(p.get("eps", 1e-5))
        if "use_global_stats" in p:
            c.use_global_stats = bool(p["use_global_stats"])
    elif t == "Scale":
        c = layer.scale_param
        c.bias_term = bool(p.get("bias_term", True))  # hpcdl's default (caffe.proto's is false)
        _set_filler(c.filler, p.get("filler") or {"type": "constant", "value": 1.0})
        if c.bias_term:
            _set_filler(c.bias_filler, p.get("bias_filler") or {"type": "constant", "value": 0.0})
    elif t == "Eltwise":
        c = layer.eltwise_param
        c.operation = c.DESCRIPTOR.fields_by_name["operation"].enum_type.values_by_name[p.get("operation", "SUM")].number
        if p.get("coeff"):
            c.coeff.extend(float(x) for x in p["coeff"])
    elif t == "PReLU":
        c = layer.prelu_param
        _set_filler(c.filler, p.get("filler") or {"type": "constant", "value": 0.25})
        if p.get("channel_shared"):
            c.channel_shared = True
    elif t == "ELU":
        layer.elu_param.alpha = float(p.get("alpha", 1.0))
    elif t in ("Power", "Exp", "Log"):
        c = getattr(layer, PARAM_FIELD[t])
        if t != "Power":
            c.base = float(p.get("base", -1.0))
        else:
            c.power = float(p.get("power", 1.0))
        c.scale = float(p.get("scale", 1.0))
        c.shift = float(p.get("shift", 0.0))
    elif t == "Threshold":
        layer.threshold_param.threshold = float(p.get("threshold", 0.0))
    elif t == "Bias":
        _set_filler(layer.bias_param.filler, p.get("filler") or {"type": "constant", "value": 0.0})
    elif t == "Reshape":
        c = layer.reshape_param
        c.shape.dim.extend(int(d) for d in p.get("shape", []))
        c.shape.SetInParent()
        if p.get("axis", 0) != 0:
            c.axis = int(p["axis"])
        if p.get("num_axes", -1) != -1:
            c.num_axes = int(p["num_axes"])
    elif t == "Crop":
        c = layer.crop_param
        c.axis = int(p.get("axis", 2))
        c.offset.extend(int(o) for o in p.get("offset", []))
    elif t in ("Concat", "Flatten", "Softmax", "Sigmoid", "TanH", "AbsVal", "BNLL"):
        pass
    else:
        raise HpcdlError(f"export: layer {l.name}: type {t} has no Caffe equivalent")
    if l.top in aux_tops:
        pass  # its loss is written after the layers


def load_net_file(path: str | Path) -> dict:
    import yaml

    return yaml.safe_load(Path(path).read_text())

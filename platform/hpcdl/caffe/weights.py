""".caffemodel weights: read and write Caffe's binary NetParameter, move blobs in and out
of the PyTorch, Keras (TensorFlow) and Gluon (MXNet) builds of a net.

A `.caffemodel` is a serialised `caffe.NetParameter` whose layers carry `blobs`
(BlobProto: a shape and float data). hpcdl reads it with the protobuf runtime against
the caffe.proto messages in hpcdl.caffe.proto; 2014-era BVLC files keep their layers in
the V1 `layers` field and their blob shapes in the 4-D num/channels/height/width
fields, and are read too. Blobs are matched to layers by name, as Caffe's
Net::CopyTrainedLayersFrom does; a layer of the net with no blobs in the file keeps its
initial values (as in Caffe), and a blob whose size differs is refused.

Caffe's blob layouts, per layer type:
  Convolution    weight (out, in/group, kh, kw), bias (out)     = torch and Gluon's
  Deconvolution  weight (in, out/group, kh, kw), bias (out)     = torch and Gluon's
  InnerProduct   weight (out, in) over the (C, H, W)-flattened input, bias (out)
  BatchNorm      mean * s, variance * s, s (the moving-average scale factor, 1 blob)
  Scale          gamma (C), beta (C) when bias_term
  PReLU          slopes (C), or a 0-axis blob (one value) when channel_shared
  Bias           bias (C) (the one-bottom form: a learned blob)
Keras keeps convolution kernels as (kh, kw, in, out), one Conv2D per group; a depthwise
convolution (one group per input channel) as DepthwiseConv2D's (kh, kw, C, out/C); and Dense
kernels as (in, out) (its flatten puts features in Caffe's (C, H, W) order first).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hpcdl.errors import HpcdlError

PARAM_TYPES = ("Convolution", "Deconvolution", "InnerProduct", "BatchNorm", "Scale", "PReLU", "Bias")


def caffe_shapes(layer) -> list[tuple[int, ...]]:
    """The shapes of a spec layer's Caffe blobs."""
    t, p, c = layer.type, layer.params, layer.in_channels
    k = p.get("kernel_size")
    kh, kw = ((k, k) if isinstance(k, int) else tuple(k)) if k is not None else (0, 0)
    g = p.get("group", 1)
    bias = p.get("bias_term", True)
    if t == "Convolution":
        return [(p["num_output"], c // g, kh, kw)] + ([(p["num_output"],)] if bias else [])
    if t == "Deconvolution":
        return [(c, p["num_output"] // g, kh, kw)] + ([(p["num_output"],)] if bias else [])
    if t == "InnerProduct":
        return [(p["num_output"], c)] + ([(p["num_output"],)] if bias else [])
    if t == "BatchNorm":
        return [(c,), (c,), (1,)]
    if t == "Scale":
        return [(c,)] + ([(c,)] if bias else [])
    if t == "PReLU":  # prelu_layer.cpp: channel_shared makes a blob of shape vector<int>(0)
        return [()] if p.get("channel_shared", False) else [(c,)]
    if t == "Bias":
        return [(c,)]
    return []


def _blob_array(blob) -> np.ndarray:
    data = np.asarray(blob.double_data if len(blob.double_data) else blob.data, dtype=np.float32)
    if blob.HasField("shape"):
        shape = tuple(int(d) for d in blob.shape.dim)
    else:  # legacy 4-D fields
        shape = tuple(int(d) for d in (blob.num, blob.channels, blob.height, blob.width))
    if int(np.prod(shape)) != data.size:
        raise HpcdlError(f"a blob holds {data.size} values but its shape is {shape}")
    return data.reshape(shape)


def read_caffemodel(path: str | Path) -> dict[str, list[np.ndarray]]:
    """Layer name -> its blobs, from a binary .caffemodel (new `layer` or V1 `layers`)."""
    from google.protobuf.message import DecodeError

    from hpcdl.caffe.proto import message

    path = Path(path)
    if not path.is_file():
        raise HpcdlError(f"{path}: no such file")
    net = message("NetParameter")
    try:
        net.ParseFromString(path.read_bytes())
    except DecodeError as exc:
        raise HpcdlError(f"{path}: not a binary Caffe NetParameter ({exc})") from None
    out: dict[str, list[np.ndarray]] = {}
    for layer in list(net.layer) + list(net.layers):
        if len(layer.blobs):
            try:
                out[layer.name] = [_blob_array(b) for b in layer.blobs]
            except HpcdlError as exc:
                raise HpcdlError(f"{path}: layer {layer.name!r}: {exc}") from None
    return out


def write_caffemodel(path: str | Path, name: str, layers: list[tuple[str, str, list[np.ndarray]]]) -> None:
    """Write (layer name, type, blobs) as a binary NetParameter, as Caffe's Net::ToProto does."""
    from hpcdl.caffe.proto import message
    from hpcdl.files import write_atomically

    net = message("NetParameter")
    net.name = name
    for lname, ltype, blobs in layers:
        layer = net.layer.add(name=lname, type=ltype)
        for arr in blobs:
            blob = layer.blobs.add()
            blob.shape.SetInParent()  # a 0-axis blob (a shared PReLU slope) has a shape with no dims
            blob.shape.dim.extend(int(d) for d in arr.shape)
            blob.data.extend(np.asarray(arr, dtype=np.float32).ravel().tolist())
    write_atomically(Path(path), net.SerializeToString())


def conform(spec, blobs: dict[str, list[np.ndarray]], where: str = "weights") -> dict[str, list[np.ndarray]]:
    """The file's blobs in the shapes the spec's layers need (legacy 4-D blobs reshaped)."""
    out = {}
    for layer in spec.layers:
        if layer.name not in blobs:
            continue
        want = caffe_shapes(layer)
        got = blobs[layer.name]
        if len(got) != len(want):
            raise HpcdlError(f"{where}: layer {layer.name!r} ({layer.type}) has {len(got)} blobs; the net needs {len(want)}")
        fixed = []
        for i, (arr, shape) in enumerate(zip(got, want)):
            if arr.size != int(np.prod(shape)):
                raise HpcdlError(f"{where}: layer {layer.name!r} blob {i} has shape {tuple(arr.shape)}; "
                                 f"the net needs {shape}")
            fixed.append(arr.reshape(shape).astype(np.float32))
        out[layer.name] = fixed
    return out


def _bn_stats(arrs):
    mean, var, s = arrs
    factor = 0.0 if float(s[0]) == 0 else 1.0 / float(s[0])  # Caffe: a zero factor means zero statistics
    return mean * factor, var * factor


# ---------------------------------------------------------------- PyTorch

def torch_modules(model, layer):
    from hpcdl.nets.torch_build import _key

    mod = model.layers[_key(layer.name)]
    return mod[1] if layer.type == "InnerProduct" else mod


def from_torch(model) -> list[tuple[str, str, list[np.ndarray]]]:
    out = []
    for layer in model.spec.layers:
        if layer.type not in PARAM_TYPES:
            continue
        mod = torch_modules(model, layer)
        if layer.type == "BatchNorm":
            if layer.p("affine"):
                raise HpcdlError(f"layer {layer.name}: BatchNorm with affine has no Caffe blob layout")
            blobs = [mod.running_mean, mod.running_var, np.ones(1, np.float32)]
        elif layer.type == "PReLU":
            blobs = [mod.weight.detach().cpu().numpy().reshape(caffe_shapes(layer)[0])]
        elif layer.type == "Bias":
            blobs = [mod.bias]
        else:
            blobs = [mod.weight] + ([mod.bias] if mod.bias is not None else [])
        out.append((layer.name, layer.type, [b if isinstance(b, np.ndarray) else b.detach().cpu().numpy() for b in blobs]))
    return out


def to_torch(model, blobs: dict[str, list[np.ndarray]]) -> list[str]:
    """Copy Caffe blobs into a PyTorch build; returns the layer names that were loaded."""
    import torch

    blobs = conform(model.spec, blobs)
    loaded = []
    with torch.no_grad():
        for layer in model.spec.layers:
            if layer.name not in blobs:
                continue
            mod = torch_modules(model, layer)
            arrs = blobs[layer.name]
            if layer.type == "BatchNorm":
                mean, var = _bn_stats(arrs)
                mod.running_mean.copy_(torch.from_numpy(mean))
                mod.running_var.copy_(torch.from_numpy(var))
            elif layer.type == "Bias":
                mod.bias.copy_(torch.from_numpy(arrs[0]))
            else:
                mod.weight.copy_(torch.from_numpy(arrs[0]).reshape(mod.weight.shape))
                if len(arrs) > 1:
                    mod.bias.copy_(torch.from_numpy(arrs[1]))
            loaded.append(layer.name)
    return loaded


# ---------------------------------------------------------------- Keras

def to_keras(model, spec, blobs: dict[str, list[np.ndarray]]) -> list[str]:
    from hpcdl.nets.keras_build import is_depthwise, keras_name

    blobs = conform(spec, blobs)
    loaded = []
    for layer in spec.layers:
        if layer.name not in blobs:
            continue
        arrs = blobs[layer.name]
        klayer = model.get_layer(keras_name(layer.name))
        t = layer.type
        if t == "Convolution":
            w = arrs[0]
            g = layer.p("group", 1)
            if is_depthwise(layer):
                # (C*k, 1, kh, kw), output c*k + m from input c -> DepthwiseConv2D's (kh, kw, C, k)
                kernel = w.reshape(g, w.shape[0] // g, *w.shape[2:]).transpose(2, 3, 0, 1)
                klayer.set_weights([kernel] + arrs[1:])
            elif g > 1:
                og = w.shape[0] // g
                for i, conv in enumerate(klayer.convs):
                    part = [w[i * og:(i + 1) * og].transpose(2, 3, 1, 0)]
                    if len(arrs) > 1:
                        part.append(arrs[1][i * og:(i + 1) * og])
                    conv.set_weights(part)
            else:
                klayer.set_weights([w.transpose(2, 3, 1, 0)] + arrs[1:])
        elif t == "InnerProduct":
            klayer.set_weights([arrs[0].T] + arrs[1:])
        elif t == "Deconvolution":
            # Caffe (in, out, kh, kw) -> Conv2DTranspose (kh, kw, out, in)
            klayer.deconv.set_weights([arrs[0].transpose(2, 3, 1, 0)] + arrs[1:])
        elif t == "BatchNorm":
            mean, var = _bn_stats(arrs)
            klayer.set_weights([mean, var])
        elif t in ("Scale", "Bias"):
            klayer.set_weights(arrs)
        elif t == "PReLU":
            klayer.set_weights([arrs[0].reshape(-1)])
        else:
            raise HpcdlError(f"layer {layer.name}: {t} weights have no Keras loader")
        loaded.append(layer.name)
    return loaded


# ---------------------------------------------------------------- Gluon

def to_gluon(net, spec, blobs: dict[str, list[np.ndarray]]) -> list[str]:
    """Copy blobs into an initialised Gluon build (MXNet's venv needs only numpy for this)."""
    import mxnet as mx

    blobs = conform(spec, blobs)
    loaded = []
    for layer in spec.layers:
        if layer.name not in blobs:
            continue
        block = net.blocks[layer.name]
        arrs = blobs[layer.name]
        if layer.type == "BatchNorm":
            mean, var = _bn_stats(arrs)
            block.running_mean.set_data(mx.nd.array(mean))
            block.running_var.set_data(mx.nd.array(var))
        elif layer.type == "Scale":
            block.gamma.set_data(mx.nd.array(arrs[0].reshape(block.gamma.shape)))
            if len(arrs) > 1:
                block.beta.set_data(mx.nd.array(arrs[1].reshape(block.beta.shape)))
        elif layer.type == "PReLU":
            block.alpha.set_data(mx.nd.array(arrs[0].reshape(block.alpha.shape)))
        elif layer.type == "Bias":
            block.offset.set_data(mx.nd.array(arrs[0]))
        else:
            block.weight.set_data(mx.nd.array(arrs[0].reshape(block.weight.shape)))
            if len(arrs) > 1:
                block.bias.set_data(mx.nd.array(arrs[1]))
        loaded.append(layer.name)
    return loaded

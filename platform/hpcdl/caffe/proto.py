"""The Caffe messages hpcdl reads and writes, built with protobuf's descriptor_pb2.

Field names, numbers, types and defaults are those of BVLC Caffe's published
`src/caffe/proto/caffe.proto` (proto2, package `caffe`). Only the messages an importer
needs are declared: the net and its layers (LayerParameter with the parameter messages
of the layer types hpcdl maps, plus the data layers), blobs for `.caffemodel` weights,
and SolverParameter. Text files are parsed by protobuf's own `text_format`, binary
`.caffemodel` files by the protobuf runtime; nothing here parses either by hand.

The V1 `layers` field (V1LayerParameter, with its LayerType enum and the parameter
messages only V1 layer types use) is declared in full: 2014-era BVLC `.caffemodel` and
prototxt files store their layers that way, and hpcdl upgrades them in memory as Caffe
does. V0LayerParameter (`layers { layer { ... } }`) is declared so such a file parses and
is refused by name.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

F = descriptor_pb2.FieldDescriptorProto
_TYPES = {
    "string": F.TYPE_STRING, "bool": F.TYPE_BOOL, "float": F.TYPE_FLOAT, "double": F.TYPE_DOUBLE,
    "int32": F.TYPE_INT32, "int64": F.TYPE_INT64, "uint32": F.TYPE_UINT32, "bytes": F.TYPE_BYTES,
}

# message -> [(label, type, name, number, default or None, packed)]; a type that is not a
# scalar names a message, or an enum as "enum:Name" (declared in ENUMS).
_O, _R = "optional", "repeated"
MESSAGES: dict[str, list[tuple]] = {
    "BlobShape": [(_R, "int64", "dim", 1, None, True)],
    "BlobProto": [
        (_O, "BlobShape", "shape", 7, None), (_R, "float", "data", 5, None, True), (_R, "float", "diff", 6, None, True),
        (_R, "double", "double_data", 8, None, True), (_R, "double", "double_diff", 9, None, True),
        (_O, "int32", "num", 1, "0"), (_O, "int32", "channels", 2, "0"), (_O, "int32", "height", 3, "0"),
        (_O, "int32", "width", 4, "0"),
    ],
    "FillerParameter": [
        (_O, "string", "type", 1, "constant"), (_O, "float", "value", 2, "0"), (_O, "float", "min", 3, "0"),
        (_O, "float", "max", 4, "1"), (_O, "float", "mean", 5, "0"), (_O, "float", "std", 6, "1"),
        (_O, "int32", "sparse", 7, "-1"), (_O, "enum:VarianceNorm", "variance_norm", 8, "FAN_IN"),
    ],
    "NetParameter": [
        (_O, "string", "name", 1, None), (_R, "string", "input", 3, None), (_R, "BlobShape", "input_shape", 8, None),
        (_R, "int32", "input_dim", 4, None), (_O, "bool", "force_backward", 5, "false"),
        (_O, "NetState", "state", 6, None), (_O, "bool", "debug_info", 7, "false"),
        (_R, "LayerParameter", "layer", 100, None), (_R, "V1LayerParameter", "layers", 2, None),
    ],
    # the V1 format (`layers { type: CONVOLUTION }`, Caffe before 2015), in full: hpcdl
    # upgrades it to LayerParameter as Caffe's upgrade_proto.cpp does (hpcdl.caffe.nets)
    "V1LayerParameter": [
        (_R, "string", "bottom", 2, None), (_R, "string", "top", 3, None), (_O, "string", "name", 4, None),
        (_R, "NetStateRule", "include", 32, None), (_R, "NetStateRule", "exclude", 33, None),
        (_O, "enum:LayerType", "type", 5, None), (_R, "BlobProto", "blobs", 6, None),
        (_R, "string", "param", 1001, None), (_R, "enum:DimCheckMode", "blob_share_mode", 1002, None),
        (_R, "float", "blobs_lr", 7, None), (_R, "float", "weight_decay", 8, None),
        (_R, "float", "loss_weight", 35, None), (_O, "AccuracyParameter", "accuracy_param", 27, None),
        (_O, "ArgMaxParameter", "argmax_param", 23, None), (_O, "ConcatParameter", "concat_param", 9, None),
        (_O, "ContrastiveLossParameter", "contrastive_loss_param", 40, None),
        (_O, "ConvolutionParameter", "convolution_param", 10, None), (_O, "DataParameter", "data_param", 11, None),
        (_O, "DropoutParameter", "dropout_param", 12, None), (_O, "DummyDataParameter", "dummy_data_param", 26, None),
        (_O, "EltwiseParameter", "eltwise_param", 24, None), (_O, "ExpParameter", "exp_param", 41, None),
        (_O, "HDF5DataParameter", "hdf5_data_param", 13, None),
        (_O, "HDF5OutputParameter", "hdf5_output_param", 14, None),
        (_O, "HingeLossParameter", "hinge_loss_param", 29, None),
        (_O, "ImageDataParameter", "image_data_param", 15, None),
        (_O, "InfogainLossParameter", "infogain_loss_param", 16, None),
        (_O, "InnerProductParameter", "inner_product_param", 17, None), (_O, "LRNParameter", "lrn_param", 18, None),
        (_O, "MemoryDataParameter", "memory_data_param", 22, None), (_O, "MVNParameter", "mvn_param", 34, None),
        (_O, "PoolingParameter", "pooling_param", 19, None), (_O, "PowerParameter", "power_param", 21, None),
        (_O, "ReLUParameter", "relu_param", 30, None), (_O, "SigmoidParameter", "sigmoid_param", 38, None),
        (_O, "SoftmaxParameter", "softmax_param", 39, None), (_O, "SliceParameter", "slice_param", 31, None),
        (_O, "TanHParameter", "tanh_param", 37, None), (_O, "ThresholdParameter", "threshold_param", 25, None),
        (_O, "WindowDataParameter", "window_data_param", 20, None),
        (_O, "TransformationParameter", "transform_param", 36, None), (_O, "LossParameter", "loss_param", 42, None),
        (_O, "V0LayerParameter", "layer", 1, None),
    ],
    # the V0 format (`layers { layer { type: "conv" } }`), declared so such a file parses and
    # is refused by name; hpcdl does not upgrade it
    "V0LayerParameter": [
        (_O, "string", "name", 1, None), (_O, "string", "type", 2, None), (_O, "uint32", "num_output", 3, None),
        (_O, "bool", "biasterm", 4, "true"), (_O, "FillerParameter", "weight_filler", 5, None),
        (_O, "FillerParameter", "bias_filler", 6, None), (_O, "uint32", "pad", 7, "0"),
        (_O, "uint32", "kernelsize", 8, None), (_O, "uint32", "group", 9, "1"), (_O, "uint32", "stride", 10, "1"),
        (_O, "enum:PoolMethod", "pool", 11, "MAX"), (_O, "float", "dropout_ratio", 12, "0.5"),
        (_O, "uint32", "local_size", 13, "5"), (_O, "float", "alpha", 14, "1"), (_O, "float", "beta", 15, "0.75"),
        (_O, "float", "k", 22, "1"), (_O, "string", "source", 16, None), (_O, "float", "scale", 17, "1"),
        (_O, "string", "meanfile", 18, None), (_O, "uint32", "batchsize", 19, None),
        (_O, "uint32", "cropsize", 20, "0"), (_O, "bool", "mirror", 21, "false"),
        (_R, "BlobProto", "blobs", 50, None), (_R, "float", "blobs_lr", 51, None),
        (_R, "float", "weight_decay", 52, None), (_O, "uint32", "rand_skip", 53, "0"),
        (_O, "float", "det_fg_threshold", 54, "0.5"), (_O, "float", "det_bg_threshold", 55, "0.5"),
        (_O, "float", "det_fg_fraction", 56, "0.25"), (_O, "uint32", "det_context_pad", 58, "0"),
        (_O, "string", "det_crop_mode", 59, "warp"), (_O, "int32", "new_num", 60, "0"),
        (_O, "int32", "new_channels", 61, "0"), (_O, "int32", "new_height", 62, "0"),
        (_O, "int32", "new_width", 63, "0"), (_O, "bool", "shuffle_images", 64, "false"),
        (_O, "uint32", "concat_dim", 65, "1"), (_O, "HDF5OutputParameter", "hdf5_output_param", 1001, None),
    ],
    # parameter messages V1 layer types use (Exp, Power, Slice and Threshold are built too;
    # the others are declared so a V1 file that has them parses, and the layer is refused by
    # its type and line)
    "ArgMaxParameter": [(_O, "bool", "out_max_val", 1, "false"), (_O, "uint32", "top_k", 2, "1"), (_O, "int32", "axis", 3, None)],
    "ContrastiveLossParameter": [(_O, "float", "margin", 1, "1"), (_O, "bool", "legacy_version", 2, "false")],
    "ExpParameter": [(_O, "float", "base", 1, "-1"), (_O, "float", "scale", 2, "1"), (_O, "float", "shift", 3, "0")],
    "HDF5OutputParameter": [(_O, "string", "file_name", 1, None)],
    "HingeLossParameter": [(_O, "enum:Norm", "norm", 1, "L1")],
    "InfogainLossParameter": [(_O, "string", "source", 1, None)],
    "MVNParameter": [
        (_O, "bool", "normalize_variance", 1, "true"), (_O, "bool", "across_channels", 2, "false"),
        (_O, "float", "eps", 3, "1e-09"),
    ],
    "PowerParameter": [(_O, "float", "power", 1, "1"), (_O, "float", "scale", 2, "1"), (_O, "float", "shift", 3, "0")],
    "SliceParameter": [(_O, "int32", "axis", 3, "1"), (_R, "uint32", "slice_point", 2, None), (_O, "uint32", "slice_dim", 1, "1")],
    "ThresholdParameter": [(_O, "float", "threshold", 1, "0")],
    "NetState": [(_O, "enum:Phase", "phase", 1, "TEST"), (_O, "int32", "level", 2, "0"), (_R, "string", "stage", 3, None)],
    "NetStateRule": [
        (_O, "enum:Phase", "phase", 1, None), (_O, "int32", "min_level", 2, None), (_O, "int32", "max_level", 3, None),
        (_R, "string", "stage", 4, None), (_R, "string", "not_stage", 5, None),
    ],
    "ParamSpec": [
        (_O, "string", "name", 1, None), (_O, "enum:DimCheckMode", "share_mode", 2, None),
        (_O, "float", "lr_mult", 3, "1"), (_O, "float", "decay_mult", 4, "1"),
    ],
    "LayerParameter": [
        (_O, "string", "name", 1, None), (_O, "string", "type", 2, None), (_R, "string", "bottom", 3, None),
        (_R, "string", "top", 4, None), (_O, "enum:Phase", "phase", 10, None), (_R, "float", "loss_weight", 5, None),
        (_R, "ParamSpec", "param", 6, None), (_R, "BlobProto", "blobs", 7, None), (_R, "bool", "propagate_down", 11, None),
        (_R, "NetStateRule", "include", 8, None), (_R, "NetStateRule", "exclude", 9, None),
        (_O, "TransformationParameter", "transform_param", 100, None), (_O, "LossParameter", "loss_param", 101, None),
        (_O, "AccuracyParameter", "accuracy_param", 102, None), (_O, "BatchNormParameter", "batch_norm_param", 139, None),
        (_O, "ConcatParameter", "concat_param", 104, None), (_O, "ConvolutionParameter", "convolution_param", 106, None),
        (_O, "DataParameter", "data_param", 107, None), (_O, "DropoutParameter", "dropout_param", 108, None),
        (_O, "DummyDataParameter", "dummy_data_param", 109, None), (_O, "EltwiseParameter", "eltwise_param", 110, None),
        (_O, "FlattenParameter", "flatten_param", 135, None), (_O, "HDF5DataParameter", "hdf5_data_param", 112, None),
        (_O, "ImageDataParameter", "image_data_param", 115, None),
        (_O, "InnerProductParameter", "inner_product_param", 117, None), (_O, "InputParameter", "input_param", 143, None),
        (_O, "LRNParameter", "lrn_param", 118, None), (_O, "MemoryDataParameter", "memory_data_param", 119, None),
        (_O, "PoolingParameter", "pooling_param", 121, None), (_O, "ReLUParameter", "relu_param", 123, None),
        (_O, "ScaleParameter", "scale_param", 142, None), (_O, "SigmoidParameter", "sigmoid_param", 124, None),
        (_O, "SoftmaxParameter", "softmax_param", 125, None), (_O, "TanHParameter", "tanh_param", 127, None),
        (_O, "WindowDataParameter", "window_data_param", 129, None),
        (_O, "BiasParameter", "bias_param", 141, None), (_O, "CropParameter", "crop_param", 144, None),
        (_O, "ELUParameter", "elu_param", 140, None), (_O, "ExpParameter", "exp_param", 111, None),
        (_O, "LogParameter", "log_param", 134, None), (_O, "PowerParameter", "power_param", 122, None),
        (_O, "PReLUParameter", "prelu_param", 131, None), (_O, "ReshapeParameter", "reshape_param", 133, None),
        (_O, "SliceParameter", "slice_param", 126, None), (_O, "ThresholdParameter", "threshold_param", 128, None),
    ],
    "BiasParameter": [
        (_O, "int32", "axis", 1, "1"), (_O, "int32", "num_axes", 2, "1"), (_O, "FillerParameter", "filler", 3, None),
    ],
    "CropParameter": [(_O, "int32", "axis", 1, "2"), (_R, "uint32", "offset", 2, None)],
    "ELUParameter": [(_O, "float", "alpha", 1, "1")],
    "LogParameter": [(_O, "float", "base", 1, "-1"), (_O, "float", "scale", 2, "1"), (_O, "float", "shift", 3, "0")],
    "PReLUParameter": [(_O, "FillerParameter", "filler", 1, None), (_O, "bool", "channel_shared", 2, "false")],
    "ReshapeParameter": [
        (_O, "BlobShape", "shape", 1, None), (_O, "int32", "axis", 2, "0"), (_O, "int32", "num_axes", 3, "-1"),
    ],
    "TransformationParameter": [
        (_O, "float", "scale", 1, "1"), (_O, "bool", "mirror", 2, "false"), (_O, "uint32", "crop_size", 3, "0"),
        (_O, "string", "mean_file", 4, None), (_R, "float", "mean_value", 5, None),
        (_O, "bool", "force_color", 6, "false"), (_O, "bool", "force_gray", 7, "false"),
    ],
    "LossParameter": [
        (_O, "int32", "ignore_label", 1, None), (_O, "enum:NormalizationMode", "normalization", 3, "VALID"),
        (_O, "bool", "normalize", 2, None),
    ],
    "AccuracyParameter": [(_O, "uint32", "top_k", 1, "1"), (_O, "int32", "axis", 2, "1"), (_O, "int32", "ignore_label", 3, None)],
    "BatchNormParameter": [
        (_O, "bool", "use_global_stats", 1, None), (_O, "float", "moving_average_fraction", 2, "0.999"),
        (_O, "float", "eps", 3, "1e-05"),
    ],
    "ConcatParameter": [(_O, "int32", "axis", 2, "1"), (_O, "uint32", "concat_dim", 1, "1")],
    "ConvolutionParameter": [
        (_O, "uint32", "num_output", 1, None), (_O, "bool", "bias_term", 2, "true"), (_R, "uint32", "pad", 3, None),
        (_R, "uint32", "kernel_size", 4, None), (_R, "uint32", "stride", 6, None), (_R, "uint32", "dilation", 18, None),
        (_O, "uint32", "pad_h", 9, "0"), (_O, "uint32", "pad_w", 10, "0"), (_O, "uint32", "kernel_h", 11, None),
        (_O, "uint32", "kernel_w", 12, None), (_O, "uint32", "stride_h", 13, None), (_O, "uint32", "stride_w", 14, None),
        (_O, "uint32", "group", 5, "1"), (_O, "FillerParameter", "weight_filler", 7, None),
        (_O, "FillerParameter", "bias_filler", 8, None), (_O, "enum:Engine", "engine", 15, "DEFAULT"),
        (_O, "int32", "axis", 16, "1"), (_O, "bool", "force_nd_im2col", 17, "false"),
    ],
    "DataParameter": [
        (_O, "string", "source", 1, None), (_O, "uint32", "batch_size", 4, None), (_O, "uint32", "rand_skip", 7, "0"),
        (_O, "enum:DB", "backend", 8, "LEVELDB"), (_O, "float", "scale", 2, "1"), (_O, "string", "mean_file", 3, None),
        (_O, "uint32", "crop_size", 5, "0"), (_O, "bool", "mirror", 6, "false"),
        (_O, "bool", "force_encoded_color", 9, "false"), (_O, "uint32", "prefetch", 10, "4"),
    ],
    "DropoutParameter": [(_O, "float", "dropout_ratio", 1, "0.5")],
    "DummyDataParameter": [
        (_R, "FillerParameter", "data_filler", 1, None), (_R, "BlobShape", "shape", 6, None),
        (_R, "uint32", "num", 2, None), (_R, "uint32", "channels", 3, None), (_R, "uint32", "height", 4, None),
        (_R, "uint32", "width", 5, None),
    ],
    "EltwiseParameter": [
        (_O, "enum:EltwiseOp", "operation", 1, "SUM"), (_R, "float", "coeff", 2, None),
        (_O, "bool", "stable_prod_grad", 3, "true"),
    ],
    "FlattenParameter": [(_O, "int32", "axis", 1, "1"), (_O, "int32", "end_axis", 2, "-1")],
    "HDF5DataParameter": [(_O, "string", "source", 1, None), (_O, "uint32", "batch_size", 2, None), (_O, "bool", "shuffle", 3, "false")],
    "ImageDataParameter": [
        (_O, "string", "source", 1, None), (_O, "uint32", "batch_size", 4, "1"), (_O, "uint32", "rand_skip", 7, "0"),
        (_O, "bool", "shuffle", 8, "false"), (_O, "uint32", "new_height", 9, "0"), (_O, "uint32", "new_width", 10, "0"),
        (_O, "bool", "is_color", 11, "true"), (_O, "float", "scale", 2, "1"), (_O, "string", "mean_file", 3, None),
        (_O, "uint32", "crop_size", 5, "0"), (_O, "bool", "mirror", 6, "false"), (_O, "string", "root_folder", 12, ""),
    ],
    "InnerProductParameter": [
        (_O, "uint32", "num_output", 1, None), (_O, "bool", "bias_term", 2, "true"),
        (_O, "FillerParameter", "weight_filler", 3, None), (_O, "FillerParameter", "bias_filler", 4, None),
        (_O, "int32", "axis", 5, "1"), (_O, "bool", "transpose", 6, "false"),
    ],
    "InputParameter": [(_R, "BlobShape", "shape", 1, None)],
    "LRNParameter": [
        (_O, "uint32", "local_size", 1, "5"), (_O, "float", "alpha", 2, "1"), (_O, "float", "beta", 3, "0.75"),
        (_O, "enum:NormRegion", "norm_region", 4, "ACROSS_CHANNELS"), (_O, "float", "k", 5, "1"),
        (_O, "enum:Engine", "engine", 6, "DEFAULT"),
    ],
    "MemoryDataParameter": [
        (_O, "uint32", "batch_size", 1, None), (_O, "uint32", "channels", 2, None), (_O, "uint32", "height", 3, None),
        (_O, "uint32", "width", 4, None),
    ],
    "PoolingParameter": [
        (_O, "enum:PoolMethod", "pool", 1, "MAX"), (_O, "uint32", "pad", 4, "0"), (_O, "uint32", "pad_h", 9, "0"),
        (_O, "uint32", "pad_w", 10, "0"), (_O, "uint32", "kernel_size", 2, None), (_O, "uint32", "kernel_h", 5, None),
        (_O, "uint32", "kernel_w", 6, None), (_O, "uint32", "stride", 3, "1"), (_O, "uint32", "stride_h", 7, None),
        (_O, "uint32", "stride_w", 8, None), (_O, "enum:Engine", "engine", 11, "DEFAULT"),
        (_O, "bool", "global_pooling", 12, "false"), (_O, "enum:RoundMode", "round_mode", 13, "CEIL"),
    ],
    "ReLUParameter": [(_O, "float", "negative_slope", 1, "0"), (_O, "enum:Engine", "engine", 2, "DEFAULT")],
    "ScaleParameter": [
        (_O, "int32", "axis", 1, "1"), (_O, "int32", "num_axes", 2, "1"), (_O, "FillerParameter", "filler", 3, None),
        (_O, "bool", "bias_term", 4, "false"), (_O, "FillerParameter", "bias_filler", 5, None),
    ],
    "SigmoidParameter": [(_O, "enum:Engine", "engine", 1, "DEFAULT")],
    "SoftmaxParameter": [(_O, "enum:Engine", "engine", 1, "DEFAULT"), (_O, "int32", "axis", 2, "1")],
    "TanHParameter": [(_O, "enum:Engine", "engine", 1, "DEFAULT")],
    "WindowDataParameter": [
        (_O, "string", "source", 1, None), (_O, "float", "scale", 2, "1"), (_O, "string", "mean_file", 3, None),
        (_O, "uint32", "batch_size", 4, None), (_O, "uint32", "crop_size", 5, "0"), (_O, "bool", "mirror", 6, "false"),
        (_O, "float", "fg_threshold", 7, "0.5"), (_O, "float", "bg_threshold", 8, "0.5"),
        (_O, "float", "fg_fraction", 9, "0.25"), (_O, "uint32", "context_pad", 10, "0"),
        (_O, "string", "crop_mode", 11, "warp"), (_O, "bool", "cache_images", 12, "false"),
        (_O, "string", "root_folder", 13, ""),
    ],
    "SolverParameter": [
        (_O, "string", "net", 24, None), (_O, "NetParameter", "net_param", 25, None),
        (_O, "string", "train_net", 1, None), (_R, "string", "test_net", 2, None),
        (_O, "NetParameter", "train_net_param", 21, None), (_R, "NetParameter", "test_net_param", 22, None),
        (_O, "NetState", "train_state", 26, None), (_R, "NetState", "test_state", 27, None),
        (_R, "int32", "test_iter", 3, None), (_O, "int32", "test_interval", 4, "0"),
        (_O, "bool", "test_compute_loss", 19, "false"), (_O, "bool", "test_initialization", 32, "true"),
        (_O, "float", "base_lr", 5, None), (_O, "int32", "display", 6, None), (_O, "int32", "average_loss", 33, "1"),
        (_O, "int32", "max_iter", 7, None), (_O, "int32", "iter_size", 36, "1"), (_O, "string", "lr_policy", 8, None),
        (_O, "float", "gamma", 9, None), (_O, "float", "power", 10, None), (_O, "float", "momentum", 11, None),
        (_O, "float", "weight_decay", 12, None), (_O, "string", "regularization_type", 29, "L2"),
        (_O, "int32", "stepsize", 13, None), (_R, "int32", "stepvalue", 34, None),
        (_O, "float", "clip_gradients", 35, "-1"), (_O, "int32", "snapshot", 14, "0"),
        (_O, "string", "snapshot_prefix", 15, None), (_O, "bool", "snapshot_diff", 16, "false"),
        (_O, "enum:SnapshotFormat", "snapshot_format", 37, "BINARYPROTO"),
        (_O, "enum:SolverMode", "solver_mode", 17, "GPU"), (_O, "int32", "device_id", 18, "0"),
        (_O, "int64", "random_seed", 20, "-1"), (_O, "string", "type", 40, "SGD"), (_O, "float", "delta", 31, "1e-08"),
        (_O, "float", "momentum2", 39, "0.999"), (_O, "float", "rms_decay", 38, "0.99"),
        (_O, "bool", "debug_info", 23, "false"), (_O, "bool", "snapshot_after_train", 28, "true"),
        (_O, "enum:SolverType", "solver_type", 30, "SGD"), (_O, "bool", "layer_wise_reduce", 41, "true"),
        (_R, "string", "weights", 42, None),
    ],
}

# enums: name -> values; an enum is declared inside the first message that uses it
# (caffe.proto declares most of them there too) or at file level (Phase).
ENUMS: dict[str, list[tuple[str, int]]] = {
    "Phase": [("TRAIN", 0), ("TEST", 1)],
    "VarianceNorm": [("FAN_IN", 0), ("FAN_OUT", 1), ("AVERAGE", 2)],
    "DimCheckMode": [("STRICT", 0), ("PERMISSIVE", 1)],
    "NormalizationMode": [("FULL", 0), ("VALID", 1), ("BATCH_SIZE", 2), ("NONE", 3)],
    "Engine": [("DEFAULT", 0), ("CAFFE", 1), ("CUDNN", 2)],
    "DB": [("LEVELDB", 0), ("LMDB", 1)],
    "EltwiseOp": [("PROD", 0), ("SUM", 1), ("MAX", 2)],
    "NormRegion": [("ACROSS_CHANNELS", 0), ("WITHIN_CHANNEL", 1)],
    "PoolMethod": [("MAX", 0), ("AVE", 1), ("STOCHASTIC", 2)],
    "RoundMode": [("CEIL", 0), ("FLOOR", 1)],
    "SnapshotFormat": [("HDF5", 0), ("BINARYPROTO", 1)],
    "SolverMode": [("CPU", 0), ("GPU", 1)],
    "SolverType": [("SGD", 0), ("NESTEROV", 1), ("ADAGRAD", 2), ("RMSPROP", 3), ("ADADELTA", 4), ("ADAM", 5)],
    "Norm": [("L1", 1), ("L2", 2)],
    "LayerType": [
        ("NONE", 0), ("ABSVAL", 35), ("ACCURACY", 1), ("ARGMAX", 30), ("BNLL", 2), ("CONCAT", 3),
        ("CONTRASTIVE_LOSS", 37), ("CONVOLUTION", 4), ("DATA", 5), ("DECONVOLUTION", 39), ("DROPOUT", 6),
        ("DUMMY_DATA", 32), ("EUCLIDEAN_LOSS", 7), ("ELTWISE", 25), ("EXP", 38), ("FLATTEN", 8), ("HDF5_DATA", 9),
        ("HDF5_OUTPUT", 10), ("HINGE_LOSS", 28), ("IM2COL", 11), ("IMAGE_DATA", 12), ("INFOGAIN_LOSS", 13),
        ("INNER_PRODUCT", 14), ("LRN", 15), ("MEMORY_DATA", 29), ("MULTINOMIAL_LOGISTIC_LOSS", 16), ("MVN", 34),
        ("POOLING", 17), ("POWER", 26), ("RELU", 18), ("SIGMOID", 19), ("SIGMOID_CROSS_ENTROPY_LOSS", 27),
        ("SILENCE", 36), ("SOFTMAX", 20), ("SOFTMAX_LOSS", 21), ("SPLIT", 22), ("SLICE", 33), ("TANH", 23),
        ("WINDOW_DATA", 24), ("THRESHOLD", 31),
    ],
}
_FILE_ENUMS = {"Phase"}


def _file() -> descriptor_pb2.FileDescriptorProto:
    fdp = descriptor_pb2.FileDescriptorProto(name="hpcdl_caffe.proto", package="caffe", syntax="proto2")
    for name in sorted(_FILE_ENUMS):
        enum = fdp.enum_type.add(name=name)
        for vname, number in ENUMS[name]:
            enum.value.add(name=vname, number=number)
    for mname, fields in MESSAGES.items():
        msg = fdp.message_type.add(name=mname)
        declared: set[str] = set()
        for spec in fields:
            label, ftype, fname, number, default = spec[:5]
            packed = len(spec) > 5 and spec[5]
            field = msg.field.add(name=fname, number=number,
                                  label=F.LABEL_REPEATED if label == _R else F.LABEL_OPTIONAL)
            if ftype in _TYPES:
                field.type = _TYPES[ftype]
            elif ftype.startswith("enum:"):
                ename = ftype[5:]
                field.type = F.TYPE_ENUM
                if ename in _FILE_ENUMS:
                    field.type_name = f".caffe.{ename}"
                else:
                    if ename not in declared:
                        enum = msg.enum_type.add(name=ename)
                        for vname, vnum in ENUMS[ename]:
                            enum.value.add(name=vname, number=vnum)
                        declared.add(ename)
                    field.type_name = f".caffe.{mname}.{ename}"
            else:
                field.type = F.TYPE_MESSAGE
                field.type_name = f".caffe.{ftype}"
            if default is not None:
                field.default_value = default
            if packed:
                field.options.packed = True
    return fdp


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file())


def message(name: str):
    """A new, empty caffe.<name> message (NetParameter, SolverParameter, BlobProto, ...)."""
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"caffe.{name}"))()


def message_class(name: str):
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"caffe.{name}"))

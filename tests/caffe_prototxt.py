"""Prototxt texts in the shapes of Caffe's model zoo, written here for the tests.

CIFAR10_QUICK and its two solvers are BVLC/caffe's examples/cifar10 files, byte for byte
(caffe_bvlc.py); EVERY_LAYER uses every layer type and option the importer maps.
"""

from caffe_bvlc import CIFAR10_QUICK_SOLVER, CIFAR10_QUICK_SOLVER_LR1  # noqa: F401
from caffe_bvlc import CIFAR10_QUICK_TRAIN_TEST as CIFAR10_QUICK  # noqa: F401

EVERY_LAYER = '''name: "EveryLayer"
layer {
  name: "data"
  type: "Data"
  top: "data"
  top: "label"
  include { phase: TRAIN }
  transform_param {
    crop_size: 32
    mirror: true
    mean_value: 104
    mean_value: 117
    mean_value: 123
    scale: 0.0078125
  }
  data_param { source: "train_lmdb" batch_size: 8 backend: LMDB }
}
layer {
  name: "data"
  type: "Data"
  top: "data"
  top: "label"
  include { phase: TEST }
  transform_param { crop_size: 32 mean_value: 104 mean_value: 117 mean_value: 123 scale: 0.0078125 }
  data_param { source: "val_lmdb" batch_size: 4 backend: LMDB }
}
layer {
  name: "conv1"
  type: "Convolution"
  bottom: "data"
  top: "conv1"
  param { lr_mult: 1 decay_mult: 1 }
  param { lr_mult: 2 decay_mult: 0 }
  convolution_param {
    num_output: 16
    kernel_h: 3
    kernel_w: 5
    pad_h: 1
    pad_w: 2
    weight_filler { type: "xavier" }
    bias_filler { type: "constant" value: 0.2 }
  }
}
layer { name: "bn1" type: "BatchNorm" bottom: "conv1" top: "conv1" }
layer { name: "scale1" type: "Scale" bottom: "conv1" top: "conv1" scale_param { bias_term: true } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" relu_param { negative_slope: 0.1 } }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1" pooling_param { pool: MAX kernel_size: 3 stride: 2 } }
layer { name: "norm1" type: "LRN" bottom: "pool1" top: "norm1" lrn_param { local_size: 5 alpha: 0.0001 beta: 0.75 } }
layer { name: "split1" type: "Split" bottom: "norm1" top: "a" top: "b" }
layer {
  name: "conv2a"
  type: "Convolution"
  bottom: "a"
  top: "conv2a"
  convolution_param { num_output: 16 kernel_size: 1 group: 2 weight_filler { type: "msra" variance_norm: FAN_OUT } }
}
layer { name: "sig" type: "Sigmoid" bottom: "conv2a" top: "sig" }
layer {
  name: "conv2b"
  type: "Convolution"
  bottom: "b"
  top: "conv2b"
  convolution_param { num_output: 16 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" std: 0.01 } }
}
layer { name: "tanh" type: "TanH" bottom: "conv2b" top: "conv2b" }
layer { name: "cat" type: "Concat" bottom: "sig" bottom: "conv2b" top: "cat" }
layer { name: "sum" type: "Eltwise" bottom: "sig" bottom: "conv2b" top: "sum" eltwise_param { operation: SUM coeff: 0.5 coeff: 2 } }
layer { name: "prod" type: "Eltwise" bottom: "sig" bottom: "conv2b" top: "prod" eltwise_param { operation: PROD } }
layer { name: "max" type: "Eltwise" bottom: "sum" bottom: "prod" top: "max" eltwise_param { operation: MAX } }
layer { name: "cat2" type: "Concat" bottom: "cat" bottom: "max" top: "cat2" concat_param { axis: 1 } }
layer { name: "norm2" type: "LRN" bottom: "cat2" top: "norm2" lrn_param { local_size: 3 alpha: 0.5 beta: 0.75 norm_region: WITHIN_CHANNEL } }
layer {
  name: "deconv"
  type: "Deconvolution"
  bottom: "norm2"
  top: "deconv"
  convolution_param {
    num_output: 8
    kernel_size: 4
    stride: 2
    pad: 1
    weight_filler { type: "uniform" min: -0.1 max: 0.1 }
    bias_filler { type: "constant" value: 0.1 }
  }
}
layer { name: "pool2" type: "Pooling" bottom: "deconv" top: "pool2" pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 round_mode: FLOOR } }
layer { name: "pool3" type: "Pooling" bottom: "pool2" top: "pool3" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "drop" type: "Dropout" bottom: "pool3" top: "pool3" dropout_param { dropout_ratio: 0.3 } }
layer { name: "flat" type: "Flatten" bottom: "pool3" top: "flat" }
layer {
  name: "ip1"
  type: "InnerProduct"
  bottom: "flat"
  top: "ip1"
  inner_product_param { num_output: 32 weight_filler { type: "gaussian" std: 0.01 } bias_filler { type: "constant" value: 0.1 } }
}
layer { name: "relu2" type: "ReLU" bottom: "ip1" top: "ip1" }
layer {
  name: "ip2"
  type: "InnerProduct"
  bottom: "ip1"
  top: "ip2"
  inner_product_param { num_output: 10 weight_filler { type: "gaussian" std: 0.01 } }
}
layer { name: "pool_aux" type: "Pooling" bottom: "cat2" top: "pool_aux" pooling_param { pool: AVE global_pooling: true } }
layer {
  name: "ip_aux"
  type: "InnerProduct"
  bottom: "pool_aux"
  top: "ip_aux"
  inner_product_param { num_output: 10 weight_filler { type: "xavier" } }
}
layer { name: "loss_aux" type: "SoftmaxWithLoss" bottom: "ip_aux" bottom: "label" top: "loss_aux" loss_weight: 0.3 }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" include { phase: TRAIN } }
layer { name: "accuracy" type: "Accuracy" bottom: "ip2" bottom: "label" top: "accuracy" include { phase: TEST } }
layer {
  name: "accuracy_top5"
  type: "Accuracy"
  bottom: "ip2"
  bottom: "label"
  top: "accuracy_top5"
  include { phase: TEST }
  accuracy_param { top_k: 5 }
}
'''

# parameters: conv1 16*3*15+16, scale1 2*16, conv2a 16*8+16, conv2b 16*16*9+16, deconv 48*8*16+8,
# ip1 512*32+32, ip2 32*10+10; aux head ip_aux 48*10+10
EVERY_LAYER_MAIN = 736 + 32 + 144 + 2320 + 6152 + 16416 + 330
EVERY_LAYER_AUX = 490

DEPLOY = '''name: "SmallDeploy"
input: "data"
input_shape { dim: 1 dim: 3 dim: 24 dim: 24 }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 8 kernel_size: 3 stride: 2 } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1" pooling_param { pool: AVE global_pooling: true } }
layer { name: "fc" type: "InnerProduct" bottom: "pool1" top: "fc" inner_product_param { num_output: 5 } }
layer { name: "prob" type: "Softmax" bottom: "fc" top: "prob" }
'''

# The V1 format (`layers { type: ENUM }`, Caffe before 2015), written here in the style of
# 2014 Model Zoo files: deprecated transform fields in data_param, blobs_lr/weight_decay,
# include rules, in-place layers. V1_SMALL_NEW is the same net in the current format, as
# Caffe's upgrade_proto.cpp makes it; both import to the same hpcdl net.
V1_SMALL = '''name: "SmallV1"
layers {
  name: "data"
  type: DATA
  top: "data"
  top: "label"
  data_param { source: "train_lmdb" batch_size: 16 crop_size: 24 mirror: true mean_file: "mean.binaryproto" }
  include: { phase: TRAIN }
}
layers {
  name: "data"
  type: DATA
  top: "data"
  top: "label"
  data_param { source: "val_lmdb" batch_size: 8 crop_size: 24 mean_file: "mean.binaryproto" }
  include: { phase: TEST }
}
layers {
  name: "conv1"
  type: CONVOLUTION
  bottom: "data"
  top: "conv1"
  blobs_lr: 1
  blobs_lr: 2
  weight_decay: 1
  weight_decay: 0
  convolution_param { num_output: 8 kernel_size: 5 stride: 2 group: 1
    weight_filler { type: "gaussian" std: 0.01 } bias_filler { type: "constant" value: 0.1 } }
}
layers { name: "relu1" type: RELU bottom: "conv1" top: "conv1" }
layers { name: "pool1" type: POOLING bottom: "conv1" top: "pool1" pooling_param { pool: MAX kernel_size: 3 stride: 2 } }
layers { name: "norm1" type: LRN bottom: "pool1" top: "norm1" lrn_param { local_size: 5 alpha: 0.0001 beta: 0.75 } }
layers { name: "fc1" type: INNER_PRODUCT bottom: "norm1" top: "fc1" blobs_lr: 1 blobs_lr: 2
  inner_product_param { num_output: 32 weight_filler { type: "gaussian" std: 0.005 } } }
layers { name: "relu2" type: RELU bottom: "fc1" top: "fc1" }
layers { name: "drop1" type: DROPOUT bottom: "fc1" top: "fc1" dropout_param { dropout_ratio: 0.4 } }
layers { name: "fc2" type: INNER_PRODUCT bottom: "fc1" top: "fc2" inner_product_param { num_output: 10 } }
layers { name: "accuracy" type: ACCURACY bottom: "fc2" bottom: "label" top: "accuracy" include: { phase: TEST } }
layers { name: "loss" type: SOFTMAX_LOSS bottom: "fc2" bottom: "label" top: "loss" }
'''
# conv1 8*3*5*5+8, fc1 over 8x5x5 (24 -> conv 10 -> pool 5), fc2
V1_SMALL_PARAMS = (8 * 75 + 8) + (8 * 25 * 32 + 32) + (32 * 10 + 10)

V1_SMALL_NEW = '''name: "SmallV1"
layer {
  name: "data" type: "Data" top: "data" top: "label"
  transform_param { crop_size: 24 mirror: true mean_file: "mean.binaryproto" }
  data_param { source: "train_lmdb" batch_size: 16 }
  include { phase: TRAIN }
}
layer {
  name: "data" type: "Data" top: "data" top: "label"
  transform_param { crop_size: 24 mean_file: "mean.binaryproto" }
  data_param { source: "val_lmdb" batch_size: 8 }
  include { phase: TEST }
}
layer {
  name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  param { lr_mult: 1 decay_mult: 1 } param { lr_mult: 2 decay_mult: 0 }
  convolution_param { num_output: 8 kernel_size: 5 stride: 2
    weight_filler { type: "gaussian" std: 0.01 } bias_filler { type: "constant" value: 0.1 } }
}
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1" pooling_param { pool: MAX kernel_size: 3 stride: 2 } }
layer { name: "norm1" type: "LRN" bottom: "pool1" top: "norm1" lrn_param { local_size: 5 alpha: 0.0001 beta: 0.75 } }
layer { name: "fc1" type: "InnerProduct" bottom: "norm1" top: "fc1" param { lr_mult: 1 } param { lr_mult: 2 }
  inner_product_param { num_output: 32 weight_filler { type: "gaussian" std: 0.005 } } }
layer { name: "relu2" type: "ReLU" bottom: "fc1" top: "fc1" }
layer { name: "drop1" type: "Dropout" bottom: "fc1" top: "fc1" dropout_param { dropout_ratio: 0.4 } }
layer { name: "fc2" type: "InnerProduct" bottom: "fc1" top: "fc2" inner_product_param { num_output: 10 } }
layer { name: "accuracy" type: "Accuracy" bottom: "fc2" bottom: "label" top: "accuracy" include { phase: TEST } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc2" bottom: "label" top: "loss" }
'''

# A Network-in-Network-shaped V1 net: no InnerProduct, the class scores are a 1x1
# convolution's maps averaged down to 1x1 by the last pooling (as NIN and SqueezeNet do).
V1_POOLED = '''name: "PooledV1"
layers {
  name: "data" type: DATA top: "data" top: "label"
  data_param { source: "train_lmdb" batch_size: 4 }
  transform_param { crop_size: 16 mirror: true }
}
layers { name: "conv1" type: CONVOLUTION bottom: "data" top: "conv1" blobs_lr: 1 blobs_lr: 2 weight_decay: 1 weight_decay: 0
  convolution_param { num_output: 12 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" std: 0.05 } } }
layers { name: "relu0" type: RELU bottom: "conv1" top: "conv1" }
layers { name: "cccp1" type: CONVOLUTION bottom: "conv1" top: "cccp1" convolution_param { num_output: 8 kernel_size: 1
  weight_filler { type: "gaussian" std: 0.05 } } }
layers { name: "relu1" type: RELU bottom: "cccp1" top: "cccp1" }
layers { name: "pool1" type: POOLING bottom: "cccp1" top: "pool1" pooling_param { pool: MAX kernel_size: 3 stride: 2 } }
layers { name: "drop" type: DROPOUT bottom: "pool1" top: "pool1" dropout_param { dropout_ratio: 0.5 } }
layers { name: "cccp2" type: CONVOLUTION bottom: "pool1" top: "cccp2" convolution_param { num_output: 6 kernel_size: 1
  weight_filler { type: "gaussian" std: 0.05 } } }
layers { name: "relu2" type: RELU bottom: "cccp2" top: "cccp2" }
layers { name: "pool4" type: POOLING bottom: "cccp2" top: "pool4" pooling_param { pool: AVE kernel_size: 8 stride: 1 } }
layers { name: "loss" type: SOFTMAX_LOSS bottom: "pool4" bottom: "label" top: "loss" }
'''
V1_POOLED_PARAMS = (12 * 27 + 12) + (8 * 12 + 8) + (6 * 8 + 6)

# The standard BVLC layer types face and segmentation nets add: PReLU (per channel, in place,
# and channel_shared), Bias, Power, ELU (in place), AbsVal, Log, Exp, BNLL, Threshold, an
# FCN-style Deconvolution + Crop back to the input's size, a Slice of the channels (two tops)
# concatenated the other way round, and a Reshape before the classifier.
NEW_LAYERS = '''name: "NewLayers"
layer { name: "data" type: "Input" top: "data" top: "label"
  input_param { shape { dim: 2 dim: 3 dim: 12 dim: 12 } shape { dim: 2 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 8 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" std: 0.2 } } }
layer { name: "prelu1" type: "PReLU" bottom: "conv1" top: "conv1" param { lr_mult: 1 decay_mult: 0 } }
layer { name: "bias1" type: "Bias" bottom: "conv1" top: "bias1" bias_param { filler { type: "constant" value: 0.1 } } }
layer { name: "pow1" type: "Power" bottom: "bias1" top: "pow1" power_param { power: 2 scale: 0.5 shift: 1 } }
layer { name: "elu1" type: "ELU" bottom: "pow1" top: "pow1" elu_param { alpha: 0.5 } }
layer { name: "abs1" type: "AbsVal" bottom: "pow1" top: "abs1" }
layer { name: "log1" type: "Log" bottom: "abs1" top: "log1" log_param { base: 10 shift: 1 } }
layer { name: "exp1" type: "Exp" bottom: "log1" top: "exp1" exp_param { base: 2 scale: 0.5 } }
layer { name: "bnll1" type: "BNLL" bottom: "exp1" top: "bnll1" }
layer { name: "thr1" type: "Threshold" bottom: "bnll1" top: "thr1" threshold_param { threshold: 1.2 } }
layer { name: "gate" type: "Eltwise" bottom: "bnll1" bottom: "thr1" top: "gate" eltwise_param { operation: PROD } }
layer { name: "halves" type: "Slice" bottom: "gate" top: "g1" top: "g2" slice_param { axis: 1 slice_point: 3 } }
layer { name: "swap" type: "Concat" bottom: "g2" bottom: "g1" top: "swap" }
layer { name: "up" type: "Deconvolution" bottom: "swap" top: "up"
  convolution_param { num_output: 4 kernel_size: 4 stride: 2 bias_term: false weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "crop" type: "Crop" bottom: "up" bottom: "data" top: "crop" crop_param { axis: 2 offset: 7 } }
layer { name: "prelu2" type: "PReLU" bottom: "crop" top: "crop" prelu_param { channel_shared: true
  filler { type: "constant" value: 0.1 } } }
layer { name: "flat" type: "Reshape" bottom: "crop" top: "flat" reshape_param { shape { dim: 0 dim: -1 } } }
layer { name: "fc" type: "InnerProduct" bottom: "flat" top: "fc"
  inner_product_param { num_output: 5 weight_filler { type: "gaussian" std: 0.05 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" top: "loss" }
'''
# conv1 8*27+8, prelu1 8, bias1 8, up 8*4*16 (no bias), prelu2 1 (shared), fc over 4x12x12: 576*5+5
NEW_LAYERS_PARAMS = (8 * 27 + 8) + 8 + 8 + 8 * 4 * 16 + 1 + (576 * 5 + 5)

"""Caffe interchange: prototxt nets and solvers in and out, `.caffemodel` weights."""

"""PyTorch with Horovod (`--dist horovod`): the seed papers' data parallelism, a legacy path."""

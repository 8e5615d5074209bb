"""Benchmarks: the trainer's speed as ratios measured in one run (`make bench`).

    cpu         the trainer against a bare PyTorch loop, threads, spatial parallelism, the
                predictor beside the measured scaling; writes docs/performance.md
    frameworks  the PyTorch, TensorFlow and MXNet trainers against their bare loops
    gpu         ResNet-50, the JPEG pipeline and LARC on a CUDA GPU
    machine     the machine a run was measured on
"""

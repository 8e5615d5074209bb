"""Spatial parallelism: one sample split into slabs over the ranks of a spatial group.

After Dryden, Maruyama et al. (LLNL), "Improving strong-scaling of CNN training by
exploiting finer-grained parallelism", IPDPS 2019 (arXiv:1903.06681): each rank holds a slab
of the image and of every activation, convolutions and pooling exchange halo rows with the
neighbouring slabs (forward: input rows; backward: their gradients), batch norm reduces its
statistics over the whole sample, and groups of such ranks are data-parallel replicas.

    geometry  where each slab and halo lies (pure arithmetic)
    ops       halo exchange and slab layers as autograd functions
    net       a net of hpcdl.nets run on slabs
    parallel  the layout of ranks, slabs of a batch, the loss and the gradient reduction
    loop      the training loop for spatial and per-pixel (segmentation) recipes
"""

"""PyTorch: data-parallel training with torch.distributed (trainer), the steps it shares with the
spatial loop (steps), Caffe's SGD with LARS/LARC (optim), gradient buckets, compression and lag
(gradients), input decoded ahead and moved early (feed, dali_feed), GPU speed settings
(cuda_settings), and spatial parallelism (spatial/)."""

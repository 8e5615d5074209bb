"""MXNet 1.9: Gluon blocks with MXNet's kvstore (trainer), the shared update rule on MXNet's fused
kernels (update), and the parameter-server roles a dist_sync job starts (kvstore)."""

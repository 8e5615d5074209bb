"""The tests' Slurm is the one `hpcdl cluster up` starts: the code lives in hpcdl.cluster.

    python tests/slurm_cluster.py up|down FOLDER [NODES] [SITE[:KIND]]   (or `hpcdl cluster up`)
"""

from hpcdl.cluster import (  # noqa: F401  (the names the tests import)
    NodeShape, SlurmCluster, SlurmClusters, SlurmError, free_ports, main, munge_works,
)

if __name__ == "__main__":
    raise SystemExit(main())

"""Caffe's solver types, and the SolverParameter fields each reads besides SGD's.

The order is caffe.proto's SolverType enum (SGD 0 ... ADAM 5), which the old `solver_type`
field and hpcdl's snapshots number by; the fields are those each `*_solver.cpp` reads.
The recipe, the solver importer and every backend's update rule go by this one table.
"""

SOLVERS = ("SGD", "Nesterov", "AdaGrad", "RMSProp", "AdaDelta", "Adam")
SOLVER_FIELDS = {"Adam": ("momentum2", "delta"), "RMSProp": ("rms_decay", "delta"), "AdaGrad": ("delta",),
                 "AdaDelta": ("delta",)}

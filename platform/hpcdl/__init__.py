"""hpcdl: deep learning for HPC centres.

Site profile (data) + job request -> plan (pure) -> job script / modulefile / container
definition -> executor -> trainer in each rank -> results -> report.
"""

__version__ = "0.1.0"

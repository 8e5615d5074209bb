"""Reports a person reads from validation results: table, plots, HTML page, JSON summary."""

from hpcdl.report.build import Results, build_report, load_results

__all__ = ["Results", "build_report", "load_results"]

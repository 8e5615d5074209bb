"""Validation suites: jobs that prove a machine's deep-learning stack is healthy and fast.

`hpcdl validate --site S` renders the suite's jobs from the site profile, runs them with
the site's executor, and judges the results against the site's references
(hpcdl/validate/references/<site>.yaml, or references/<site>.yaml on HPCDL_SITE_PATH).
"""

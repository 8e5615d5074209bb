"""Renderers: turn a plan (and a recipe) into text a scheduler or shell runs."""

from hpcdl.render.jobscript import JobOptions, render_job_script

__all__ = ["JobOptions", "render_job_script"]

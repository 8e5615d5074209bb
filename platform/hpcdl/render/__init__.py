"""Renderers: turn a plan (and a recipe) into text a scheduler or shell runs.

`render_job_script` and `JobOptions` are loaded on first use, so that importing a piece of
this package (the job script's directives, its time limits) does not load the templates.
Quoting for the shell, which every renderer shares, is hpcdl.shell.
"""

__all__ = ["JobOptions", "render_job_script"]


def __getattr__(name):
    if name in __all__:
        from hpcdl.render import jobscript

        return getattr(jobscript, name)
    raise AttributeError(name)

"""Renderers: turn a plan (and a recipe) into text a scheduler or shell runs.

`render_job_script` and `JobOptions` are loaded on first use, so that low-level modules
(runtimes, launchers) can use `hpcdl.render.shell` without importing the templates, which
themselves need the runtimes.
"""

__all__ = ["JobOptions", "render_job_script"]


def __getattr__(name):
    if name in __all__:
        from hpcdl.render import jobscript

        return getattr(jobscript, name)
    raise AttributeError(name)

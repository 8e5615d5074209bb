"""What a local run can check before it starts any rank: the problems every rank would otherwise
find at start, each printing it under the launcher's abort banner (issue 28, item 12)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from hpcdl.errors import HpcdlError
from hpcdl.train.recipe import Recipe

#: the module each backend imports first (hpcdl.train.main.BACKENDS)
FRAMEWORK_MODULES = {"pytorch": "torch", "tensorflow": "tensorflow", "mxnet": "mxnet"}
#: data sources read from data.path
SOURCES_WITH_PATH = ("cifar10", "imagefolder", "tar")


def check_before_launch(recipe: Recipe, framework: str, distributed: str, env: dict | None = None,
                        frameworks_here: bool = True) -> None:
    """Raise one HpcdlError for the first thing that would stop every rank at start, here.
    `frameworks_here`: the ranks run this Python (runtime none), not an image's."""
    env = os.environ if env is None else env
    module = FRAMEWORK_MODULES.get(framework) if frameworks_here else None
    if module and importlib.util.find_spec(module) is None:
        raise HpcdlError(f"framework: {framework} is not installed here (no module {module!r}); "
                         f"install it (pip install 'hpcdl[{'torch' if framework == 'pytorch' else framework}]') "
                         "or load the site's framework module")
    if frameworks_here and distributed == "horovod" and importlib.util.find_spec("horovod") is None:
        raise HpcdlError("distributed: horovod is not installed here (no module 'horovod')")
    data = recipe.data
    if data.source == "digits" and frameworks_here:
        from hpcdl.extras import installed, need

        if not installed("sklearn"):
            need("sklearn", "data.source digits")
    if data.source in SOURCES_WITH_PATH and data.path:
        path = data.path
        for name, value in env.items():  # the job's environment, as the ranks will expand it
            path = path.replace(f"${{{name}}}", value).replace(f"${name}", value)
        path = os.path.expanduser(path)
        if "$" not in path and not Path(path).exists():
            raise HpcdlError(f"data.path: {data.path}: no such file or folder here")

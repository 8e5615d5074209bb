"""The heavy optional parts of hpcdl, installed as pip extras so a login node's CLI stays light:
`digits` (scikit-learn, which ships the handwritten digits the examples train on) and `reports`
(matplotlib, for the report's plots and --picture). A missing one is one line naming the extra."""

from __future__ import annotations

import importlib
import importlib.util

from hpcdl.errors import HpcdlError

#: module -> (the package that provides it, the hpcdl extra that installs it)
OPTIONAL = {"sklearn": ("scikit-learn", "digits"), "matplotlib": ("matplotlib", "reports")}


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def need(module: str, what: str):
    """`module` imported, or one HpcdlError saying which extra installs it."""
    top = module.split(".")[0]
    try:
        return importlib.import_module(module)
    except ImportError:
        package, extra = OPTIONAL[top]
        raise HpcdlError(f"{what} needs {package}, which is not installed here: "
                         f"pip install 'hpcdl[{extra}]'") from None

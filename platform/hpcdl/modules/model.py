"""What a generated module does, as data: the templates render it and the tests check Lmod against it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ModulePath:
    """A path a module puts on a search variable. `in_tree`: relative to the rendered module tree
    (the folder given to `module use`), resolved by the modulefile from its own location so the
    tree can be copied anywhere; otherwise absolute (under the install prefix)."""

    variable: str
    path: str
    in_tree: bool = False


@dataclass(frozen=True)
class ModuleSpec:
    name: str  # e.g. "pytorch"; the file is <name>/<version>.lua
    version: str
    description: str  # one line, for whatis()
    help: str  # what it is and the first command to try
    family: str
    depends_on: tuple[str, ...] = ()  # modules loaded with it and unloaded after it when nothing else needs them
    paths: tuple[ModulePath, ...] = ()
    env: dict[str, str] = field(default_factory=dict)  # pushenv: unload gives back the value before load
    # whatis lines that `module spider` and `module keyword` search (the EasyBuild set)
    category: str = ""
    url: str = ""
    keywords: tuple[str, ...] = ()
    # packages inside, as name/version: `module spider horovod` names the module that holds it
    extensions: tuple[str, ...] = ()
    # modules outside this one's family that must not be loaded with it (the centre's own framework module)
    conflicts: tuple[str, ...] = ()

    @property
    def relpath(self) -> str:
        return f"{self.name}/{self.version}.lua"


@dataclass(frozen=True)
class Wrapper:
    """One wrapper script: `command` run inside the image (or from the native prefix).

    argv: the whole command line, with IMAGE_SLOT where the image goes and BINDS_SLOT where the
    binds were; binds: (flag, value, path), e.g. ("--volume", "/tmp:/tmp", "/tmp"), each added
    only when its path exists on the node.
    """

    command: str
    argv: tuple[str, ...]
    binds: tuple[tuple[str, str, str], ...] = ()
    native: bool = False


# where the image reference goes in a wrapper's argv (it may sit inside an element: --image=...)
IMAGE_SLOT = "@HPCDL_IMAGE@"
# where the binds that exist on the node go
BINDS_SLOT = "@HPCDL_BINDS@"

"""Writing files the way a careful tool does: all or nothing (see hpcdl.files)."""

from hpcdl.files import write_atomically

__all__ = ["write_atomically"]

"""A tiny name -> class registry, one per axis of variation (launcher, runtime, executor...)."""

from __future__ import annotations

from typing import Callable, Generic, TypeVar

from hpcdl.errors import HpcdlError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, what: str):
        self.what = what
        self._entries: dict[str, type[T]] = {}

    def register(self, name: str) -> Callable[[type[T]], type[T]]:
        def add(cls: type[T]) -> type[T]:
            cls.name = name  # type: ignore[attr-defined]
            self._entries[name] = cls
            return cls

        return add

    def get(self, name: str) -> T:
        if name not in self._entries:
            raise HpcdlError(f"unknown {self.what} {name!r}; known: {', '.join(sorted(self._entries))}")
        return self._entries[name]()

    def names(self) -> list[str]:
        return sorted(self._entries)

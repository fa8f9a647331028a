"""Name → implementation registries (estimators, summary scorers): one dispatch path each."""

from __future__ import annotations

from collections.abc import Callable, MutableSet
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Registers implementations by name; a name is taken once, an unknown one is an
    error listing the valid names. ``kind`` names the registry in messages; ``names``,
    when given, is a set the registry adds each registered name to (and removes an
    unregistered one from): the names the configuration accepts
    (:mod:`slca.config.names`), which it checks without importing the implementations."""

    def __init__(self, kind: str, names: MutableSet[str] | None = None):
        self.kind = kind
        self._items: dict[str, T] = {}
        self._names = names

    def register(self, name: str) -> Callable[[T], T]:
        def decorator(item: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._items[name] = item
            if self._names is not None:
                self._names.add(name)
            return item

        return decorator

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise ValueError(
                f"unknown {self.kind} {name!r}; valid: {', '.join(self.names())}"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def unregister(self, name: str) -> None:
        self._items.pop(name, None)
        if self._names is not None:
            self._names.discard(name)

"""A small name -> object registry (after fvcore's ``Registry``).

Registries feed the CLI's ``choices=`` (through :mod:`rsmooth.cli.catalog`, rewritten with the
golden help files) and the tests' parametrisation, so a new model, dataset or method is
one file plus one decorator.
"""
from __future__ import annotations

from typing import Callable, Dict, Generic, Iterator, List, TypeVar

from .errors import RsmoothError

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to objects; duplicate names fail, unknown names list what exists.

    Example::

        MODELS = Registry("model")

        @MODELS.register("lenet")
        def lenet(num_classes): ...

        MODELS.get("lenet")
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: Dict[str, T] = {}

    def register(self, name: str, *, replace: bool = False) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self._items and not replace:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._items[name] = obj
            return obj

        return deco

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise RsmoothError(
                f"unknown {self.kind} {name!r}; choose one of: {', '.join(self.names())}"
            ) from None

    def names(self) -> List[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._items)

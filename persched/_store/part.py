"""`Part`: one part of the `Store`, whose statements run through the store's transactions.

The store holds one object of each part and offers their methods as its own;
a part offers the store's machinery as its own. Both go through `offered`,
which looks the method up at every call, so that a test patching the store
(``patch.object(store, "_write")``) reaches the parts too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from ._tx import Transactions

if TYPE_CHECKING:
    from collections.abc import Callable

    from .store import Store

__all__ = ["Part", "offered"]

P = ParamSpec("P")
R = TypeVar("R")


def offered(attribute: str, method: Callable[Concatenate[Any, P], R]) -> Callable[Concatenate[Any, P], R]:
    """`method`, as a method of another class: called, at every call, on the object in `attribute`."""
    name = method.__name__

    def call(self: object, /, *args: P.args, **kwargs: P.kwargs) -> R:
        found: Callable[P, R] = getattr(getattr(self, attribute), name)
        return found(*args, **kwargs)

    call.__name__ = name
    call.__doc__ = method.__doc__
    return call


class Part:
    """A part of the store: its statements run through the store's transactions."""

    def __init__(self, store: Store) -> None:
        self.store = store
        # Set once by the store's __init__, so copied; `failures_paused` is set later, so asked.
        self.dialect = store.dialect
        self.namespace = store.namespace
        self.url = store.url
        self._mine = store._mine
        self._insert_runs = store._insert_runs
        self.jitter_reach = store.jitter_reach

    @property
    def failures_paused(self) -> Callable[[str, int], object]:
        return self.store.failures_paused

    _read = offered("store", Transactions._read)
    _write = offered("store", Transactions._write)
    _write_grouped = offered("store", Transactions._write_grouped)
    _write_park = offered("store", Transactions._write_park)
    _bump_change_seq = offered("store", Transactions._bump_change_seq)
    _in_namespace = offered("store", Transactions._in_namespace)
    _in_write = offered("store", Transactions._in_write)
    _on_commit = offered("store", Transactions._on_commit)
    _after_commit = offered("store", Transactions._after_commit)
    _raise_refusal = offered("store", Transactions._raise_refusal)
    _take_own_changes = offered("store", Transactions._take_own_changes)

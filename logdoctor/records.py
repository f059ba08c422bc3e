"""`dataclass` as the standard library makes it, for less import time.

The standard library writes each class's `__init__`, `__repr__`, `__eq__` (and a frozen class's
`__hash__`) as source text and compiles it with `exec` when the module is imported: about half a
millisecond a class, and the explain path defines some fifty classes. Here the stdlib still writes
`__init__` (what makes instances fast to create) and the frozen guards, while `__repr__`, `__eq__` and
`__hash__` are shared functions that read the fields' names once. They behave as the generated ones do:
the same text, equality only between instances of the same class comparing the `compare` fields as a
tuple, `__hash__` None for a mutable class with `eq` and a hash of the hashed fields for a frozen one, a
method the class defines itself kept, a recursive repr shown as `...` (tests/test_records.py holds them
side by side). Type checkers see the stdlib decorator.
"""
from __future__ import annotations

import dataclasses
from _thread import get_ident
from collections.abc import Callable
from operator import attrgetter
from typing import TYPE_CHECKING, Any

__all__ = ["asdict", "dataclass", "field", "fields"]



def _getter(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    if len(names) == 1:
        one = attrgetter(names[0])
        return lambda obj: (one(obj),)
    if not names:
        return lambda obj: ()
    return attrgetter(*names)


def _repr_of(names: list[str]) -> Callable[[Any], str]:
    running: set[tuple[int, int]] = set()

    def __repr__(self: Any) -> str:
        key = (id(self), get_ident())
        if key in running:
            return "..."
        running.add(key)
        try:
            return self.__class__.__qualname__ + "(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in names) + ")"
        finally:
            running.discard(key)
    return __repr__


def _eq_of(names: list[str]) -> Callable[[Any, Any], Any]:
    values = _getter(names)

    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return values(self) == values(other)
        return NotImplemented
    return __eq__


def _hash_of(names: list[str]) -> Callable[[Any], int]:
    values = _getter(names)

    def __hash__(self: Any) -> int:
        return hash(values(self))
    return __hash__


def _install(cls: Any, name: str, method: Any) -> None:
    method.__qualname__ = f"{cls.__qualname__}.{name}"
    setattr(cls, name, method)


def _fast(cls: Any = None, /, *, repr: bool = True, eq: bool = True, frozen: bool = False, **options: Any) -> Any:
    def wrap(c: Any) -> Any:
        if options.get("order") or options.get("unsafe_hash"):
            return dataclasses.dataclass(c, repr=repr, eq=eq, frozen=frozen, **options)
        own_hash = c.__dict__.get("__hash__", dataclasses.MISSING)
        explicit_hash = not (own_hash is dataclasses.MISSING or (own_hash is None and "__eq__" in c.__dict__))
        c = dataclasses.dataclass(c, repr=False, eq=False, frozen=frozen, **options)
        all_fields = dataclasses.fields(c)
        if repr and "__repr__" not in c.__dict__:
            _install(c, "__repr__", _repr_of([f.name for f in all_fields if f.repr]))
        if eq:
            if "__eq__" not in c.__dict__:
                _install(c, "__eq__", _eq_of([f.name for f in all_fields if f.compare]))
            if not explicit_hash:
                if frozen:
                    _install(c, "__hash__", _hash_of([f.name for f in all_fields
                                                      if (f.compare if f.hash is None else f.hash)]))
                else:
                    c.__hash__ = None
        return c
    return wrap if cls is None else wrap(cls)


if TYPE_CHECKING:
    from dataclasses import asdict as asdict
    from dataclasses import dataclass as dataclass
    from dataclasses import field as field
    from dataclasses import fields as fields
else:
    asdict, field, fields = dataclasses.asdict, dataclasses.field, dataclasses.fields
    dataclass = _fast

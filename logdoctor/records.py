"""`dataclass` as the standard library makes it, without its cost at import.

The standard library's decorator writes each class's `__init__` (and `__repr__`, `__eq__`, a frozen class's
guards) as source text and compiles it when the module is imported, and sets a docstring from
`inspect.signature`: about half a millisecond a class, some forty classes on the explain path, and
`dataclasses` itself imports `inspect` (~7 ms). Here:

- `__init__` is written as the same kind of text, but looked up among the functions of
  `records_built.py` (written by tools/build_records.py from every class of the package), so nothing is
  compiled at run time; a text not found there (a class outside the package, an edited one) is compiled;
- `__repr__`, `__eq__`, `__hash__`, the frozen guards and slots are shared functions that read the
  fields' names once;
- `__dataclass_fields__` is made when first asked for (`dataclasses.fields`, `asdict`, `replace`,
  `is_dataclass` all ask for it), which imports `dataclasses` then;
- a shape this does not handle (`order`, `unsafe_hash`, `kw_only`, `InitVar`, a base made by the standard
  library, anything the standard library would refuse) goes to `dataclasses.dataclass` itself.

They behave as the generated ones do: the same text, equality only between instances of the same class
comparing the `compare` fields as a tuple, `__hash__` None for a mutable class with `eq` and a hash of the
hashed fields for a frozen one, a method the class defines itself kept, a recursive repr shown as `...`,
`FrozenInstanceError` on assigning to a frozen instance (tests/test_records.py holds them side by side).
Type checkers see the stdlib decorator.
"""
from __future__ import annotations

import sys
from _thread import get_ident
from collections.abc import Callable
from operator import attrgetter
from typing import TYPE_CHECKING, Any

__all__ = ["asdict", "dataclass", "field", "fields", "replace"]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
_HAS_FACTORY: Any = type("_HasFactory", (), {"__repr__": lambda self: "<factory>"})()
_ATOMIC = (type(None), bool, int, float, complex, str, bytes)


class Field:
    """What `field()` says of one field; `name` and `type` are filled in by the decorator."""
    __slots__ = ("name", "type", "default", "default_factory", "init", "repr", "hash", "compare", "metadata",
                 "kw_only")

    def __init__(self, default: Any, default_factory: Any, init: bool, repr: bool, hash: bool | None,
                 compare: bool, metadata: Any, kw_only: Any) -> None:
        self.name: str = ""
        self.type: Any = None
        self.default, self.default_factory = default, default_factory
        self.init, self.repr, self.hash, self.compare = init, repr, hash, compare
        self.metadata, self.kw_only = metadata, kw_only


def field(*, default: Any = MISSING, default_factory: Any = MISSING, init: bool = True, repr: bool = True,
          hash: bool | None = None, compare: bool = True, metadata: Any = None, kw_only: Any = MISSING) -> Any:
    if default is not MISSING and default_factory is not MISSING:
        raise ValueError("cannot specify both default and default_factory")
    return Field(default, default_factory, init, repr, hash, compare, metadata, kw_only)


def _std() -> Any:
    import dataclasses
    return dataclasses


def _from_std(f: Any) -> Field:
    """A `dataclasses.field(...)` written in a class body, as a Field of ours."""
    std = _std()

    def ours(v: Any) -> Any:
        return MISSING if v is std.MISSING else v
    return Field(ours(f.default), ours(f.default_factory), f.init, f.repr, f.hash, f.compare,
                 f.metadata if f.metadata else None, ours(f.kw_only))


def _is_std_field(v: Any) -> bool:
    return type(v).__name__ == "Field" and type(v).__module__ == "dataclasses"


class _Unhandled(Exception):
    """A class shape left to the standard library."""


# ------------------------------------------------------------------------------------------------
# the methods


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


def _frozen_guards(cls: Any, names: frozenset[str]) -> tuple[Callable[..., None], Callable[..., None]]:
    # as the standard library's: `cls` is the class as first made, even when slots make a new one
    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise _std().FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise _std().FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)
    return __setattr__, __delattr__


def _getstate(self: Any) -> list[Any]:
    return [getattr(self, f.name) for f in type(self).__records_fields__]


def _setstate(self: Any, state: list[Any]) -> None:
    for f, value in zip(type(self).__records_fields__, state):
        object.__setattr__(self, f.name, value)


class _LazyFields:
    """`__dataclass_fields__`, made of the standard library's Field objects when first asked for."""

    def __get__(self, obj: Any, owner: Any) -> dict[str, Any]:
        std = _std()
        out: dict[str, Any] = {}
        for f in owner.__records_fields__:
            g = std.field(default=std.MISSING if f.default is MISSING else f.default,
                          default_factory=std.MISSING if f.default_factory is MISSING else f.default_factory,
                          init=f.init, repr=f.repr, hash=f.hash, compare=f.compare, metadata=f.metadata)
            g.name, g.type, g._field_type = f.name, f.type, std._FIELD
            out[f.name] = g
        return out


# ------------------------------------------------------------------------------------------------
# __init__: its text, and the function already built for that text


_SOURCES: list[str] = []   # every text made in this process (tools/build_records.py collects them)


def _init_source(fields: list[Field], frozen: bool, slots: bool, post_init: bool) -> tuple[str, list[str], list[Any]]:
    """The text of a function making `__init__`, the names it takes and the defaults of `__init__`."""
    params, body, takes, defaults = [], [], ["_HAS_FACTORY", "_object_setattr"], []
    for f in fields:
        n = f.name
        if f.default_factory is not MISSING:
            takes.append(f"_factory_{n}")
            value = f"_factory_{n}() if {n} is _HAS_FACTORY else {n}" if f.init else f"_factory_{n}()"
        elif f.init:
            value = n
        elif slots and f.default is not MISSING:
            takes.append(f"_dflt_{n}")
            value = f"_dflt_{n}"
        else:
            continue
        if f.init:
            if f.default is not MISSING or f.default_factory is not MISSING:
                params.append(f"{n}=None")  # the real defaults are set on the function made
                defaults.append(_HAS_FACTORY if f.default_factory is not MISSING else f.default)
            else:
                params.append(n)
        body.append(f"_object_setattr(self, {n!r}, {value})" if frozen else f"self.{n} = {value}")
    if post_init:
        body.append("self.__post_init__()")
    head = ", ".join(["self"] + params)
    lines = [f"def __make__({', '.join(takes)}):", f"    def __init__({head}):"]
    lines += [f"        {b}" for b in body or ["pass"]]
    lines.append("    return __init__")
    return "\n".join(lines) + "\n", takes, defaults


def _made_init(fields: list[Field], frozen: bool, slots: bool, post_init: bool) -> Any:
    text, takes, defaults = _init_source(fields, frozen, slots, post_init)
    _SOURCES.append(text)
    make: Any = _BUILT.get(text)
    if make is None:
        scope: dict[str, Any] = {}
        exec(compile(text, "<records>", "exec"), {"__builtins__": __builtins__}, scope)
        make = scope["__make__"]
    given = {"_HAS_FACTORY": _HAS_FACTORY, "_object_setattr": object.__setattr__}
    for f in fields:
        if f.default_factory is not MISSING:
            given[f"_factory_{f.name}"] = f.default_factory
        elif not f.init and slots and f.default is not MISSING:
            given[f"_dflt_{f.name}"] = f.default
    init = make(*(given[t] for t in takes))
    init.__defaults__ = tuple(defaults) or None
    return init


try:
    from logdoctor.records_built import BUILT as _BUILT
except ImportError:  # being rebuilt
    _BUILT = {}


# ------------------------------------------------------------------------------------------------
# the decorator


def _is_classvar(t: Any) -> bool:
    if isinstance(t, str):
        return t.startswith(("ClassVar", "typing.ClassVar"))
    typing = sys.modules.get("typing")
    return typing is not None and (t is typing.ClassVar or getattr(t, "__origin__", None) is typing.ClassVar)


def _own_fields(cls: Any) -> list[Field]:
    annotations = cls.__dict__.get("__annotations__", {})
    out: list[Field] = []
    for name, t in annotations.items():
        if _is_classvar(t):
            continue
        if isinstance(t, str) and t.startswith(("InitVar", "dataclasses.InitVar", "KW_ONLY", "dataclasses.KW_ONLY")):
            raise _Unhandled
        if type(t).__name__ in ("InitVar", "_KW_ONLY_TYPE") or name in ("self", "_HAS_FACTORY", "_object_setattr"):
            raise _Unhandled
        default = cls.__dict__.get(name, MISSING)
        if isinstance(default, Field) or _is_std_field(default):
            f = default if isinstance(default, Field) else _from_std(default)
            f = Field(f.default, f.default_factory, f.init, f.repr, f.hash, f.compare, f.metadata, f.kw_only)
            if f.default is MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, f.default)
        else:
            f = Field(default, MISSING, True, True, None, True, None, MISSING)
        if f.kw_only is True or (f.default is not MISSING and f.default.__class__.__hash__ is None):
            raise _Unhandled  # keyword-only, or a mutable default the standard library refuses
        f.name, f.type = name, t
        out.append(f)
    for name, value in cls.__dict__.items():
        if (isinstance(value, Field) or _is_std_field(value)) and name not in annotations:
            raise _Unhandled  # the standard library says it has no type annotation
    return out


def _all_fields(cls: Any) -> list[Field]:
    merged: dict[str, Field] = {}
    for base in cls.__mro__[-1:0:-1]:
        inherited = base.__dict__.get("__records_fields__")
        if inherited is not None:
            merged.update((f.name, f) for f in inherited)
        elif "__dataclass_fields__" in base.__dict__:
            raise _Unhandled  # a base the standard library made
    merged.update((f.name, f) for f in _own_fields(cls))
    fields = list(merged.values())
    seen_default = False
    for f in fields:
        if not f.init:
            continue
        if f.default is not MISSING or f.default_factory is not MISSING:
            seen_default = True
        elif seen_default:
            raise _Unhandled  # the standard library's "non-default argument follows default argument"
    return fields


def _install(cls: Any, name: str, method: Any) -> None:
    method.__qualname__ = f"{cls.__qualname__}.{name}"
    setattr(cls, name, method)


def _make(c: Any, init: bool, repr: bool, eq: bool, frozen: bool, slots: bool, match_args: bool) -> Any:
    own = c.__dict__
    if slots and "__slots__" in own:
        raise _Unhandled
    if frozen and ("__setattr__" in own or "__delattr__" in own):
        raise _Unhandled
    for b in c.__mro__[1:]:
        if "__records_fields__" in b.__dict__ and b.__dict__.get("__records_frozen__", False) != frozen:
            raise _Unhandled  # the standard library refuses frozen and mutable mixed
    own_hash = own.get("__hash__", MISSING)
    explicit_hash = not (own_hash is MISSING or (own_hash is None and "__eq__" in own))
    fields = _all_fields(c)
    c.__records_fields__ = tuple(fields)
    c.__records_frozen__ = frozen
    c.__dataclass_fields__ = _LazyFields()
    if init and "__init__" not in own:
        _install(c, "__init__", _made_init(fields, frozen, slots, hasattr(c, "__post_init__")))
    if repr and "__repr__" not in own:
        _install(c, "__repr__", _repr_of([f.name for f in fields if f.repr]))
    if eq:
        if "__eq__" not in own:
            _install(c, "__eq__", _eq_of([f.name for f in fields if f.compare]))
        if not explicit_hash:
            if frozen:
                _install(c, "__hash__", _hash_of([f.name for f in fields if (f.compare if f.hash is None else f.hash)]))
            else:
                c.__hash__ = None
    if frozen:
        setter, deleter = _frozen_guards(c, frozenset(f.name for f in fields))
        _install(c, "__setattr__", setter)
        _install(c, "__delattr__", deleter)
    if match_args and "__match_args__" not in own:
        setattr(c, "__match_args__", tuple(f.name for f in fields if f.init))
    return _with_slots(c, fields, frozen) if slots else c


def _with_slots(cls: Any, fields: list[Field], frozen: bool) -> Any:
    """The class made again with `__slots__`, as the standard library's `_add_slots` does."""
    body = dict(cls.__dict__)
    inherited: set[str] = set()
    for base in cls.__mro__[1:-1]:
        s = base.__dict__.get("__slots__")
        if s is not None:
            inherited.update((s,) if isinstance(s, str) else s)
    names = tuple(f.name for f in fields)
    body["__slots__"] = tuple(n for n in names if n not in inherited)
    for n in names:
        body.pop(n, None)
    body.pop("__dict__", None)
    body.pop("__weakref__", None)
    qualname = getattr(cls, "__qualname__", None)
    made = type(cls)(cls.__name__, cls.__bases__, body)
    if qualname is not None:
        made.__qualname__ = qualname
    if frozen:
        if "__getstate__" not in body:
            made.__getstate__ = _getstate
        if "__setstate__" not in body:
            made.__setstate__ = _setstate
    return made


def _fast(cls: Any = None, /, *, init: bool = True, repr: bool = True, eq: bool = True, frozen: bool = False,
          slots: bool = False, match_args: bool = True, **options: Any) -> Any:
    def wrap(c: Any) -> Any:
        if not any(options.values()):
            snapshot = dict(c.__dict__)
            try:
                return _make(c, init, repr, eq, frozen, slots, match_args)
            except _Unhandled:
                for name in set(c.__dict__) - set(snapshot):
                    delattr(c, name)
                for name, value in snapshot.items():
                    if name not in ("__dict__", "__weakref__") and c.__dict__.get(name, MISSING) is not value:
                        setattr(c, name, value)
        return _std().dataclass(c, init=init, repr=repr, eq=eq, frozen=frozen, slots=slots, match_args=match_args,
                                **options)
    return wrap if cls is None else wrap(cls)


# ------------------------------------------------------------------------------------------------
# fields, asdict, replace


def _fields_of(obj: Any) -> tuple[Field, ...] | None:
    """The fields of a class made here (or of its instance); None for any other, a subclass not decorated
    included (the standard library reads that one's fields through `__dataclass_fields__`)."""
    cls = obj if isinstance(obj, type) else type(obj)
    return cls.__dict__.get("__records_fields__")


def _fields(obj: Any) -> tuple[Any, ...]:
    return tuple(_std().fields(obj))


def _asdict(obj: Any, dict_factory: Callable[[list[tuple[str, Any]]], Any] = dict) -> Any:
    """As `dataclasses.asdict`, without importing it for the classes made here."""
    if _fields_of(obj) is None or isinstance(obj, type):
        return _std().asdict(obj, dict_factory=dict_factory)
    return _asdict_inner(obj, dict_factory)


def _asdict_inner(obj: Any, dict_factory: Callable[[list[tuple[str, Any]]], Any]) -> Any:
    if type(obj) in _ATOMIC:
        return obj
    own = None if isinstance(obj, type) else _fields_of(obj)
    if own is not None:
        return dict_factory([(f.name, _asdict_inner(getattr(obj, f.name), dict_factory)) for f in own])
    if not isinstance(obj, type) and hasattr(type(obj), "__dataclass_fields__"):
        return _std().asdict(obj, dict_factory=dict_factory)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*[_asdict_inner(v, dict_factory) for v in obj])
    if isinstance(obj, (list, tuple)):
        return type(obj)(_asdict_inner(v, dict_factory) for v in obj)
    if isinstance(obj, dict):
        return type(obj)((_asdict_inner(k, dict_factory), _asdict_inner(v, dict_factory)) for k, v in obj.items())
    import copy
    return copy.deepcopy(obj)


def _replace(obj: Any, /, **changes: Any) -> Any:
    own = _fields_of(obj)
    if own is None or isinstance(obj, type):
        return _std().replace(obj, **changes)
    for f in own:
        if not f.init:
            if f.name in changes:
                raise ValueError(f"field {f.name} is declared with init=False, it cannot be specified with replace()")
            continue
        if f.name not in changes:
            changes[f.name] = getattr(obj, f.name)
    return obj.__class__(**changes)


if TYPE_CHECKING:
    from dataclasses import asdict as asdict
    from dataclasses import dataclass as dataclass
    from dataclasses import field as field  # noqa: F811
    from dataclasses import fields as fields
    from dataclasses import replace as replace
else:
    asdict, fields, replace = _asdict, _fields, _replace
    dataclass = _fast

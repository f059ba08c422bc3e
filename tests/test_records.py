"""logdoctor.records.dataclass behaves as dataclasses.dataclass: repr, equality, hashing, fields, slots."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import pytest

from logdoctor import records


def _family(dc: Callable[..., Any]) -> dict[str, Any]:
    """The same class shapes, decorated by `dc`."""
    @dc
    class Plain:
        a: int
        b: str = "x"
        c: list[int] = dataclasses.field(default_factory=list)
        hidden: int = dataclasses.field(default=0, repr=False, compare=False)

    @dc(frozen=True)
    class Frozen:
        a: int
        b: tuple[int, ...] = ()
        skip: int = dataclasses.field(default=0, compare=False)
        nohash: int = dataclasses.field(default=0, hash=False)

    @dc(slots=True)
    class Slotted:
        a: int
        b: int | None = None

    @dc(frozen=True, slots=True)
    class FrozenSlotted:
        a: str

    @dc
    class Derived(Plain):
        d: int = 1

    @dc(eq=False)
    class Identity:
        a: int

    @dc
    class OwnMethods:
        a: int

        def __repr__(self) -> str:
            return "mine"

        def __eq__(self, other: object) -> bool:
            return True

        def __hash__(self) -> int:
            return 7

    @dc
    class Derived2(OwnMethods):
        b: int = 0

    @dc
    class Node:
        child: Any = None

    @dc
    class Late:
        a: int
        d: int = dataclasses.field(init=False, repr=False, compare=False)

        def __post_init__(self) -> None:
            self.d = self.a * 2

    return {c.__name__: c for c in (Plain, Frozen, Slotted, FrozenSlotted, Derived, Identity, OwnMethods, Derived2,
                                    Node, Late)}


STD, FAST = _family(dataclasses.dataclass), _family(records.dataclass)
ARGS: dict[str, list[tuple[Any, ...]]] = {
    "Plain": [(1,), (1, "y"), (1, "x", [2])], "Frozen": [(1,), (1, (2, 3)), (2,)], "Slotted": [(1,), (1, 2)],
    "FrozenSlotted": [("a",), ("b",)], "Derived": [(1,), (1, "x", [], 0, 5)], "Identity": [(1,)],
    "OwnMethods": [(1,)], "Derived2": [(1,), (1, 2)], "Node": [(None,), (3,)], "Late": [(2,), (3,)],
}


def _behaviour(cls: Any, args: tuple[Any, ...]) -> dict[str, Any]:
    a, b = cls(*args), cls(*args)
    out: dict[str, Any] = {"repr": repr(a), "eq_same": a == b, "eq_other": a == object(), "ne": a != b,
                           "fields": [(f.name, f.repr, f.compare, f.init) for f in dataclasses.fields(cls)],
                           "hashable": cls.__hash__ is not None, "match_args": getattr(cls, "__match_args__", None),
                           "slots": hasattr(cls, "__slots__")}
    if cls.__hash__ is not None:
        out["hash_equal"] = hash(a) == hash(b)
    first = dataclasses.fields(cls)[0].name
    try:
        setattr(a, first, getattr(a, first))
        out["settable"] = True
    except dataclasses.FrozenInstanceError:
        out["settable"] = False
    if hasattr(a, "hidden"):
        b.hidden = 99
        out["eq_ignores_compare_false"] = a == b
    return out


@pytest.mark.parametrize("name", sorted(ARGS))
def test_each_shape_behaves_as_the_standard_library_makes_it(name: str) -> None:
    for args in ARGS[name]:
        std, fast = _behaviour(STD[name], args), _behaviour(FAST[name], args)
        assert fast == std, (name, args)
    assert FAST[name].__qualname__.endswith(name)


def test_frozen_hash_is_the_hash_of_the_hashed_fields() -> None:
    for args in ARGS["Frozen"]:
        assert hash(FAST["Frozen"](*args)) == hash(STD["Frozen"](*args))
        # fields with compare=False or hash=False are not hashed
        assert hash(FAST["Frozen"](*args, skip=5, nohash=6)) == hash(FAST["Frozen"](*args))


def test_a_recursive_repr_shows_dots() -> None:
    for family in (STD, FAST):
        n = family["Node"]()
        n.child = n
        assert repr(n).endswith("Node(child=...)")


def test_instances_of_different_classes_are_unequal_even_with_equal_fields() -> None:
    assert FAST["Derived"](1) != FAST["Plain"](1)
    assert (FAST["Plain"](1) == STD["Plain"](1)) is False


def test_the_package_uses_it() -> None:
    from logdoctor.events import Event
    from logdoctor.run.model import Run
    for cls in (Event, Run):
        assert cls.__repr__.__module__ == "logdoctor.records" and cls.__eq__.__module__ == "logdoctor.records"


def test_asdict_and_replace_give_what_the_standard_library_gives() -> None:
    for name, calls in ARGS.items():
        for args in calls:
            fast, std = FAST[name](*args), STD[name](*args)
            assert records.asdict(fast) == dataclasses.asdict(std), name
            assert dataclasses.asdict(fast) == dataclasses.asdict(std), name  # through __dataclass_fields__
            if name != "Late":  # init=False: neither takes it
                first = dataclasses.fields(STD[name])[0].name
                for made in (records.replace(fast, **{first: args[0]}), dataclasses.replace(fast, **{first: args[0]})):
                    assert type(made) is type(fast) and records.asdict(made) == records.asdict(fast)


def test_a_shape_it_does_not_handle_is_left_to_the_standard_library() -> None:
    @records.dataclass(order=True)
    class Ordered:
        a: int

    assert Ordered(1) < Ordered(2) and "__records_fields__" not in Ordered.__dict__
    with pytest.raises(TypeError, match="non-default argument"):
        @records.dataclass
        class Misordered:
            a: int = 0
            b: int  # type: ignore[misc]


def test_every_class_of_the_package_finds_its_init_built() -> None:
    """tools/build_records.py wrote the __init__ of every record class into records_built.py: none is compiled
    when the package is imported (the point of it), and the file is what the tool makes now."""
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, str(root / "tools" / "build_records.py"), "--check"],
                          capture_output=True, text=True, cwd=root)
    assert done.returncode == 0, done.stderr
    code = ("import logdoctor.cli, logdoctor.parse.parse, logdoctor.diagnosis.ranking, logdoctor.records as r; "
            "missing = [t for t in r._SOURCES if t not in r._BUILT]; print(len(r._SOURCES)); assert not missing, missing")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 20

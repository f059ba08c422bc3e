"""The broad net's data: vocabulary terms, traceback-frame subsystems and category remedies (rules/net/).

The net (net.py) runs after the rules and places a failure no rule names. What it knows is data, like the
rules, and as untrusted as a user's rule file: files are read with the rules' bounded YAML reader, checked
against a schema, every regex is RE2 with the rules' size limits, and a whole net is bounded in terms and
subsystems. Layout of a net directory (`rules/net/` built in, `DIR/net/` of each `--rules DIR`):

    vocabulary/<library>.yaml   library, read, terms: [{id, text | regex, category, weight, severity, ...}]
                                (a term's own `library` names another printer kept in the same file)
    frames/<name>.yaml          frames, read, subsystems: [{id, path, function?, subsystem, category, ...}]
    categories.yaml             categories: {<category>: {headline, remedies}}
    stalls.yaml                 stalls: {<stage>: {category, weight, title, likely, remedies}}: what a log that
                                stops in that stage without an error usually means

A user file's term or subsystem with the id of a built-in one replaces it.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from logdoctor.diagnosis.rule_files import (
    RuleError,
    RuleFileError,
    find_rule_files,
    parse_rule_yaml,
    read_rule_text,
)
from logdoctor.diagnosis.rule_schema import line_for
from logdoctor.records import dataclass, field
from logdoctor.resources import builtin_rules_dir

CATEGORIES = ("memory_pressure", "ipc_bar", "graph_incompatibility", "communication", "unsupported",
              "environment", "configuration", "unknown")
STAGES = ("args", "init", "weights", "kv_pool", "graph_capture", "warmup", "runtime")
MAX_TERMS = 5_000
MAX_SUBSYSTEMS = 2_000
MAX_PATTERN_CHARS = 400

_TEXT = {"type": "string", "minLength": 1, "maxLength": 600}
_SOURCE_NOTE = {"type": "string", "minLength": 1, "maxLength": 2000}
_PHRASE = {"type": "string", "minLength": 3, "maxLength": MAX_PATTERN_CHARS}
_ID = {"type": "string", "pattern": "^[a-z0-9][a-z0-9_.-]{2,80}$"}
_READ = {"type": "array", "items": _SOURCE_NOTE, "minItems": 1, "maxItems": 50}
_REMEDY = {"type": "array", "items": _TEXT, "minItems": 1, "maxItems": 8}
_COMMON = {"id": _ID, "category": {"enum": list(CATEGORIES)}, "weight": {"type": "integer", "minimum": 0,
           "maximum": 100}, "means": _TEXT, "remedy": _REMEDY}
VOCABULARY_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["library", "read", "terms"],
    "properties": {
        "library": {"type": "string", "pattern": "^[a-z0-9_]{2,40}$"}, "read": _READ,
        "terms": {"type": "array", "maxItems": MAX_TERMS, "items": {
            "type": "object", "additionalProperties": False,
            "required": ["id", "category", "weight", "severity", "means", "source", "example"],
            "oneOf": [{"required": ["text"]}, {"required": ["regex"]}],
            "properties": {**_COMMON, "text": _PHRASE, "regex": _PHRASE,
                           "library": {"type": "string", "pattern": "^[a-z0-9_]{2,40}$"},
                           "kinds": {"type": "array", "items": {"type": "string", "pattern": "^[a-z_]{2,40}$"},
                                     "minItems": 1, "maxItems": 40},
                           "weight": {"type": "integer", "minimum": 1, "maximum": 100},
                           "severity": {"enum": ["error", "warning"]}, "source": _TEXT,
                           "example": {"type": "string", "minLength": 3, "maxLength": 4000},
                           "subsumed_by": {"type": "array", "items": _ID, "maxItems": 20}}}},
    },
}
FRAMES_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["frames", "read", "subsystems"],
    "properties": {
        "frames": {"type": "string", "pattern": "^[a-z0-9_]{2,40}$"}, "read": _READ,
        "subsystems": {"type": "array", "maxItems": MAX_SUBSYSTEMS, "items": {
            "type": "object", "additionalProperties": False,
            "required": ["id", "path", "subsystem", "category", "weight", "means"],
            "properties": {**_COMMON, "path": _PHRASE, "subsystem": _TEXT, "eras": _TEXT,
                           "function": {"oneOf": [_PHRASE, {"type": "array", "items": _PHRASE, "minItems": 1,
                                                            "maxItems": 40}]},
                           "stage": {"enum": list(STAGES)}}}},
    },
}
STALLS_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["stalls"],
    "properties": {"stalls": {"type": "object", "additionalProperties": False, "properties": {
        st: {"type": "object", "additionalProperties": False,
             "required": ["category", "weight", "title", "likely", "remedies"],
             "properties": {"category": {"enum": list(CATEGORIES)}, "weight": {"type": "integer", "minimum": 1,
                                                                          "maximum": 100},
                            "title": _TEXT, "likely": _TEXT, "remedies": _REMEDY}} for st in STAGES}}},
}
CATEGORIES_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["categories"],
    "properties": {"categories": {"type": "object", "additionalProperties": False, "properties": {
        c: {"type": "object", "additionalProperties": False, "required": ["headline", "remedies"],
            "properties": {"headline": _TEXT, "remedies": _REMEDY}} for c in CATEGORIES}}},
}


@dataclass(frozen=True)
class Term:
    """A phrase that points to a category wherever it is printed."""
    id: str
    library: str
    category: str
    weight: int
    severity: str
    means: str
    source: str
    example: str
    text: str | None                   # lower-cased substring, or None when `regex` is used
    regex: str | None
    kinds: frozenset[str] | None
    remedy: tuple[str, ...]
    subsumed_by: tuple[str, ...]
    path: str
    line: int


@dataclass(frozen=True)
class Subsystem:
    """A source path (and functions) whose frames place a traceback in a subsystem and a stage."""
    id: str
    group: str
    path_part: str
    functions: frozenset[str] | None
    subsystem: str
    category: str
    weight: int
    stage: str | None
    means: str
    remedy: tuple[str, ...]
    path: str
    line: int


@dataclass
class NetData:
    terms: list[Term] = field(default_factory=list)
    subsystems: list[Subsystem] = field(default_factory=list)
    headlines: dict[str, str] = field(default_factory=dict)
    remedies: dict[str, tuple[str, ...]] = field(default_factory=dict)
    read: dict[str, list[str]] = field(default_factory=dict)   # library / frames group -> sources read
    stalls: dict[str, dict[str, Any]] = field(default_factory=dict)  # stage -> what a hang there usually is


def _validator(schema: dict[str, Any]) -> Any:
    import jsonschema
    return jsonschema.Draft202012Validator(schema)


@lru_cache(maxsize=1)
def _validators() -> dict[str, Any]:
    return {"vocabulary": _validator(VOCABULARY_SCHEMA), "frames": _validator(FRAMES_SCHEMA),
            "categories": _validator(CATEGORIES_SCHEMA), "stalls": _validator(STALLS_SCHEMA)}


def _kind_of(data: Any) -> str | None:
    if isinstance(data, dict):
        for key, kind in (("terms", "vocabulary"), ("subsystems", "frames"), ("categories", "categories"),
                          ("stalls", "stalls")):
            if key in data:
                return kind
    return None


def _schema_problem(kind: str, data: Any, lines: dict[str, int]) -> tuple[int, str] | None:
    errors = list(_validators()[kind].iter_errors(data))
    if not errors:
        return None
    e = min(errors, key=lambda err: (line_for(lines, list(err.absolute_path)), len(err.absolute_path)))
    while e.validator in ("oneOf", "anyOf") and e.context:
        e = min(e.context, key=lambda c: len(c.absolute_path))
    where = "/".join(str(p) for p in e.absolute_path) or "(top level)"
    msg = e.message if len(e.message) <= 160 else e.message[:159] + "…"
    if e.validator == "oneOf":
        msg = "give exactly one of `text` or `regex`"
    return line_for(lines, list(e.absolute_path)), f"{where}: {msg}"


def _compile(pattern: str, where: str) -> None:
    from logdoctor.diagnosis.rules import compile_regex
    try:
        compile_regex(pattern)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def read_file(path: Path) -> tuple[str, dict[str, Any], dict[str, int]]:
    """(kind, data, lines) of one schema-checked net file; RuleError naming file:line otherwise."""
    try:
        data, lines = parse_rule_yaml(read_rule_text(path))
    except RuleFileError as e:
        raise RuleError(path, e.line, e.message) from None
    kind = _kind_of(data)
    if kind is None:
        raise RuleError(path, 1, "not a net file: it needs `terms` (vocabulary), `subsystems` (frames), "
                                 "`categories` or `stalls`")
    problem = _schema_problem(kind, data, lines)
    if problem is not None:
        raise RuleError(path, problem[0], problem[1])
    items = data.get("terms") or data.get("subsystems") or []
    for i, item in enumerate(items):
        for key in ("regex",):
            if key in item:
                try:
                    _compile(item[key], f"{'terms' if kind == 'vocabulary' else 'subsystems'}/{i}/{key}")
                except ValueError as e:
                    raise RuleError(path, line_for(lines, ["terms", i, key]), str(e)) from None
    return kind, data, lines


def _add(net: NetData, kind: str, data: dict[str, Any], lines: dict[str, int], path: Path) -> None:
    where = str(path)
    if kind == "vocabulary":
        lib = data["library"]
        net.read[lib] = list(data["read"])
        for i, t in enumerate(data["terms"]):
            net.terms.append(Term(
                t["id"], t.get("library", lib), t["category"], t["weight"], t["severity"], t["means"], t["source"], t["example"],
                t["text"].lower() if "text" in t else None, t.get("regex"),
                frozenset(t["kinds"]) if "kinds" in t else None, tuple(t.get("remedy", ())),
                tuple(t.get("subsumed_by", ())), where, line_for(lines, ["terms", i])))
    elif kind == "frames":
        group = data["frames"]
        net.read["frames:" + group] = list(data["read"])
        for i, s in enumerate(data["subsystems"]):
            fn = s.get("function")
            fns = frozenset([fn] if isinstance(fn, str) else fn) if fn is not None else None
            net.subsystems.append(Subsystem(
                s["id"], group, s["path"].replace("\\", "/"), fns, s["subsystem"], s["category"], s["weight"],
                s.get("stage"), s["means"], tuple(s.get("remedy", ())), where, line_for(lines, ["subsystems", i])))
    elif kind == "stalls":
        net.stalls.update(data["stalls"])
    else:
        for cat, info in data["categories"].items():
            net.headlines[cat] = info["headline"]
            net.remedies[cat] = tuple(info["remedies"])


def _dedupe(items: list[Any], what: str) -> tuple[list[Any], list[RuleError]]:
    """Later files override earlier ones by id; the same id twice within one source set is a problem."""
    by_id: dict[str, Any] = {}
    problems: list[RuleError] = []
    for item in items:
        old = by_id.get(item.id)
        if old is not None and Path(old.path).parent.parent == Path(item.path).parent.parent:
            problems.append(RuleError(item.path, item.line, f"duplicate {what} id {item.id} (also in {old.path}:"
                                                            f"{old.line})"))
            continue
        by_id[item.id] = item
    return list(by_id.values()), problems


def check_net_dir(directory: Path, into: NetData | None = None) -> tuple[NetData, list[RuleError]]:
    """Load every net file under `directory` (a `net/` folder) into `into`; problems are returned.

    Parsed, checked files are cached like rule files (rules._cache_path: the user's private cache, keyed
    by every file's path, size and mtime), so a run does not pay for YAML, schema and RE2 checks again."""
    from logdoctor.diagnosis.rules import _cache_path, _read_cache, _write_cache
    net = into if into is not None else NetData()
    if not directory.is_dir():
        return net, []
    try:
        files, problems = find_rule_files(directory, skip_net=False)
    except RuleError as e:
        return net, [e]
    cache = _cache_path(files, "net")
    cached = _read_cache(cache)
    fresh: dict[str, Any] = {}
    for path in files:
        entry = cached.get(str(path))
        if entry is not None and entry.get("kind") in ("vocabulary", "frames", "categories", "stalls"):
            kind, data, lines = entry["kind"], entry["data"], entry["lines"]
        else:
            try:
                kind, data, lines = read_file(path)
            except RuleError as e:
                problems.append(e)
                continue
            except RecursionError:
                problems.append(RuleError(path, 1, "structure nested too deeply"))
                continue
        fresh[str(path)] = {"kind": kind, "data": data, "lines": lines}
        try:
            _add(net, kind, data, lines, path)
        except (KeyError, TypeError, AttributeError):  # a damaged cache entry of the right shape
            problems.append(RuleError(path, 1, "cached copy unreadable: run again"))
            fresh.pop(str(path), None)
    if not problems and fresh.keys() != cached.keys():
        _write_cache(cache, fresh)
    net.terms, p1 = _dedupe(net.terms, "term")
    net.subsystems, p2 = _dedupe(net.subsystems, "subsystem")
    problems += p1 + p2
    if len(net.terms) > MAX_TERMS or len(net.subsystems) > MAX_SUBSYSTEMS:
        problems.append(RuleError(directory, 1, f"{len(net.terms)} terms and {len(net.subsystems)} subsystems; a "
                                                f"net may hold {MAX_TERMS} and {MAX_SUBSYSTEMS}"))
    return net, problems


def builtin_net_dir() -> Path:
    return builtin_rules_dir() / "net"


@lru_cache(maxsize=8)
def load_net(extra_dirs: tuple[str, ...] = ()) -> NetData:
    """The built-in net, extended by each `--rules DIR`'s `net/` folder in order; RuleError on a problem."""
    from logdoctor.diagnosis.rules_built import shipped_net
    shipped = shipped_net()  # built ahead of time (tools/build_rules.py), when current
    net, problems = (shipped, []) if shipped is not None else check_net_dir(builtin_net_dir())
    if problems:
        p = problems[0]
        raise RuleError(p.path, p.line, "built-in net file invalid: " + p.message)
    for d in extra_dirs:
        net, problems = check_net_dir(Path(d) / "net", net)
        if problems:
            raise problems[0]
    return net


def summary(net: NetData) -> dict[str, Any]:
    """Counts by category, for `logdoctor rules check` and the docs."""
    by_cat: dict[str, dict[str, int]] = {c: {"terms": 0, "subsystems": 0} for c in CATEGORIES}
    for t in net.terms:
        by_cat[t.category]["terms"] += 1
    for s in net.subsystems:
        by_cat[s.category]["subsystems"] += 1
    return {"terms": len(net.terms), "subsystems": len(net.subsystems), "by_category": by_cat,
            "sources": net.read}


def main(argv: list[str] | None = None) -> int:
    """`python -m logdoctor.diagnosis.net_data [DIR]`: check a net directory (default: the built-in one)."""
    import sys
    args = sys.argv[1:] if argv is None else argv
    directory = Path(args[0]) if args else builtin_net_dir()
    net, problems = check_net_dir(directory)
    for p in problems:
        print(str(p))
    if problems:
        return 2
    print(json.dumps(summary(net)["by_category"]))
    print(f"{len(net.terms)} term(s), {len(net.subsystems)} subsystem(s) OK")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

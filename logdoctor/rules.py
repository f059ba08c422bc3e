"""Rule files: safe loading, schema validation, pattern compilation, `file:line: message` problems.

A rule is data only. YAML is read with a safe loader that refuses aliases (no alias bombs) and tags
that construct objects; files over `MAX_RULE_BYTES` are refused; regexes are compiled with RE2
(linear time: no catastrophic backtracking), so nothing in a rule file can run code or hang the tool.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from .literals import required_literals
from .resources import builtin_rules_dir

MAX_RULE_BYTES = 256 * 1024
CATEGORY_PREFIX = {
    "memory_pressure": "MEM", "ipc_bar": "IPC", "graph_incompatibility": "GRF", "communication": "COM",
    "unsupported": "UNS", "environment": "ENV", "configuration": "CFG", "unknown": "UNK",
}
CATEGORIES = tuple(CATEGORY_PREFIX)


class RuleError(Exception):
    def __init__(self, path: Path | str, line: int, message: str) -> None:
        super().__init__(f"{path}:{line}: {message}")
        self.path, self.line, self.message = str(path), line, message


@dataclass
class Selection:
    name: str
    kinds: frozenset[str] | None
    where: dict[str, Any]
    any_of: list[dict[str, Any]]
    fuzzy: dict[str, Any] | None
    run: dict[str, Any] | None
    before: str | None
    after: str | None


@dataclass
class Rule:
    id: str
    name: str
    title: str
    category: str
    severity: str
    fatal: bool
    cascade: bool
    stall: bool
    priority: int
    confidence: float
    stage: str
    versions: str
    anchor: str | None
    selections: dict[str, Selection]
    condition: Any                      # compiled condition tree (see condition.py)
    condition_text: str
    explanation: str
    remedy: list[str]
    why: str
    references: list[str]
    examples: dict[str, list[str]]
    path: Path
    base_dir: Path = field(default_factory=Path)

    def example_paths(self, which: str) -> list[Path]:
        return [(self.base_dir / p).resolve() for p in self.examples.get(which, [])]


# ------------------------------------------------------------------------------------------------
# safe YAML with line numbers


def _load_yaml(path: Path) -> tuple[Any, dict[str, int]]:
    import yaml

    try:
        size = path.stat().st_size
    except OSError as e:
        raise RuleError(path, 1, f"cannot read: {e.strerror or e}") from None
    if size > MAX_RULE_BYTES:
        raise RuleError(path, 1, f"file is {size} bytes; rule files are limited to {MAX_RULE_BYTES}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise RuleError(path, 1, f"cannot read as UTF-8 text: {e}") from None
    loader_cls = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: 10x faster
    try:
        # aliases are refused before anything is built (no alias bombs)
        for event in yaml.parse(text, Loader=loader_cls):
            if isinstance(event, yaml.AliasEvent):
                line = event.start_mark.line + 1 if event.start_mark else 1
                raise RuleError(path, line, "aliases are not allowed in rule files")
        loader = loader_cls(text)
        try:
            node = loader.get_single_node()
            if node is None:
                raise RuleError(path, 1, "empty rule file")
            lines: dict[str, int] = {}
            _record_lines(node, "", lines)
            data = loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = (mark.line + 1) if mark else 1
        raise RuleError(path, line, (e.problem or e.context or "invalid YAML").strip()) from None
    except yaml.YAMLError as e:
        raise RuleError(path, 1, f"invalid YAML: {e}") from None
    return data, lines


def _record_lines(node: Any, prefix: str, lines: dict[str, int]) -> None:
    import yaml
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            key = f"{prefix}/{k.value}" if prefix else str(k.value)
            lines[key] = k.start_mark.line + 1
            _record_lines(v, key, lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            key = f"{prefix}/{i}"
            lines[key] = v.start_mark.line + 1
            _record_lines(v, key, lines)


@lru_cache(maxsize=1)
def _validator() -> Any:
    import jsonschema
    schema = json.loads((builtin_rules_dir() / "schema.json").read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(schema)


def _line_for(lines: dict[str, int], path_parts: list[Any]) -> int:
    parts = [str(p) for p in path_parts]
    while parts:
        key = "/".join(parts)
        if key in lines:
            return lines[key]
        parts.pop()
    return 1


# ------------------------------------------------------------------------------------------------
# compilation


def compile_regex(pattern: str) -> Any:
    """RE2 (linear-time) compile; raises ValueError with RE2's message."""
    import re2
    options = re2.Options()
    options.log_errors = False  # RE2 would print its own copy of the error on stderr
    try:
        return re2.compile(pattern, options)
    except Exception as e:  # re2.error, TypeError
        raise ValueError(f"bad regex {pattern!r}: {e}") from None


def _compile_matcher(m: Any, validate: bool = True) -> Any:
    """Copies a matcher; a regex is checked now (fresh files) and compiled when first used."""
    if isinstance(m, dict) and "regex" in m:
        m = dict(m)
        m["_rx"] = compile_regex(m["regex"]) if validate else None  # the key exists either way
        m["_lits"] = required_literals(m["regex"])  # a cheap `in` test before the regex
    return m


def _cheap_first(items: dict[str, Any]) -> dict[str, Any]:
    """Equality / range / kind checks before text scans: most events fail on the cheap ones."""
    def cost(kv: tuple[str, Any]) -> int:
        m = kv[1]
        return 1 if isinstance(m, dict) and ("regex" in m or "contains" in m) else 0
    return dict(sorted(items.items(), key=cost))


def _kinds_named(matchers: dict[str, Any]) -> frozenset[str] | None:
    """The event kinds a `kind:` pseudo-field check allows (None: any kind)."""
    m = matchers.get("kind")
    if isinstance(m, str):
        return frozenset([m])
    if isinstance(m, dict) and set(m) <= {"eq", "in"}:
        if "eq" in m and isinstance(m["eq"], str):
            return frozenset([m["eq"]])
        if "in" in m and all(isinstance(x, str) for x in m["in"]):
            return frozenset(m["in"])
    return None


def _compile_selection(name: str, spec: dict[str, Any], validate: bool = True) -> Selection:
    ev = spec.get("event")
    kinds = frozenset([ev] if isinstance(ev, str) else ev) if ev is not None else None
    where = _cheap_first({k: _compile_matcher(v, validate) for k, v in (spec.get("where") or {}).items()})
    any_of = [_cheap_first({k: _compile_matcher(v, validate) for k, v in alt.items()}) for alt in spec.get("any_of") or []]
    if kinds is None:
        # `kind:` checks in where / every any_of alternative narrow the events to scan
        named = _kinds_named(where)
        alts = [_kinds_named(alt) for alt in any_of]
        if named is not None:
            kinds = named
        elif any_of and all(a is not None for a in alts):
            kinds = frozenset().union(*alts)  # type: ignore[arg-type]
    run = {k: _compile_matcher(v, validate) for k, v in (spec.get("run") or {}).items()} if "run" in spec else None
    return Selection(name, kinds, where, any_of, spec.get("fuzzy"), run, spec.get("before"), spec.get("after"))


def load_rule(path: Path) -> Rule:
    data, lines = _read_validated(path)
    return _build(path, data, lines)


def _read_validated(path: Path) -> tuple[dict[str, Any], dict[str, int]]:
    data, lines = _load_yaml(path)
    if not isinstance(data, dict):
        raise RuleError(path, 1, "a rule file must be a mapping")
    errors = sorted(_validator().iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        where = "/".join(str(p) for p in e.absolute_path) or "(top level)"
        raise RuleError(path, _line_for(lines, list(e.absolute_path)), f"{where}: {_short(e.message)}")
    return data, lines


def _build(path: Path, data: dict[str, Any], lines: dict[str, int], validated: bool = False) -> Rule:
    """Cross-field checks and compilation (patterns, condition) of a schema-valid rule."""
    from .condition import parse_condition
    from .events import KINDS

    if path.stem != data["name"]:
        raise RuleError(path, lines.get("name", 1), f"name {data['name']!r} must equal the file name {path.stem!r}")
    prefix = CATEGORY_PREFIX[data["category"]]
    if not data["id"].startswith(prefix):
        raise RuleError(path, lines.get("id", 1), f"id {data['id']} must start with {prefix} for category {data['category']}")
    if path.parent.name in CATEGORY_PREFIX and path.parent.name != data["category"]:
        raise RuleError(path, lines.get("category", 1),
                        f"category {data['category']} does not match directory {path.parent.name}")
    selections: dict[str, Selection] = {}
    for name, spec in data["match"].items():
        ev = spec.get("event")
        for kind in ([ev] if isinstance(ev, str) else ev or []):
            if kind not in KINDS:
                raise RuleError(path, _line_for(lines, ["match", name, "event"]), f"unknown event kind {kind!r}")
        try:
            selections[name] = _compile_selection(name, spec, validate=not validated)
        except ValueError as e:
            raise RuleError(path, _line_for(lines, ["match", name]), str(e)) from None
        for ref in (spec.get("before"), spec.get("after")):
            if ref is not None and ref not in data["match"]:
                raise RuleError(path, _line_for(lines, ["match", name]), f"unknown selection {ref!r}")
    try:
        cond = parse_condition(data["condition"], set(selections))
    except ValueError as e:
        raise RuleError(path, lines.get("condition", 1), f"condition: {e}") from None
    anchor = data.get("anchor")
    if anchor is not None and anchor not in selections:
        raise RuleError(path, lines.get("anchor", 1), f"anchor {anchor!r} is not a selection")
    for key in ("explanation",):
        _check_template(path, lines.get(key, 1), data[key])
    for i, r in enumerate(data["remedy"]):
        _check_template(path, _line_for(lines, ["remedy", i]), r)
    severity = data["severity"]
    return Rule(
        id=data["id"], name=data["name"], title=data["title"], category=data["category"], severity=severity,
        fatal=bool(data.get("fatal", severity == "error")), cascade=bool(data.get("cascade", False)),
        stall=bool(data.get("stall", False)),
        priority=int(data.get("priority", 50)), confidence=float(data.get("confidence", 0.9)),
        stage=data.get("stage", "any"), versions=data.get("versions", ">=0.1"), anchor=anchor,
        selections=selections, condition=cond, condition_text=data["condition"],
        explanation=data["explanation"].strip(), remedy=[r.strip() for r in data["remedy"]],
        why=(data.get("why") or "").strip(), references=list(data.get("references") or []),
        examples={k: list(v) for k, v in data["examples"].items()}, path=path, base_dir=_base_dir(path),
    )


_FIELD = re.compile(r"\{([^{}]*)\}")
_FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*(?::[-+ #0]?\d*(?:\.\d+)?[dfgs%]?)?$")


def _check_template(path: Path, line: int, text: str) -> None:
    for m in _FIELD.finditer(text.replace("{{", "").replace("}}", "")):
        if not _FIELD_NAME.match(m.group(1)):
            raise RuleError(path, line, f"bad placeholder {{{m.group(1)}}}: use {{name}} or {{name:.2f}}")


def _base_dir(path: Path) -> Path:
    """Examples are paths relative to the repository / rules root's parent."""
    for parent in path.resolve().parents:
        if parent.name == "rules" or (parent / "schema.json").exists():
            return parent.parent
    return path.parent


def _short(msg: str, limit: int = 200) -> str:
    return msg if len(msg) <= limit else msg[: limit - 1] + "…"


# ------------------------------------------------------------------------------------------------
# rule sets


def rule_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        raise RuleError(directory, 1, "not a directory")
    return sorted(p for p in directory.rglob("*.y*ml") if p.is_file())


CACHE_FORMAT = 1


def _cache_path(files: list[Path]) -> Path | None:
    """A cache of parsed, schema-checked rule data, keyed by every file's path, size and mtime.

    It lives only in the user's private cache directory (see cachedir.py): an entry found there skips
    YAML parsing and schema validation, so it must be one this user wrote.
    """
    import zlib  # two CRC32s make a 64-bit key; hashlib costs more to import than the whole check

    from . import __version__
    from .cachedir import private_cache_dir
    parts = [__version__]
    schema = builtin_rules_dir() / "schema.json"
    for f in [schema, *files]:
        try:
            st = f.stat()
        except OSError:
            return None
        parts.append(f"{f.resolve()}\0{st.st_size}\0{st.st_mtime_ns}")
    directory = private_cache_dir()
    if directory is None:
        return None
    blob = "\n".join(parts).encode()
    key = f"{zlib.crc32(blob):08x}{zlib.crc32(blob[::-1]):08x}{len(files):04x}"
    return directory / f"rules-{key}.json"


def _read_cache(cache: Path | None) -> dict[str, Any]:
    """The cached entries by path; anything damaged or of another shape is a miss, never an error."""
    from .cachedir import read_private
    raw = read_private(cache) if cache is not None else None
    if raw is None:
        return {}
    try:
        doc = json.loads(raw)
    except ValueError:
        return {}
    if not isinstance(doc, dict) or doc.get("format") != CACHE_FORMAT or doc.get("key") != cache.name:
        return {}
    entries = doc.get("entries")
    if not isinstance(entries, dict):
        return {}
    return {path: e for path, e in entries.items() if _entry_shape_ok(e)}


def _entry_shape_ok(entry: Any) -> bool:
    if not isinstance(entry, dict) or not isinstance(entry.get("data"), dict):
        return False
    lines = entry.get("lines")
    return isinstance(lines, dict) and all(isinstance(v, int) and not isinstance(v, bool) for v in lines.values())


def _write_cache(cache: Path | None, entries: dict[str, Any]) -> None:
    from .cachedir import write_private
    if cache is not None:
        doc = {"format": CACHE_FORMAT, "key": cache.name, "entries": entries}
        write_private(cache, json.dumps(doc).encode("utf-8"))


def _from_cache(path: Path, entry: Any) -> tuple[Rule, dict[str, Any], dict[str, int]] | None:
    """A rule built from its cache entry, or None when the entry does not build (then the file is read)."""
    if entry is None:
        return None
    try:
        return _build(path, entry["data"], entry["lines"], validated=True), entry["data"], entry["lines"]
    except Exception:  # a stale or damaged entry must cost a re-read, not the command
        return None


def check_dir(directory: Path) -> tuple[list[Rule], list[RuleError]]:
    """Load every rule under `directory`; problems are returned, not raised."""
    rules: list[Rule] = []
    problems: list[RuleError] = []
    seen: dict[str, Path] = {}
    try:
        files = rule_files(directory)
    except RuleError as e:
        return [], [e]
    cache = _cache_path(files)
    cached = _read_cache(cache)
    fresh: dict[str, Any] = {}
    for path in files:
        try:
            hit = _from_cache(path, cached.get(str(path)))
            if hit is not None:  # patterns were checked when the entry was cached
                rule, data, lines = hit
            else:
                data, lines = _read_validated(path)
                rule = _build(path, data, lines)
            fresh[str(path)] = {"data": data, "lines": lines}
        except RuleError as e:
            problems.append(e)
            continue
        except RecursionError:
            problems.append(RuleError(path, 1, "structure nested too deeply"))
            continue
        if rule.id in seen:
            problems.append(RuleError(path, 1, f"duplicate id {rule.id} (also in {seen[rule.id]})"))
            continue
        seen[rule.id] = path
        rules.append(rule)
    if not problems and fresh.keys() != cached.keys():
        _write_cache(cache, fresh)
    return rules, problems


@lru_cache(maxsize=1)
def builtin_rules() -> tuple[Rule, ...]:
    rules, problems = check_dir(builtin_rules_dir())
    if problems:
        raise RuleError(problems[0].path, problems[0].line, "built-in rule invalid: " + problems[0].message)
    return tuple(rules)


def load_ruleset(extra_dirs: list[str] | tuple[str, ...] = ()) -> list[Rule]:
    """Built-ins, then each `--rules DIR` in order; a user rule with the same id or name overrides."""
    by_id: dict[str, Rule] = {r.id: r for r in builtin_rules()}
    for d in extra_dirs:
        rules, problems = check_dir(Path(d))
        if problems:
            raise problems[0]
        for r in rules:
            for old in [k for k, v in by_id.items() if v.name == r.name]:
                del by_id[old]
            by_id[r.id] = r
    return list(by_id.values())

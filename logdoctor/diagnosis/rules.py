"""Rule files: safe loading, schema validation, pattern compilation, `file:line: message` problems.

A rule is data only, and a rule file may come from a stranger. The file is read with hard bounds and
parsed to plain data (rule_files.py: no aliases, no tags, no timestamps, bounded numbers); every regex,
wherever it sits in a matcher, is compiled with RE2 (linear time: no catastrophic backtracking) and what
the rule costs per event is counted against limits (rule_cost.py); templates are checked (templates.py).
So nothing in a rule file can run code, hang the tool or make it grow without bound. Problems name the
file and line and quote the file only once it is recognisably a rule (it may be a symlink to a secret).
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from logdoctor.diagnosis import rule_cost
from logdoctor.diagnosis.literals import required_literals
from logdoctor.diagnosis.rule_files import (
    MAX_RULE_BYTES,
    RuleError,
    RuleFileError,
    find_rule_files,
    parse_rule_yaml,
    read_rule_text,
)
from logdoctor.diagnosis.rule_schema import line_for as _line_for
from logdoctor.diagnosis.rule_schema import schema_problem
from logdoctor.diagnosis.templates import template_problem
from logdoctor.records import dataclass, field
from logdoctor.resources import builtin_rules_dir

if TYPE_CHECKING:  # net_data is imported when the rules are loaded, not with this module
    from logdoctor.diagnosis.net_data import NetData

__all__ = ["MAX_RULE_BYTES", "Rule", "RuleError", "RuleSet", "Selection", "check_dir", "load_rule", "load_ruleset"]
CATEGORY_PREFIX = {
    "memory_pressure": "MEM", "ipc_bar": "IPC", "graph_incompatibility": "GRF", "communication": "COM",
    "unsupported": "UNS", "environment": "ENV", "configuration": "CFG", "unknown": "UNK",
}
CATEGORIES = tuple(CATEGORY_PREFIX)


# (field path, case-insensitive, literals): a matching event's field holds one of the literals
LiteralNeed = tuple[str, bool, tuple[str, ...]]


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
    # Derived, for engine.EventIndex.candidates_for: what every matching event must have, so whole kinds of
    # events (2,000 NCCL INFO lines) are passed over at once — the literals of `where` and of each `any_of`
    # alternative, and the values a `where` field must equal.
    needs: tuple[LiteralNeed, ...] = field(init=False, repr=False, compare=False)
    alt_needs: tuple[tuple[LiteralNeed, ...], ...] = field(init=False, repr=False, compare=False)
    equals: tuple[tuple[str, frozenset[str]], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.needs = _literal_needs(self.where)
        self.alt_needs = tuple(_literal_needs(alt) for alt in self.any_of)
        self.equals = _equal_needs(self.where)


def _literal_needs(matchers: dict[str, Any]) -> tuple[LiteralNeed, ...]:
    """What engine.match_value requires of a field's text: a regex's literals (`_lits`), a `contains`."""
    needs: list[LiteralNeed] = []
    for path, m in matchers.items():
        if not isinstance(m, dict):
            continue
        lits = m.get("_lits") if "regex" in m else None
        if lits is not None:
            needs.append((path, bool(lits[0]), tuple(lits[1])))
        if isinstance(m.get("contains"), str):
            needs.append((path, False, (m["contains"],)))
    return tuple(needs)


def _equal_needs(matchers: dict[str, Any]) -> tuple[tuple[str, frozenset[str]], ...]:
    """Fields that must equal one of some strings (`level: WARN`, `{in: [E, F]}`): engine.match_value compares
    a string matcher with str(value), so events can be grouped by str(value)."""
    out: list[tuple[str, frozenset[str]]] = []
    for path, m in matchers.items():
        if isinstance(m, dict) and set(m) == {"eq"}:
            m = m["eq"]
        if isinstance(m, str):
            out.append((path, frozenset([m])))
        elif isinstance(m, dict) and set(m) == {"in"} and isinstance(m["in"], list) and m["in"] \
                and all(isinstance(x, str) for x in m["in"]):
            out.append((path, frozenset(m["in"])))
    return tuple(out)


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
    cost: rule_cost.Cost = field(default_factory=rule_cost.Cost)  # per event, counted at load
    builtin: bool = False               # shipped with the package: trusted, not costed or timed
    inferred: bool = False              # made by the broad net (net.py) for one diagnosis, not read from a file

    def example_paths(self, which: str) -> list[Path]:
        return [(self.base_dir / p).resolve() for p in self.examples.get(which, [])]


# ------------------------------------------------------------------------------------------------
# safe YAML with line numbers


def _load_yaml(path: Path) -> tuple[Any, dict[str, int]]:
    try:
        return parse_rule_yaml(read_rule_text(path))
    except RuleFileError as e:
        raise RuleError(path, e.line, e.message) from None


# ------------------------------------------------------------------------------------------------
# compilation


def compile_regex(pattern: str, max_mem: int | None = None) -> Any:
    """RE2 (linear-time) compile with a bounded memory budget; ValueError for a bad or too large pattern.

    `max_mem`: the budget `regex_budget` settled on when the rule was loaded (kept in the built rule set):
    the pattern was checked then, and is compiled once, without asking RE2 for its program sizes again."""
    import re2
    options = re2.Options()
    options.log_errors = False  # RE2 would print its own copy of the error on stderr
    if max_mem is not None:
        options.max_mem = max_mem
        return re2.compile(pattern, options)
    return _checked(pattern, options)[0]


def regex_budget(pattern: str) -> tuple[Any, int]:
    """The compiled pattern (as compile_regex makes it) and the RE2 memory budget it was compiled with."""
    import re2
    options = re2.Options()
    options.log_errors = False
    return _checked(pattern, options)


def _checked(pattern: str, options: Any) -> tuple[Any, int]:
    import re2
    options.max_mem = rule_cost.REGEX_MIN_MEM
    try:
        rx = re2.compile(pattern, options)
    except Exception as e:  # re2.error, TypeError
        raise ValueError(f"bad regex {_clip(repr(pattern), 80)}: {_re2_message(e)}") from None
    size = max(rx.programsize, rx.reverseprogramsize)
    if size > rule_cost.MAX_REGEX_PROGRAM:
        raise ValueError(f"regex {_clip(repr(pattern), 60)} is too complex: {size} RE2 instructions, the limit "
                         f"is {rule_cost.MAX_REGEX_PROGRAM} (bound wide repetitions such as .{{0,1000}})")
    budget = rule_cost.regex_memory(size)
    if budget > options.max_mem:  # a large program needs a large DFA cache, or RE2 falls back to its NFA
        options.max_mem = budget
        rx = re2.compile(pattern, options)
    return rx, options.max_mem


def _re2_message(e: Exception) -> str:
    msg = e.args[0] if e.args else e
    return msg.decode("utf-8", "replace") if isinstance(msg, bytes) else str(msg)


def _compile_matcher(m: Any, validate: bool = True, depth: int = 0) -> Any:
    """Copies a matcher, compiling every regex in it, nested ones (`in: [{regex: ...}]`) included.

    validate=False (built-in rules from the cache) leaves `_rx` None: compiled when first used.
    """
    if not isinstance(m, dict):
        return m
    if depth >= rule_cost.MAX_MATCHER_DEPTH:
        raise ValueError(f"matchers nested more than {rule_cost.MAX_MATCHER_DEPTH} deep")
    m = dict(m)
    if "regex" in m:
        if validate:
            m["_rx"], m["_mem"] = regex_budget(m["regex"])
        else:
            m["_rx"] = None  # the key exists either way
        m["_lits"] = required_literals(m["regex"])  # a cheap `in` test before the regex
    for op in ("eq", "ne"):
        if isinstance(m.get(op), dict):
            m[op] = _compile_matcher(m[op], validate, depth + 1)
    if isinstance(m.get("in"), list):
        m["in"] = [_compile_matcher(x, validate, depth + 1) for x in m["in"]]
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
    def compiled(matchers: dict[str, Any]) -> dict[str, Any]:
        return {k: _compile_matcher(v, validate) for k, v in matchers.items()}

    ev = spec.get("event")
    kinds = frozenset([ev] if isinstance(ev, str) else ev) if ev is not None else None
    where = _cheap_first(compiled(spec.get("where") or {}))
    any_of = [_cheap_first(compiled(alt)) for alt in spec.get("any_of") or []]
    if kinds is None:
        # `kind:` checks in where / every any_of alternative narrow the events to scan
        named = _kinds_named(where)
        alts = [_kinds_named(alt) for alt in any_of]
        if named is not None:
            kinds = named
        elif any_of and all(a is not None for a in alts):
            kinds = frozenset().union(*alts)  # type: ignore[arg-type]
    run = compiled(spec.get("run") or {}) if "run" in spec else None
    return Selection(name, kinds, where, any_of, spec.get("fuzzy"), run, spec.get("before"), spec.get("after"))


def load_rule(path: Path) -> Rule:
    data, lines = _read_validated(path)
    return _build(path, data, lines)


def _read_validated(path: Path) -> tuple[dict[str, Any], dict[str, int]]:
    data, lines = _load_yaml(path)
    problem = schema_problem(data, lines)
    if problem is not None:
        raise RuleError(path, *problem)
    return data, lines


def _build(path: Path, data: dict[str, Any], lines: dict[str, int], validated: bool = False,
           cost: rule_cost.Cost | None = None) -> Rule:
    """Cross-field checks and compilation (patterns, condition, cost) of a schema-valid rule.

    `validated`: the data comes from the rules cache (schema-checked when cached). Only built-in rules
    then defer compiling their regexes to first use; any other rule is compiled and costed every load.
    `cost`: what the load that cached it counted (a built-in rule from the cache is not costed again), so a
    rule is the same whether the cache had it or not.
    """
    from logdoctor.diagnosis.condition import parse_condition
    from logdoctor.events import KINDS

    builtin = _is_builtin(path)
    lazy = validated and builtin

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
            selections[name] = _compile_selection(name, spec, validate=not lazy)
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
    if lazy:
        cost = cost if cost is not None else rule_cost.Cost()
    else:
        cost, problem, worst = rule_cost.rule_cost_problem(selections)
        if problem is not None:
            raise RuleError(path, _line_for(lines, ["match", worst] if worst else ["match"]), problem)
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
        cost=cost, builtin=builtin,
    )


def _check_template(path: Path, line: int, text: str) -> None:
    problem = template_problem(text)
    if problem is not None:
        raise RuleError(path, line, problem)


@lru_cache(maxsize=1)
def _builtin_root() -> Path:
    return builtin_rules_dir().resolve()


def _is_builtin(path: Path) -> bool:
    """A file or directory of the shipped rules (trusted: their cost is not counted against the limits)."""
    resolved = path.resolve()
    return resolved == _builtin_root() or _builtin_root() in resolved.parents


def _base_dir(path: Path) -> Path:
    """Examples are paths relative to the repository / rules root's parent."""
    for parent in path.resolve().parents:
        if parent.name == "rules" or (parent / "schema.json").exists():
            return parent.parent
    return path.parent


def _clip(msg: str, limit: int = 200) -> str:
    return msg if len(msg) <= limit else msg[: limit - 1] + "…"


# ------------------------------------------------------------------------------------------------
# rule sets


CACHE_FORMAT = 2  # 2: regex literals read through groups and inline flags (literals.py)


def _cache_path(files: list[Path], what: str = "rules") -> Path | None:
    """A cache of parsed, schema-checked rule data, keyed by every file's path, size and mtime.

    It lives only in the user's private cache directory (see cachedir.py): an entry found there skips
    YAML parsing and schema validation, so it must be one this user wrote.
    """
    import zlib  # two CRC32s make a 64-bit key; hashlib costs more to import than the whole check

    from logdoctor import __version__
    from logdoctor.cachedir import private_cache_dir
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
    return directory / f"{what}-{key}.json"


def _read_cache(cache: Path | None) -> dict[str, Any]:
    """The cached entries by path; anything damaged or of another shape is a miss, never an error."""
    from logdoctor.cachedir import read_private
    if cache is None:
        return {}
    raw = read_private(cache)
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
    from logdoctor.cachedir import prune, write_private
    if cache is not None:
        doc = {"format": CACHE_FORMAT, "key": cache.name, "entries": entries}
        write_private(cache, json.dumps(doc).encode("utf-8"))
        prune(cache.parent, cache.name.split("-", 1)[0] + "-")  # older entries of this kind beyond the bound


def _from_cache(path: Path, entry: Any) -> tuple[Rule, dict[str, Any], dict[str, int]] | None:
    """A rule built from its cache entry, or None when the entry does not build (then the file is read)."""
    if entry is None:
        return None
    try:
        cost = rule_cost.Cost(*(int(n) for n in entry["cost"]))
        return (_build(path, entry["data"], entry["lines"], validated=True, cost=cost), entry["data"],
                entry["lines"])
    except Exception:  # a stale or damaged entry (one of an older version: no cost) must cost a re-read
        return None


def check_dir(directory: Path) -> tuple[list[Rule], list[RuleError]]:
    """Load every rule under `directory`; problems are returned, not raised."""
    rules: list[Rule] = []
    seen: dict[str, Path] = {}
    try:
        files, problems = find_rule_files(directory)
    except RuleError as e:
        return [], [e]
    cache = _cache_path(files)
    cached = _read_cache(cache)
    fresh: dict[str, Any] = {}
    missed = False
    for path in files:
        try:
            hit = _from_cache(path, cached.get(str(path)))
            if hit is not None:  # patterns were checked when the entry was cached
                rule, data, lines = hit
            else:
                missed = True
                data, lines = _read_validated(path)
                rule = _build(path, data, lines)
            fresh[str(path)] = {"data": data, "lines": lines, "cost": [rule.cost.units, rule.cost.regexes]}
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
    if not problems and (missed or fresh.keys() != cached.keys()):
        _write_cache(cache, fresh)
    if not _is_builtin(directory):
        problem = _user_rules_problem(rules)
        if problem is not None:
            problems.append(RuleError(directory, 1, problem))
    return rules, problems


def _user_rules_problem(rules: list[Rule]) -> str | None:
    """All user rules together must stay within the cost and regex limits (rule_cost.py)."""
    total = rule_cost.Cost()
    for r in rules:
        if not _is_builtin(r.path):
            total.add(r.cost)
    return rule_cost.user_rules_problem(total.units, total.regexes)


@lru_cache(maxsize=1)
def builtin_rules() -> tuple[Rule, ...]:
    from logdoctor.diagnosis.rules_built import shipped_rules
    shipped = shipped_rules()  # built ahead of time (tools/build_rules.py), when current
    if shipped is not None:
        return shipped
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
    problem = _user_rules_problem(list(by_id.values())) if extra_dirs else None
    if problem is not None:
        raise RuleError(", ".join(extra_dirs), 1, problem)
    if not extra_dirs:  # the built-in net cannot be invalid: it is loaded when a log first needs it
        return RuleSet(by_id.values(), net_dirs=())
    from logdoctor.diagnosis.net_data import load_net
    return RuleSet(by_id.values(), net=load_net(tuple(str(d) for d in extra_dirs)))  # a user's net: checked now


class RuleSet(list[Rule]):
    """The rules of one run and the broad net's data (built-in + each `--rules DIR/net/`) beside them.

    The net is consulted only when the rules leave a failure's cause unnamed, so it may be given as the
    directories to load it from (`net_dirs`, see net_data.load_net), loaded on first use."""

    def __init__(self, rules: Iterable[Rule] = (), net: NetData | None = None,
                 net_dirs: tuple[str, ...] | None = None) -> None:
        super().__init__(rules)
        self._net = net
        self._net_dirs = net_dirs

    @property
    def net(self) -> NetData | None:
        if self._net is None and self._net_dirs is not None:
            from logdoctor.diagnosis.net_data import load_net
            self._net = load_net(self._net_dirs)
        return self._net

    @net.setter
    def net(self, value: NetData | None) -> None:
        self._net = value

    def __reduce__(self) -> tuple[type[RuleSet], tuple[list[Rule], NetData | None]]:  # workers receive it pickled
        return (RuleSet, (list(self), self.net))

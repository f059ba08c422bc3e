"""The built-in rules and broad net, built ahead of time and shipped beside the code.

Building the built-ins from their YAML costs every run tens of milliseconds even from the private cache
(conditions parsed, regex literals worked out, 140 files' data decoded), and a few hundred on the first run
after install (YAML and schema checks). `tools/build_rules.py` writes every built Rule as plain data into
`logdoctor/diagnosis/rules_shipped.py` (a module of literals: loaded from its compiled form, about twice as
fast as decoding the same data as JSON, and the rules are read by every run) and the built-in net into
`rules/built-net.json` (read only by the runs that need the net), so a run only turns lists back into objects.
Each is used only when its digest matches the files it was built from — the schema and every built-in rule
file, or every net file, by content — and this module's format; otherwise (a rule being edited) the files
are read as before. Both hold only data: nothing loaded from them runs code; regexes are compiled with RE2
when first used, as for built-in rules read from the cache.
"""
from __future__ import annotations

import json
import os
import zlib
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from logdoctor.diagnosis.condition import BoolOp, Name, Node, Not, Quant
from logdoctor.diagnosis.rule_cost import Cost
from logdoctor.diagnosis.rule_files import find_rule_files
from logdoctor.diagnosis.rules import Rule, Selection, _base_dir, regex_budget
from logdoctor.resources import builtin_rules_dir

if TYPE_CHECKING:  # the net's classes: imported by the runs that load the net
    from logdoctor.diagnosis.net_data import NetData

BUILT_FORMAT = 1
BUILT_RULES = "rules_shipped.py"  # a module of logdoctor.diagnosis (the rules' build is read by every run)
BUILT_NET = "built-net.json"   # beside the rule files, apart: most logs are named by a rule and never need the net


def source_files(rules_dir: Path, name: str) -> list[Path]:
    """What the build `name` is made of, sorted as loaded: for the rules the schema and every rule file, for
    the net every net file (each build is checked against its own files: the net's are four fifths of the
    bytes, and most runs never load it)."""
    if name == BUILT_RULES:
        rules, _ = find_rule_files(rules_dir)
        return [rules_dir / "schema.json", *rules]
    net_dir = rules_dir / "net"
    net, _ = find_rule_files(net_dir, skip_net=False) if net_dir.is_dir() else ([], [])
    return net


def digest(rules_dir: Path, name: str) -> str:
    """The names and contents of the files of the build `name`, checksummed: it changes whenever one does."""
    crc, adler, size = 0, 1, 0
    root = str(rules_dir) + os.sep
    for path in source_files(rules_dir, name):
        p = str(path)  # found under rules_dir, so its text starts with it (os-level: ~100 files, every run)
        label = (p[len(root):] if p.startswith(root) else path.relative_to(rules_dir).as_posix())
        label_bytes = label.replace(os.sep, "/").encode() + b"\0"
        with open(p, "rb", buffering=0) as f:
            data = f.read()
        for chunk in (label_bytes, data):
            crc, adler = zlib.crc32(chunk, crc), zlib.adler32(chunk, adler)
        size += len(data)
    return f"{crc:08x}{adler:08x}-{size}"


# ------------------------------------------------------------------------------------------------
# to plain data


def _condition_data(node: Node) -> list[Any]:
    if isinstance(node, Name):
        return ["name", node.name]
    if isinstance(node, Quant):
        return ["quant", node.quant, list(node.names)]
    if isinstance(node, Not):
        return ["not", _condition_data(node.arg)]
    return ["op", node.op, [_condition_data(a) for a in node.args]]


def _matcher_data(m: Any) -> Any:
    if not isinstance(m, dict):
        return m
    out: dict[str, Any] = {}
    for k, v in m.items():
        if k == "_rx":
            out[k] = None  # compiled on first use (engine.match_value), once, with the budget found here
            out["_mem"] = m["_mem"] if "_mem" in m else regex_budget(m["regex"])[1]
        elif k == "_mem":
            continue
        elif k == "_lits":
            out[k] = None if v is None else [v[0], list(v[1])]
        elif k in ("eq", "ne") and isinstance(v, dict):
            out[k] = _matcher_data(v)
        elif k == "in" and isinstance(v, list):
            out[k] = [_matcher_data(x) for x in v]
        else:
            out[k] = v
    return out


def _selection_data(s: Selection) -> dict[str, Any]:
    def matchers(d: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if d is None else {k: _matcher_data(v) for k, v in d.items()}
    return {"name": s.name, "kinds": None if s.kinds is None else sorted(s.kinds), "where": matchers(s.where),
            "any_of": [matchers(a) for a in s.any_of], "fuzzy": s.fuzzy, "run": matchers(s.run),
            "before": s.before, "after": s.after}


def _rule_data(r: Rule, rules_dir: Path) -> dict[str, Any]:
    return {
        "id": r.id, "name": r.name, "title": r.title, "category": r.category, "severity": r.severity,
        "fatal": r.fatal, "cascade": r.cascade, "stall": r.stall, "priority": r.priority,
        "confidence": r.confidence, "stage": r.stage, "versions": r.versions, "anchor": r.anchor,
        "selections": [_selection_data(s) for s in r.selections.values()],
        "condition": _condition_data(r.condition), "condition_text": r.condition_text,
        "explanation": r.explanation, "remedy": r.remedy, "why": r.why, "references": r.references,
        "examples": r.examples, "path": r.path.relative_to(rules_dir).as_posix(),
        "cost": [r.cost.units, r.cost.regexes],
    }


def _net_data(net: NetData, net_dir: Path) -> dict[str, Any]:
    def rel(path: str) -> str:
        return Path(path).relative_to(net_dir).as_posix()
    terms = [[t.id, t.library, t.category, t.weight, t.severity, t.means, t.source, t.example, t.text, t.regex,
              None if t.kinds is None else sorted(t.kinds), list(t.remedy), list(t.subsumed_by), rel(t.path), t.line]
             for t in net.terms]
    subsystems = [[s.id, s.group, s.path_part, None if s.functions is None else sorted(s.functions), s.subsystem,
                   s.category, s.weight, s.stage, s.means, list(s.remedy), rel(s.path), s.line]
                  for s in net.subsystems]
    return {"terms": terms, "subsystems": subsystems, "headlines": net.headlines,
            "remedies": {k: list(v) for k, v in net.remedies.items()}, "read": net.read, "stalls": net.stalls}


def build(rules_dir: Path) -> dict[str, str]:
    """The texts of the built-in rule set's module and the net's JSON read from `rules_dir`, by file name
    (tools/build_rules.py)."""
    from logdoctor.diagnosis.net_data import check_net_dir
    from logdoctor.diagnosis.rules import check_dir
    rules, problems = check_dir(rules_dir)
    net, net_problems = check_net_dir(rules_dir / "net")
    if problems or net_problems:
        raise (problems + net_problems)[0]
    net_doc = {"format": BUILT_FORMAT, "digest": digest(rules_dir, BUILT_NET), "net": _net_data(net, rules_dir / "net")}
    return {BUILT_RULES: _rules_module(digest(rules_dir, BUILT_RULES), [_rule_data(r, rules_dir) for r in rules]),
            BUILT_NET: json.dumps(net_doc, ensure_ascii=False, separators=(",", ":")) + "\n"}


def _rules_module(digest_text: str, rules: list[dict[str, Any]]) -> str:
    """The module of the built rules: a literal per rule (repr of JSON-like data is Python source)."""
    return ('"""The built-in rules, built from rules/ (the schema and every rule file) by tools/build_rules.py.\n\n'
            "Generated: do not edit; run the tool after changing anything under rules/. Plain data, used only while\n"
            'DIGEST matches the rule files (logdoctor/diagnosis/rules_built.py).\n"""\n\n'
            f"FORMAT = {BUILT_FORMAT!r}\nDIGEST = {digest_text!r}\nRULES = [\n"
            + "".join(f"    {r!r},\n" for r in rules) + "]\n")


# ------------------------------------------------------------------------------------------------
# back to objects


def _condition(d: list[Any]) -> Node:
    tag = d[0]
    if tag == "name":
        return Name(d[1])
    if tag == "quant":
        return Quant(d[1], tuple(d[2]))
    if tag == "not":
        return Not(_condition(d[1]))
    return BoolOp(d[1], tuple(_condition(a) for a in d[2]))


def _matcher(m: Any) -> Any:
    if not isinstance(m, dict):
        return m
    m = dict(m)
    lits = m.get("_lits")
    if lits is not None:
        m["_lits"] = (lits[0], tuple(lits[1]))
    for op in ("eq", "ne"):
        if isinstance(m.get(op), dict):
            m[op] = _matcher(m[op])
    if isinstance(m.get("in"), list):
        m["in"] = [_matcher(x) for x in m["in"]]
    return m


def _selection(d: dict[str, Any]) -> Selection:
    def matchers(x: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if x is None else {k: _matcher(v) for k, v in x.items()}
    kinds = d["kinds"]
    return Selection(d["name"], None if kinds is None else frozenset(kinds), matchers(d["where"]) or {},
                     [matchers(a) or {} for a in d["any_of"]], d["fuzzy"], matchers(d["run"]), d["before"], d["after"])


def _rules(docs: list[dict[str, Any]], rules_dir: Path) -> tuple[Rule, ...]:
    base_dirs: dict[str, Path] = {}
    out: list[Rule] = []
    for d in docs:
        path = rules_dir / d["path"]
        folder = d["path"].rpartition("/")[0]
        if folder not in base_dirs:
            base_dirs[folder] = _base_dir(path)
        out.append(Rule(
            id=d["id"], name=d["name"], title=d["title"], category=d["category"], severity=d["severity"],
            fatal=d["fatal"], cascade=d["cascade"], stall=d["stall"], priority=d["priority"],
            confidence=d["confidence"], stage=d["stage"], versions=d["versions"], anchor=d["anchor"],
            selections={s["name"]: _selection(s) for s in d["selections"]}, condition=_condition(d["condition"]),
            condition_text=d["condition_text"], explanation=d["explanation"], remedy=d["remedy"], why=d["why"],
            references=d["references"], examples=d["examples"], path=path, base_dir=base_dirs[folder],
            cost=Cost(*d["cost"]), builtin=True))
    return tuple(out)


def _net(d: dict[str, Any], net_dir: Path) -> NetData:
    from logdoctor.diagnosis.net_data import NetData, Subsystem, Term
    paths: dict[str, str] = {}  # a few files hold all the terms

    def path(rel: str) -> str:
        p = paths.get(rel)
        if p is None:
            p = paths[rel] = str(net_dir / rel)
        return p
    terms = [Term(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9],
                  None if t[10] is None else frozenset(t[10]), tuple(t[11]), tuple(t[12]), path(t[13]), t[14])
             for t in d["terms"]]
    subsystems = [Subsystem(s[0], s[1], s[2], None if s[3] is None else frozenset(s[3]), s[4], s[5], s[6], s[7], s[8],
                            tuple(s[9]), path(s[10]), s[11])
                  for s in d["subsystems"]]
    return NetData(terms, subsystems, dict(d["headlines"]), {k: tuple(v) for k, v in d["remedies"].items()},
                   {k: list(v) for k, v in d["read"].items()}, dict(d["stalls"]))


def _read(name: str, rules_dir: Path, key: str) -> Any:
    doc = json.loads((rules_dir / name).read_bytes())
    if doc.get("format") != BUILT_FORMAT or doc.get("digest") != _digest_of(rules_dir, name):
        raise ValueError("stale")
    return doc[key]


@lru_cache(maxsize=4)
def _digest_of(rules_dir: Path, name: str) -> str:
    return digest(rules_dir, name)


@lru_cache(maxsize=1)
def _shipped_rules() -> tuple[Rule, ...] | None:
    rules_dir = builtin_rules_dir()
    try:
        from logdoctor.diagnosis import rules_shipped as shipped
        if shipped.FORMAT != BUILT_FORMAT or shipped.DIGEST != _digest_of(rules_dir, BUILT_RULES):
            return None
        return _rules(shipped.RULES, rules_dir)
    except Exception:  # missing, stale or damaged: the rule files are read instead, which says what is wrong
        return None


@lru_cache(maxsize=1)
def _shipped_net() -> NetData | None:
    rules_dir = builtin_rules_dir()
    try:
        return _net(_read(BUILT_NET, rules_dir, "net"), rules_dir / "net")
    except Exception:
        return None


def shipped_rules() -> tuple[Rule, ...] | None:
    """The built-in rules from the shipped build, or None when it is missing or stale."""
    return _shipped_rules()


def shipped_net() -> NetData | None:
    """A copy of the built-in net from the shipped build (callers extend it), or None."""
    net = _shipped_net()
    if net is None:
        return None
    from logdoctor.diagnosis.net_data import NetData
    return NetData(list(net.terms), list(net.subsystems), dict(net.headlines), dict(net.remedies),
                   {k: list(v) for k, v in net.read.items()}, dict(net.stalls))

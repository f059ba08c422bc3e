"""Message body -> (kind, fields): the lark grammar for launch lines, a fast path for batch lines.

The LALR parser is built once (cached on disk by lark). A cheap prefilter derived from the parser's
own start state (the first word of every anchor literal, plus the anchor regexes) keeps the
thousands of lines that cannot match away from lark. Values come out in real units: GiB floats
(`*_gib`), seconds (`*_s`), ints for counts, bools, lists.
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, cast

from lark import Lark, Token, Transformer, UnexpectedCharacters, UnexpectedInput
from lark.lexer import PatternRE, PatternStr

from logdoctor.parse.finishers import finish
from logdoctor.parse.values import (
    convert,
    extract_pairs,
    normalize_key,
    to_float,
    to_int,
)
from logdoctor.resources import grammar_path

Fields = dict[str, Any]

# ------------------------------------------------------------------------------------------------
# the fast path for periodic batch lines (B01-B14)

_BATCH_HEAD = re.compile(
    r"(?:(?P<kind>Prefill|Decode) batch(?:[ \t]{0,8}\[\d{1,9}\])?(?:\(mixed #running-req: (?P<mixed>\d{1,18})\))?"
    r"[.,]?\s+|(?P<old>new fill batch\.\s+)|(?=#running-req: \d+, #token: ))"
)
_BATCH_MAX_KEYS = 64         # fields kept from one batch line (real ones have about ten)
_BATCH_KEYS_CACHE = 1024     # distinct keys remembered: a hostile log must not grow the cache forever


def parse_batch(body: str) -> tuple[str, Fields] | None:
    c = body[:1]
    if c not in "PDn#":
        return None
    m = _BATCH_HEAD.match(body)
    if m is None:
        return None
    kind = "prefill_batch" if (m.group("kind") == "Prefill" or m.group("old")) else "decode_batch"
    rest = body[m.end():]
    sep = ". " if m.group("old") else ", "
    fields: Fields = {}
    if m.group("mixed"):
        fields["mixed_running_req"] = to_int(m.group("mixed"))
    for part in rest.split(sep, _BATCH_MAX_KEYS * 2):
        key, colon, value = part.partition(": ")
        if not colon:
            continue
        if len(fields) >= _BATCH_MAX_KEYS:
            break
        k = _BATCH_KEYS.get(key)
        if k is None:
            k = normalize_key(key)
            if len(_BATCH_KEYS) < _BATCH_KEYS_CACHE:
                _BATCH_KEYS[key] = k
        v = value.rstrip(",. %")
        if v[:1].isdigit() or v[:1] == "-":
            # the common case first; to_int/to_float refuse what no log means (5000 digits, 1e999)
            num = to_float(v) if "." in v else to_int(v)
            if num is not None:
                fields[k] = num
                continue
        fields[k] = convert(v)
    return kind, fields


_BATCH_KEYS: dict[str, str] = {
    "#running-req": "running_req", "#token": "token", "token usage": "token_usage",
    "gen throughput (token/s)": "gen_throughput", "#queue-req": "queue_req", "cuda graph": "cuda_graph",
    "#new-seq": "new_seq", "#new-token": "new_token", "#cached-token": "cached_token",
    "input throughput (token/s)": "input_throughput", "cache hit rate": "cache_hit_rate_pct",
    "#seq": "new_seq", "#new_token": "new_token", "#cached_token": "cached_token",
    "#remaining_req": "queue_req", "#running_req": "running_req", "tree_cache_hit_rate": "cache_hit_rate_pct",
}

# ------------------------------------------------------------------------------------------------
# the lark grammar


class _ToFields(Transformer[Token, Any]):
    """Every rule becomes (kind, fields): bags are extracted, NUMBER/WORD/REST kept positionally."""

    def bag(self, children: list[Token]) -> Fields:
        return extract_pairs("".join(str(c) for c in children))

    def __default__(self, data: Any, children: list[Any], meta: Any) -> Any:
        if data == "start":
            return children[0]
        if data.startswith("_"):  # lark's helper rules (e.g. ITEM*) are inlined by the tree builder
            return super().__default__(data, children, meta)
        fields: Fields = {}
        numbers: list[Any] = []
        for c in children:
            if isinstance(c, dict):
                fields.update(c)
            elif isinstance(c, Token):
                t = c.type
                if t == "NUMBER":
                    n = convert(c)
                    numbers.append(None if isinstance(n, str) else n)  # a numeral no log means: unknown
                elif t == "REST":
                    fields["rest"] = str(c).strip()
                elif t == "WORD":
                    fields.setdefault("words", []).append(str(c))
                elif t.startswith("__ANON") or t.isupper():
                    if t in ("KV_LABEL", "LEAK_POOL", "WATCHDOG_NAME", "RANK_TAG", "PORT_NAME", "INIT_STATE"):
                        fields[t.lower()] = str(c).strip()
                    else:
                        fields.setdefault("anchor", str(c))
        if numbers:
            fields["numbers"] = numbers
        return str(data), fields


# The parser is loaded from a parse table built ahead of time (`tools/build_parser.py`) and shipped as
# JSON beside the grammar, so no run reads a cache another user could have written (lark's own cache is a
# pickle, which runs code when loaded) and no first run pays for building. The table names the grammar
# digest and lark version it was built from; when either differs (a grammar being edited, another lark),
# the parser is built in memory instead.
TABLE_FORMAT = 1


@lru_cache(maxsize=1)
def _parser() -> Lark:
    grammar = grammar_path("sglang.lark").read_bytes()
    table = _read_table(grammar)
    parser: Lark | None = None
    if table is not None:
        try:
            parser = Lark._load_from_dict(table["data"], table["memo"], transformer=_ToFields())
        except Exception:  # a table lark cannot load is as good as none: build instead
            pass
    if parser is None:
        parser = build_parser(grammar)
    _without_root_lexer(parser)
    return parser


class _Unlexable(UnexpectedCharacters):
    def __init__(self) -> None:  # raised as is: nothing reads its message
        pass


class _NoRootLexer:
    """Stands in for the contextual lexer's root lexer, which lark uses only to word a parse error better.

    A line the grammar does not take is simply not ours (parse_message returns None), so the nicer error is
    never read, while building that lexer compiles one regex of every terminal (~10 ms, on almost every log).
    Raising UnexpectedCharacters here makes lark raise the original error, which parse_message catches."""

    def next_token(self, lexer_state: Any, parser_state: Any = None) -> Any:
        raise _Unlexable()


def _without_root_lexer(parser: Lark) -> None:
    lexer = getattr(getattr(parser, "parser", None), "lexer", None)
    if hasattr(lexer, "root_lexer"):
        lexer.root_lexer = _NoRootLexer()  # type: ignore[union-attr]


def build_parser(grammar: bytes) -> Lark:
    return Lark(grammar.decode("utf-8"), parser="lalr", lexer="contextual", transformer=_ToFields(),
                propagate_positions=False)


def table_identity(grammar: bytes) -> dict[str, Any]:
    import hashlib

    import lark
    return {"format": TABLE_FORMAT, "grammar_sha256": hashlib.sha256(grammar).hexdigest(),
            "lark": lark.__version__}


def serialize_table(parser: Lark, grammar: bytes) -> str:
    """The parser as JSON: lark's own serialisation, with int-keyed maps and tuples made explicit."""
    import json

    from lark.grammar import Rule
    from lark.lexer import TerminalDef
    data, memo = parser.memo_serialize([TerminalDef, Rule])
    data["options"] = {k: v for k, v in data["options"].items() if k != "transformer"}
    return json.dumps({**table_identity(grammar), "data": _to_json(data), "memo": _to_json(memo)},
                      separators=(",", ":"), sort_keys=True)


def _read_table(grammar: bytes) -> dict[str, Any] | None:
    import json
    try:
        raw = json.loads(grammar_path("sglang.parser.json").read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict) or any(raw.get(k) != v for k, v in table_identity(grammar).items()):
        return None
    return {"data": _from_json(raw.get("data")), "memo": _from_json(raw.get("memo"))}


_INT_KEYS = "__int_keys__"
_TUPLE = "__tuple__"


def _to_json(value: Any) -> Any:
    if isinstance(value, dict):
        if value and all(isinstance(k, int) for k in value):
            return {_INT_KEYS: [[k, _to_json(v)] for k, v in value.items()]}
        return {str(k): _to_json(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return {_TUPLE: [_to_json(v) for v in value]}
    if isinstance(value, list):
        return [_to_json(v) for v in value]
    return value


def _from_json(value: Any) -> Any:
    if isinstance(value, dict):
        if _INT_KEYS in value:
            return {int(k): _from_json(v) for k, v in value[_INT_KEYS]}
        if _TUPLE in value:
            return tuple(_from_json(v) for v in value[_TUPLE])
        return {k: _from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    return value


@lru_cache(maxsize=1)
def _prefilter() -> tuple[frozenset[str], re.Pattern[str]]:
    """First words of the anchor literals and one regex for anchor patterns, from the start state."""
    parser = _parser()
    table = parser.parser.parser.parser.parse_table
    start_state = table.start_states["start"]
    terminals = {t.name: t for t in parser.terminals}
    words: set[str] = set()
    patterns: list[str] = []
    for name in table.states[start_state]:
        term = terminals.get(name)
        if term is None:
            continue
        pat = term.pattern
        if isinstance(pat, PatternStr):
            words.add(pat.value[:3])
        elif isinstance(pat, PatternRE):
            patterns.append(f"(?:{pat.value})")
    return frozenset(words), re.compile("|".join(patterns))


from logdoctor.parse.finishers import nccl_watchdog_fields  # noqa: E402,F401  (re-exported for parse.py)


def parse_message(body: str) -> tuple[str, Fields] | None:
    """Parse one message body (prefix already removed) with the grammar; None when it is not ours."""
    heads, patterns = _prefilter()
    if body[:3] not in heads and not patterns.match(body):
        return None
    try:
        # with a transformer, lark's LALR parser returns what the transformer built (_ToFields: kind, fields),
        # not the tree lark's signature names
        kind, fields = cast("tuple[str, Fields]", _parser().parse(body))
    except UnexpectedInput:
        return None
    except Exception:  # lark raises a few other errors on odd input; a line we can't parse is unparsed
        return None
    return kind, finish(kind, fields, body)

"""Message body -> (kind, fields): the lark grammar for launch lines, a fast path for batch lines.

The LALR parser is generated ahead of time (lark's standalone parser, see `_parser`). A cheap
prefilter derived from the parser's own start state (the first word of every anchor literal, plus the
anchor regexes) keeps the thousands of lines that cannot match away from lark. Values come out in real units: GiB floats
(`*_gib`), seconds (`*_s`), ints for counts, bools, lists.
"""
from __future__ import annotations

import re
import zlib
from collections.abc import Callable
from functools import lru_cache
from typing import Any, cast

from logdoctor import regexes
from logdoctor.regexes import split_top
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

_BATCH_HEAD = regexes.compile(
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


def _to_fields_class(transformer_base: Any, token_class: Any) -> Any:
    """The transformer, on the classes of the lark runtime in use (the generated parser's or lark's own)."""

    class ToFields(transformer_base):
        """Every rule becomes (kind, fields): bags are extracted, NUMBER/WORD/REST kept positionally."""

        def bag(self, children: list[Any]) -> Fields:
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
                elif isinstance(c, token_class):
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
    return ToFields


# The parser is lark's standalone parser for this grammar (`logdoctor/parse/sglang_parser.py`, generated by
# tools/build_parser.py): lark's LALR runtime with the parse table as Python data. Importing it costs a
# fraction of importing lark (whose grammar compiler every run would load), no run reads a cache another
# user could have written (lark's own cache is a pickle, which runs code when loaded), and no first run
# pays for building. The module names the grammar it was built from; when the grammar differs (being
# edited), lark itself builds the parser in memory instead.
PARSER_FORMAT = 2


def grammar_digest(grammar: bytes) -> str:
    return f"{zlib.crc32(grammar):08x}{zlib.adler32(grammar):08x}-{len(grammar)}"


@lru_cache(maxsize=1)
def _parser() -> Any:
    grammar = grammar_path("sglang.lark").read_bytes()
    parser: Any = None
    try:
        from logdoctor.parse import sglang_parser as runtime
        if runtime.GRAMMAR_DIGEST == grammar_digest(grammar) and runtime.PARSER_FORMAT == PARSER_FORMAT:
            parser = runtime.Lark_StandAlone(transformer=_to_fields_class(runtime.Transformer, runtime.Token)())
            _without_root_lexer(parser, runtime.UnexpectedCharacters)
            parser.parser.lexer.lexer_re = regexes.LEXER_RE  # scanners built from recorded regex programs
    except Exception:  # missing, stale or broken: lark builds it
        parser = None
    if parser is None:
        parser = build_parser(grammar)
    return parser


def build_parser(grammar: bytes, transformer: bool = True) -> Any:
    """The parser built by lark itself (tools/build_parser.py, and a grammar newer than the generated parser)."""
    import lark
    parser = lark.Lark(grammar.decode("utf-8"), parser="lalr", lexer="contextual", propagate_positions=False,
                       transformer=_to_fields_class(lark.Transformer, lark.Token)() if transformer else None)
    if transformer:
        _without_root_lexer(parser, lark.exceptions.UnexpectedCharacters)
    return parser


def _without_root_lexer(parser: Any, unexpected_characters: type[Exception]) -> None:
    """lark's contextual lexer builds a root lexer (one regex of all ~130 terminals, ~10 ms) only to word
    a parse error better. A line the grammar does not take is simply not ours (parse_message returns None),
    so the nicer wording is never read: a stand-in raises UnexpectedCharacters, on which lark re-raises
    the original error."""

    class Unlexable(unexpected_characters):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:  # raised as is: nothing reads its message
            pass

    class NoRootLexer:
        def next_token(self, lexer_state: Any, parser_state: Any = None) -> Any:
            raise Unlexable()

    lexer: Any = getattr(getattr(parser, "parser", None), "lexer", None)
    if hasattr(lexer, "root_lexer"):
        lexer.root_lexer = NoRootLexer()


@lru_cache(maxsize=1)
def _prefilter() -> tuple[frozenset[str], AnchorPatterns]:
    """First words of the anchor literals and the anchor patterns, from the start state."""
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
        if pat.type == "str":
            words.add(pat.value[:3])
        elif pat.type == "re":
            patterns.append(pat.value)
    # sorted: a match of any of them is all the prefilter asks, and the parse table's order is not stable
    # across builds of the parser (the groups' texts are the keys of their recorded programs, logdoctor.regexes)
    heads = frozenset(words)
    return heads, AnchorPatterns(sorted(patterns), heads)


class AnchorPatterns:
    """`match(body)`: whether one of the anchor regexes matches at the start of `body`.

    One alternation of all of them costs every line a try of each; most anchors can only start with one or
    two characters, so they are grouped by the first character of the body (an anchor whose first
    character is not plain to see is in every group). Each group is compiled when first needed; a body
    starting with a character no anchor names takes the group of those others only. An anchor of unknown
    first character that needs a literal somewhere (`[\\w ]{1,128}(?= leak detected!)`) is tried only on a body
    holding it: on the others such a pattern scans and backtracks for nothing (most of the cost of an NCCL
    INFO line's check)."""

    def __init__(self, patterns: list[str], heads: frozenset[str] = frozenset()) -> None:
        self.patterns = patterns
        self.heads = heads  # the first three characters of the grammar's literal first words (may_parse)
        self.firsts = [_first_chars(p) for p in patterns]
        self.named = frozenset().union(*(f for f in self.firsts if f is not None))
        self.needs = [None if f is not None else required_literal(p) for p, f in zip(patterns, self.firsts)]
        # per first character: the literals its anchors need, its compiled alternations by which of them a
        # body holds, and the key for a body holding none
        self._groups: dict[str, tuple[tuple[str, ...], dict[tuple[bool, ...], re.Pattern[str] | None],
                                      tuple[bool, ...]]] = {}
        # per first character: its needs and the alternation for a body holding none of them (most bodies)
        self._plain: dict[str, tuple[tuple[str, ...], re.Pattern[str] | None]] = {}

    def _group(self, c: str) -> tuple[tuple[str, ...], dict[tuple[bool, ...], re.Pattern[str] | None], tuple[bool, ...]]:
        picked = [i for i, f in enumerate(self.firsts) if f is None or c in f]
        needs = tuple(dict.fromkeys(n for i in picked if (n := self.needs[i]) is not None))
        group = self._groups[c] = (needs, {}, (False,) * len(needs))
        return group

    def _compiled(self, c: str, present: tuple[bool, ...]) -> re.Pattern[str] | None:
        needs, compiled, _ = self._groups[c]
        held = {n for n, there in zip(needs, present) if there}
        picked = [p for p, f, n in zip(self.patterns, self.firsts, self.needs)
                  if (f is None or c in f) and (n is None or n in held)]
        rx = compiled[present] = regexes.compile("|".join(f"(?:{p})" for p in picked)) if picked else None
        return rx

    def match(self, body: str) -> bool:
        c = body[:1]
        if c not in self.named:
            c = ""  # the group of anchors that may start with anything
        plain = self._plain.get(c)
        if plain is None:
            needs, _, none_held = self._groups.get(c) or self._group(c)
            plain = self._plain[c] = (needs, self._compiled(c, none_held))
        needs, rx = plain
        for need in needs:  # most bodies hold none of them: a loop of `in` finds that fastest
            if need in body:
                return self._match_holding(c, body)
        return rx is not None and rx.match(body) is not None

    def may_parse(self, body: str) -> bool:
        """What grammar.may_parse answers, in one call: the body starts with one of `heads`, or match."""
        return body[:3] in self.heads or self.match(body)

    def _match_holding(self, c: str, body: str) -> bool:
        """match, for a body holding some of its group's needs."""
        needs, compiled, _ = self._groups[c]
        present = tuple(map(body.__contains__, needs))
        rx = compiled[present] if present in compiled else self._compiled(c, present)
        return rx is not None and rx.match(body) is not None


_INLINE_FLAGS = regexes.compile(r"\(\?[aiLmsux-]{1,8}[:)]")


def required_literal(pattern: str) -> str | None:
    """A literal every match of `pattern` holds (the longest of at least 3 characters plain to see: outside
    any group, or leading a lookahead), or None. Only for a pattern of one top-level branch."""
    if len(split_top(pattern)) != 1 or _INLINE_FLAGS.search(pattern):  # (?i): the text may differ in case
        return None
    runs: list[str] = []
    run: list[str] = []
    i, depth = 0, 0
    n = len(pattern)

    def end_run() -> None:
        if run:
            runs.append("".join(run))
            run.clear()
    while i < n:
        ch = pattern[i]
        if ch == "\\" and i + 1 < n and not pattern[i + 1].isalnum() and depth == 0:
            lit, step = pattern[i + 1], 2
        elif ch in _PLAIN and depth == 0:
            lit, step = ch, 1
        else:
            lit, step = None, 1
        if lit is not None:
            if pattern[i + step:i + step + 1] in ("?", "*", "+", "{"):
                end_run()  # the character before a quantifier may be absent or repeated
                i += step
                continue
            run.append(lit)
            i += step
            continue
        end_run()
        if ch == "\\":
            i += 2
            continue
        if ch == "[":
            close = pattern.find("]", i + 2)
            i = close + 1 if close > 0 else n
            continue
        if ch == "{":  # a bounded repetition's `{m,n}`: not text
            close = pattern.find("}", i + 1)
            i = close + 1 if close > 0 else n
            continue
        if ch == "(":
            if depth == 0 and pattern.startswith("(?=", i):
                inner = _group_body(pattern, i)
                if inner is not None and len(split_top(inner)) == 1:
                    lead = _leading_literal(inner)
                    if lead:
                        runs.append(lead)
            depth += 1
        elif ch == ")":
            depth -= 1
        i += 1
    end_run()
    best = max(runs, key=len, default="")
    return best if len(best) >= 3 else None


def _group_body(p: str, start: int) -> str | None:
    """The text inside the group opening at `start` (after its `(?=`-like head), or None if unclosed."""
    end = _group_end(p, start)
    return None if end is None else p[start + 3:end]


def _group_end(p: str, start: int) -> int | None:
    """Where the `)` closing the group that opens at `start` is, or None if it is not closed."""
    depth, i = 0, start
    while i < len(p):
        ch = p[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "[":  # a class may hold parentheses
            close = p.find("]", i + 2)
            i = close + 1 if close > 0 else len(p)
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


def _leading_literal(p: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(p):
        ch = p[i]
        if ch == "\\" and i + 1 < len(p) and not p[i + 1].isalnum():
            lit, step = p[i + 1], 2
        elif ch in _PLAIN:
            lit, step = ch, 1
        else:
            break
        if p[i + step:i + step + 1] in ("?", "*", "+", "{"):
            break
        out.append(lit)
        i += step
    return "".join(out)


_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-:=,'\"!#%&/;<>@`~")


def _first_chars(pattern: str) -> frozenset[str] | None:
    """The characters a match of `pattern` can start with, or None when that is not plain to see."""
    out: set[str] = set()
    for branch in split_top(pattern):
        first = _branch_first(branch)
        if first is None:
            return None
        out |= first
    return frozenset(out)


def _optional(p: str, end: int) -> bool:
    """Whether the atom ending before `end` may be absent (a quantifier that allows zero)."""
    q = p[end:end + 1]
    return q in ("?", "*") or (q == "{" and p[end + 1:end + 2] in ("0", ","))


def _branch_first(b: str) -> frozenset[str] | None:
    if not b:
        return None
    c = b[0]
    if c in _PLAIN:
        return None if _optional(b, 1) else frozenset(c)
    if c == "\\" and len(b) > 1 and not b[1].isalnum():  # an escaped literal such as `\[`
        return None if _optional(b, 2) else frozenset(b[1])
    if c == "[":
        end = b.find("]", 1)
        chars = b[1:end] if end > 1 else ""
        if not chars or any(ch not in _PLAIN or ch == "-" for ch in chars) or _optional(b, end + 1):
            return None
        return frozenset(chars)
    if c == "(" and not b.startswith("(?"):
        close = _group_end(b, 0)
        if close is None or _optional(b, close + 1):
            return None
        return _first_chars(b[1:close])
    return None


from logdoctor.parse.finishers import nccl_watchdog_fields  # noqa: E402,F401  (re-exported for parse.py)


def may_parse(body: str) -> bool:
    """False for a body the grammar cannot take (parse_message would return None): it starts with none of
    the words and anchor patterns the grammar's start state accepts. True says only that it may."""
    return _prefilter()[1].may_parse(body)


def may_parse_check() -> Callable[[str], bool]:
    """may_parse itself, for a caller asking it of every line (the grammar's prefilter is built once)."""
    return _prefilter()[1].may_parse


def parse_message(body: str) -> tuple[str, Fields] | None:
    """Parse one message body (prefix already removed) with the grammar; None when it is not ours."""
    if not _prefilter()[1].may_parse(body):
        return None
    try:
        # with a transformer, lark's LALR parser returns what the transformer built (_ToFields: kind, fields),
        # not the tree lark's signature names
        kind, fields = cast("tuple[str, Fields]", _parser().parse(body))
    except Exception:  # lark's UnexpectedInput, and a few other errors on odd input: a line we can't parse is unparsed
        return None
    return kind, finish(kind, fields, body)

"""How a log was collected, peeled off every line: the envelope stage of ingest.

A log rarely reaches us as SGLang wrote it: `kubectl logs --timestamps` puts an RFC 3339 time in front,
a node's CRI file `TIME stdout F `, docker's json-file a JSON record, journald `Apr 05 00:01:19 host
python3[42]: `, Ray `(SGLangEngine pid=42) `, and these stack (a CRI file around a docker-compose
prefix around SGLang's own prefix). Each layer here is written to its tool's format; what a layer says
(collector time, stream, pod, container, host, actor, pid, ...) is kept as the line's `attrs`
(ingest.Line, keys in ingest's contract), the rest of the line goes on to `prefix` as if plain.

Detection is by shape over the first lines (`detect`, on ingest's sample), never by a flag:
- distinctive layers (cri, rfc3339 at line start, journald / syslog, severity + time, ray,
  kubectl-prefix) cannot be mistaken for a plain line, so they are peeled on every line where they
  match, detected or not: a Ray driver log mixes actor lines and its own plain lines.
- ambiguous layers (json, stern, compose, srun, quote) need a share of the sample, and are then peeled
  wherever they match.
Layers are peeled outermost first, at most MAX_LAYERS per line (a line of 10,000 stacked prefixes
keeps the rest as text). A plain line costs one first-character test, no regex and no dict.

Every pattern is bounded or anchored with disjoint adjacent classes: a log line is untrusted input.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable
from itertools import pairwise

from logdoctor import regexes
from logdoctor.read.envelope_json import Attrs, Peeled, peel_json
from logdoctor.records import dataclass, field

MAX_LAYERS = 6
LAYER_NAMES = ("json", "cri", "kubectl-prefix", "stern", "compose", "rfc3339", "journald", "syslog", "ray",
               "severity", "srun", "quote")
DISTINCTIVE = frozenset({"cri", "rfc3339", "journald", "syslog", "severity", "ray", "kubectl-prefix"})
# share of the sample's non-empty lines an ambiguous layer must match to be detected
MIN_SHARE = {"json": 0.5, "stern": 0.6, "compose": 0.3, "srun": 0.5, "quote": 0.6}
MAX_STERN_PAIRS = 64
MAX_LOG_STREAM = 512            # CloudWatch log stream names are at most 512 characters
MAX_LOG_STREAMS = 16            # distinct (pod, container) pairs a stern sample may show
NEWEST_FIRST_MIN_TIMES = 4      # backward steps needed when the times also go forward sometimes
NEWEST_FIRST_SHARE = 0.9        # share of the changes between consecutive times that must go backwards


_TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,12})?(?:Z|[+-]\d\d:?\d\d)"
_CRI = regexes.compile(rf"({_TIME}) (stdout|stderr) ([PF]) ?")
_RFC3339 = regexes.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,12})?(?:Z|[+-]\d\d:?\d\d)?) ")
_SEVERITY = regexes.compile(rf"(DEFAULT|DEBUG|INFO|NOTICE|WARNING|ERROR|CRITICAL|ALERT|EMERGENCY) ({_TIME}) ")
_SEVERITY_WORDS = frozenset({"DEFAULT", "DEBUG", "INFO", "NOTICE", "WARNING", "ERROR", "CRITICAL", "ALERT",
                             "EMERGENCY"})
# journald short / short-precise (`Apr 05 00:01:19[.123456] host ident[pid]: `), short-iso /
# short-iso-precise (`2025-04-05T00:01:19[.123456]+00:00 host …`); kernel lines are left whole (the
# `kernel:` tag is what the OOM-killer rules look for)
_BSD_TIME = r"[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d{1,6})?"
# short-full (`Fri 2025-04-05 00:01:19 UTC `) and short-unix (`1712275279.209123 `) as well
_FULL_TIME = r"[A-Z][a-z]{2} \d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{1,6})? (?:[A-Za-z]{1,6}|[+-]\d\d(?::?\d\d)?)"
_JOURNALD = regexes.compile(
    rf"({_BSD_TIME}|\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{{1,6}})?(?:Z|[+-]\d\d:?\d\d)|{_FULL_TIME}|\d{{9,11}}\.\d{{6}}) ([\w.-]{{1,256}}) "
    r"(?!kernel:)([\w.@/-]{1,256})(?:\[(\d{1,12})\])?: ")
_SYSLOG_3164 = regexes.compile(
    rf"<\d{{1,3}}>({_BSD_TIME}) ([\w.-]{{1,256}}) (?!kernel:)([\w.@/-]{{1,256}})(?:\[(\d{{1,12}})\])?: ")
_SYSLOG_5424 = regexes.compile(
    r"<\d{1,3}>1 (\S{1,64}) (\S{1,255}) (\S{1,48}) (\S{1,128}) \S{1,32} (?:-|(?:\[[^\]]{0,4096}\]){1,16})(?: |$)")
_KUBECTL = regexes.compile(r"\[pod/([\w.-]{1,253})/([\w.-]{1,63})\] ")
# one run per token, then the space: no split point to backtrack over (DNS names' last character is
# checked in Python, `_dns_end`)
_STERN = regexes.compile(r"(?<![a-z0-9.-])([a-z0-9][a-z0-9.-]{0,252}) ([a-z0-9][a-z0-9-]{0,62}) ")
# the look-behind: a search (not that we search) starts only where a name can start, so a long run
# costs one bounded attempt per name rather than one per character
_COMPOSE = regexes.compile(r"(?<![\w.-])([A-Za-z0-9][\w.-]{0,127})\s{1,64}\| ")
_QUOTE = regexes.compile(r"(?:> ?){1,64}")
_SRUN = regexes.compile(r" {0,4}(\d{1,5}): ")
MAX_RAY_PREFIX = 256            # `(SGLangEngine pid=12345, ip=10.0.0.1) ` and the like
_RAY_INNER = regexes.compile(r"[\w ,=.:/-]*")
_PASTED_SGR = regexes.compile(r"(?:\[[0-9;]{1,16}m){1,4}")   # colour codes whose ESC a paste lost
_RAY_PID = regexes.compile(r"pid=(\d{1,12})")
_RAY_IP = regexes.compile(r"ip=([\w.:-]{1,64})")
_RAY_DAEMONS = frozenset({"raylet", "autoscaler", "gcs_server", "monitor", "dashboard"})
_RAY_REPEATED = regexes.compile(
    r" \[repeated \d{1,9}x across cluster\](?: \(Ray deduplicates logs by default\.[^()]{0,512}\))?$")
_TIME_KEY = regexes.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:[.,](\d{1,12}))?(Z|[+-]\d\d:?\d\d)?")


# ------------------------------------------------------------------------------------------------
# the layers: each takes a line and gives Peeled, or None when the line does not have that layer


def _peel_cri(t: str) -> Peeled | None:
    m = _CRI.match(t)
    if m is None:
        return None
    time, stream, tag = m.groups()
    return t[m.end():], {"time": time, "stream": stream}, stream if tag == "P" else None


def _peel_rfc3339(t: str) -> Peeled | None:
    m = _RFC3339.match(t)
    return None if m is None else (t[m.end():], {"time": m.group(1)}, None)


def _peel_severity(t: str) -> Peeled | None:
    m = _SEVERITY.match(t)
    return None if m is None else (t[m.end():], {"severity": m.group(1), "time": m.group(2)}, None)


def _journal_attrs(time: str, host: str, unit: str, pid: str | None) -> Attrs:
    attrs = {"time": time, "host": host, "unit": unit}
    if pid:
        attrs["pid"] = pid
    return attrs


def _peel_journal_line(t: str) -> Peeled | None:
    m = _JOURNALD.match(t)
    return None if m is None else (t[m.end():], _journal_attrs(*m.groups()), None)


def _space_padded_day(t: str) -> bool:
    return t[3:5] == "  "  # rsyslog writes RFC 3164's `Apr  5`; journalctl writes `Apr 05`


def _peel_journald(t: str) -> Peeled | None:
    return None if _space_padded_day(t) else _peel_journal_line(t)


def _peel_syslog(t: str) -> Peeled | None:
    """RFC 5424 and 3164 with their `<PRI>`, and 3164 as rsyslog's traditional file format writes it.

    rsyslog's high-precision file format (`2025-04-05T00:01:19.209123+00:00 host tag[pid]: `) cannot be
    told from journalctl's short-iso-precise: it is peeled (and named) as journald."""
    if t[:1] != "<":
        return _peel_journal_line(t) if _space_padded_day(t) else None
    m = _SYSLOG_3164.match(t)
    if m is not None:
        return t[m.end():], _journal_attrs(*m.groups()), None
    m = _SYSLOG_5424.match(t)
    if m is None:
        return None
    attrs = {k: v for k, v in zip(("time", "host", "unit", "pid"), m.groups()) if v != "-"}
    return t[m.end():], attrs, None


def _peel_kubectl(t: str) -> Peeled | None:
    if not t.startswith("[pod/"):
        return None
    m = _KUBECTL.match(t)
    return None if m is None else (t[m.end():], {"pod": m.group(1), "container": m.group(2)}, None)


def _peel_compose(t: str) -> Peeled | None:
    m = _COMPOSE.match(t)
    return None if m is None else (t[m.end():], {"container": m.group(1)}, None)


def _peel_quote(t: str) -> Peeled | None:
    if t[:1] != ">":
        return None
    return _QUOTE.sub("", t, count=1), None, None


def _peel_srun(t: str) -> Peeled | None:
    m = _SRUN.match(t)
    return None if m is None else (t[m.end():], None, None)


def _peel_ray(t: str) -> Peeled | None:
    """`(Actor pid=N, ip=X) `, `(pid=N) `, `(raylet) `, `(raylet, ip=X) ` as Ray's log monitor prints them.

    Ray colours the prefix even into a pipe (`ESC[2mESC[36m(…)ESC[0m `: ingest removes the escapes); a
    log pasted into an issue lost the ESC and keeps `[2m[36m(…)[0m `, peeled too. Done by hand: as one
    regex the free runs around `pid=` are ambiguous (quadratic on a long run of `pid=1 `); the closing
    `)` is looked for only within MAX_RAY_PREFIX characters."""
    start = 0
    if t[:1] == "[":
        m = _PASTED_SGR.match(t)
        if m is None:
            return None
        start = m.end()
    if t[start:start + 1] != "(":
        return None
    close = t.find(")", start + 1, start + MAX_RAY_PREFIX)
    if close < 0:
        return None
    end = close + 1
    if t[end:end + 1] == "[":
        m = _PASTED_SGR.match(t, end)
        if m is not None:
            end = m.end()
    if t[end:end + 1] != " ":
        return None
    inner = t[start + 1:close]
    if _RAY_INNER.fullmatch(inner) is None:
        return None
    first = inner.split(",", 1)[0].strip()
    pid = _RAY_PID.search(inner)
    if pid is None and first not in _RAY_DAEMONS:
        return None
    attrs: Attrs = {}
    actor = first.split(" ", 1)[0] if " " in first or "=" not in first else ""
    if actor:
        attrs["actor"] = actor
    if pid is not None:
        attrs["pid"] = pid.group(1)
    ip = _RAY_IP.search(inner)
    if ip is not None:
        attrs["ip"] = ip.group(1)
    rest = t[end + 1:]
    if rest.endswith(("]", ")")) and " [repeated " in rest:
        m = _RAY_REPEATED.search(rest, max(0, len(rest) - 600))
        if m is not None:
            rest = rest[:m.start()]
    return rest, attrs, None


def _peel_syslog_any(t: str) -> Peeled | None:
    """`--envelope syslog` or `journald`: either family, whatever the day's padding."""
    return _peel_syslog(t) if t[:1] == "<" else _peel_journal_line(t)


def _peel_rfc3339_with(log_streams: frozenset[str]) -> Callable[[str], Peeled | None]:
    """`aws logs tail --format detailed`: `TIME LOG-STREAM TEXT`, the stream names found in the sample."""
    def peel(t: str) -> Peeled | None:
        got = _peel_rfc3339(t)
        if got is not None:
            rest = got[0]
            sp = rest.find(" ", 1, MAX_LOG_STREAM + 1)
            if sp > 0 and rest[:sp] in log_streams:
                return rest[sp + 1:], got[1], None
        return got
    return peel


def _peel_stern_with(containers: frozenset[str]) -> Callable[[str], Peeled | None]:
    def peel(t: str) -> Peeled | None:
        m = _STERN.match(t)
        if m is None or m.group(2) not in containers or not _dns_end(m.group(1)):
            return None
        return t[m.end():], {"pod": m.group(1), "container": m.group(2)}, None
    return peel


# Detection, the newest-first test, the wrap-width guess and the peeling of the sample read ingest's sample
# lines several times: a JSON record is decoded once. Bounded: short records only, and the memo starts over
# when full.
JSON_MEMO_LINES = 2048
JSON_MEMO_CHARS = 2048
# Envelope.peel's own memo (whole peels, every layer): the sample's size, short lines only
PEEL_MEMO_LINES = 2048
PEEL_MEMO_CHARS = 2048
_json_memo: dict[str, Peeled | None] = {}


def _peel_json_once(t: str) -> Peeled | None:
    if t[:1] != "{":
        return None
    if len(t) > JSON_MEMO_CHARS:
        return peel_json(t)
    if t in _json_memo:
        got = _json_memo[t]
    else:
        got = peel_json(t)
        if len(_json_memo) >= JSON_MEMO_LINES:
            _json_memo.clear()
        _json_memo[t] = got
    if got is None:
        return None
    text, attrs, partial = got
    return text, None if attrs is None else dict(attrs), partial  # callers add to attrs: each gets its own


PEELERS: dict[str, Callable[[str], Peeled | None]] = {
    "json": _peel_json_once, "cri": _peel_cri, "journald": _peel_journald, "syslog": _peel_syslog,
    "severity": _peel_severity, "rfc3339": _peel_rfc3339, "kubectl-prefix": _peel_kubectl, "ray": _peel_ray,
    "compose": _peel_compose, "srun": _peel_srun, "quote": _peel_quote,
}
# the order layers are tried in at each depth: a more specific shape before the one it contains
# (CRI and journald's short-iso both start with an RFC 3339 time)
ORDER = ("json", "cri", "syslog", "journald", "severity", "rfc3339", "kubectl-prefix", "ray", "compose", "stern",
         "srun", "quote")
_ALWAYS = ("cri", "syslog", "journald", "severity", "rfc3339", "kubectl-prefix", "ray")
_WEEKDAYS = frozenset({"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"})
_MONTHS = frozenset(["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"])


# first characters a distinctive envelope can start with (maybe_distinctive looks closer)
MAYBE_FIRST = frozenset("(<[0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def maybe_distinctive(t: str) -> bool:
    """Could `t` start with a distinctive envelope? A few character tests, so plain lines stay cheap."""
    c = t[:1]
    if c == "(" or c == "<" or ("0" <= c <= "9"):
        return True
    if c == "[":  # `[pod/…] ` (kubectl), or a pasted Ray colour `[36m(`; never SGLang's `[2025-…`
        return t.startswith("[pod/") or "m" in t[2:4]
    if "A" <= c <= "Z":
        if t[3:4] == " " and (t[:3] in _MONTHS or (t[:3] in _WEEKDAYS and t[4:5].isdigit())):  # short-full
            return True
        sp = t.find(" ", 4, 10)
        return sp > 0 and t[:sp] in _SEVERITY_WORDS and t[sp + 1:sp + 2].isdigit()
    return False


# ------------------------------------------------------------------------------------------------
# a stream's envelope: what detect() found, applied line by line


@dataclass
class Envelope:
    """The layers a stream is peeled with. `detected` names what the sample showed, outermost first."""

    detected: tuple[str, ...] = ()
    active: tuple[str, ...] = _ALWAYS          # layers tried on each line, in ORDER
    guarded: bool = True                       # only lines passing maybe_distinctive are tried
    newest_first: bool = False
    stern_containers: frozenset[str] = frozenset()
    log_streams: frozenset[str] = frozenset()  # CloudWatch stream names after an rfc3339 time
    guarded_layers: bool = True                # False for an override: the named layer is tried as is
    peelers: list[tuple[str, Callable[[str], Peeled | None], bool]] = field(default_factory=list)
    # what peel gave each short text, while there is room: the sample is peeled by the newest-first test, the
    # wrap-width guess and the stream itself (a compose line tries every layer twice: ~5 us a time)
    memo: dict[str, tuple[str, Attrs | None, str | None]] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        # a distinctive layer is tried only on a line that passes maybe_distinctive, detected or not
        self.peelers = [(name, self._peeler(name), name in DISTINCTIVE and self.guarded_layers)
                        for name in ORDER if name in self.active]

    def _peeler(self, name: str) -> Callable[[str], Peeled | None]:
        if name == "stern":
            return _peel_stern_with(self.stern_containers)
        if name == "rfc3339" and self.log_streams:
            return _peel_rfc3339_with(self.log_streams)
        if not self.guarded_layers and name in ("syslog", "journald"):
            return _peel_syslog_any
        return PEELERS[name]

    @property
    def off(self) -> bool:
        return not self.peelers

    @property
    def json(self) -> bool:
        return "json" in self.detected

    @property
    def cri(self) -> bool:
        return "cri" in self.detected

    def peel(self, text: str) -> tuple[str, Attrs | None, str | None]:
        """(text without its envelope, attrs or None, stream of a partial record or None)."""
        if self.guarded and not maybe_distinctive(text):
            return text, None, None
        known = self.memo.get(text)
        if known is not None:
            rest, attrs, partial = known
            return rest, (dict(attrs) if attrs is not None else None), partial  # each caller its own attrs
        got = self._peel(text)
        if len(self.memo) < PEEL_MEMO_LINES and len(text) <= PEEL_MEMO_CHARS:
            rest, attrs, partial = got
            self.memo[text] = (rest, dict(attrs) if attrs is not None else None, partial)
        return got

    def _peel(self, text: str) -> tuple[str, Attrs | None, str | None]:
        attrs: Attrs | None = None
        names: list[str] = []
        partial: str | None = None
        for _ in range(MAX_LAYERS):
            may = maybe_distinctive(text)
            for name, peeler, needs_guard in self.peelers:
                if needs_guard and not may:
                    continue
                got = peeler(text)
                if got is not None:
                    break
            else:
                break
            text, said, part = got
            names.append(name)
            if said:
                if attrs is None:
                    attrs = said
                else:
                    for k, v in said.items():
                        attrs.setdefault(k, v)  # the outer layer's word stands (its time is the collector's)
            if part is not None and partial is None:
                partial = part
        if not names:
            return text, None, None
        if attrs is None:
            attrs = {}
        attrs["envelope"] = "+".join(names)
        return text, attrs, partial


def _resolve(override: str | None) -> tuple[str, ...] | None:
    if override is None:
        return None
    if override == "none":
        return ()
    if override not in LAYER_NAMES:
        raise ValueError(f"unknown envelope {override!r} (one of: none, {', '.join(LAYER_NAMES)})")
    return (override,)


def detect(sample: Iterable[str], override: str | None = None) -> Envelope:
    """The envelope of a stream, from the texts of its first lines (ingest's sample)."""
    forced = _resolve(override)
    texts = [t for t in sample if t.strip()]
    if forced == ():
        return Envelope((), (), False)
    if forced is not None:
        name = forced[0]
        containers = frozenset(m.group(2) for t in texts if (m := _STERN.match(t)) and _dns_end(m.group(1))
                               and _dns_end(m.group(2))) if name == "stern" else frozenset()
        env = Envelope(forced, forced, False, stern_containers=containers, guarded_layers=False)
    else:
        env = _detect_layers(texts)
    env.newest_first = _newest_first(env, texts)
    return env


def _detect_layers(texts: list[str]) -> Envelope:
    current = texts
    found: list[str] = []
    containers: frozenset[str] = frozenset()
    streams: frozenset[str] = frozenset()
    n = max(len(texts), 1)
    for _ in range(MAX_LAYERS):
        best: tuple[int, str] | None = None
        by_first = _by_first(current)
        for name in ORDER:
            if name in found:
                continue
            if name == "stern":
                cs = _stern_containers(current, MIN_SHARE["stern"])
                if not cs:
                    continue
                hits = _count(by_first, _peel_stern_with(cs), name)
                if hits and (best is None or hits > best[0]):
                    best, containers = (hits, name), cs
                continue
            hits = _count(by_first, PEELERS[name], name)
            need = 1 if name in DISTINCTIVE else max(min(2, n), MIN_SHARE[name] * n)  # a one-line log: its line
            if hits >= need and (best is None or hits > best[0]):
                best = (hits, name)
        if best is None:
            break
        name = best[1]
        found.append(name)
        peel = _peel_stern_with(containers) if name == "stern" else PEELERS[name]
        if name == "rfc3339":
            streams = _log_streams(current)
            if streams:
                peel = _peel_rfc3339_with(streams)
        current = [got[0] if (got := peel(t)) is not None else t for t in current]
    ambiguous = tuple(name for name in found if name not in DISTINCTIVE)
    active = tuple(dict.fromkeys(_ALWAYS + ambiguous))
    return Envelope(tuple(found), active, not ambiguous, stern_containers=containers, log_streams=streams)


def _log_streams(texts: list[str]) -> frozenset[str]:
    """CloudWatch log stream names: a token after the (numeric-offset) time that repeats over most lines."""
    tokens: Counter[str] = Counter()
    matched = 0
    for t in texts:
        got = _peel_rfc3339(t)
        if got is None or got[1] is None or got[1]["time"][-6:-5] not in "+-":  # aws prints +00:00, never Z
            continue
        matched += 1
        rest = got[0]
        sp = rest.find(" ", 1, MAX_LOG_STREAM + 1)
        token = rest[:sp] if sp > 0 else ""
        if "/" in token[1:] and token[:1] not in "[(":
            tokens[token] += 1
    if not tokens or len(tokens) > MAX_LOG_STREAMS or sum(tokens.values()) < max(min(2, matched), 0.6 * matched):
        return frozenset()
    return frozenset(tokens)


_DIGITS = "0123456789"
_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_LOWER = "abcdefghijklmnopqrstuvwxyz"
# the characters each layer's lines can start with: detection tries a layer only on those (a plain
# launch log's 2,000 sample lines then cost a set lookup per layer, not a regex)
_FIRST = {
    "json": frozenset("{"), "cri": frozenset(_DIGITS), "rfc3339": frozenset(_DIGITS),
    "syslog": frozenset("<" + _UPPER), "journald": frozenset(_UPPER + _DIGITS), "severity": frozenset(_UPPER),
    "kubectl-prefix": frozenset("["), "ray": frozenset("(["), "compose": frozenset(_UPPER + _LOWER + _DIGITS),
    "stern": frozenset(_LOWER + _DIGITS), "srun": frozenset(" " + _DIGITS), "quote": frozenset(">"),
}


def _by_first(texts: list[str]) -> dict[str, list[str]]:
    """The texts by their first character: each layer is then tried only on the lines it can start."""
    out: dict[str, list[str]] = {}
    for t in texts:
        c = t[:1]
        group = out.get(c)
        if group is None:
            out[c] = [t]
        else:
            group.append(t)
    return out


def _count(by_first: dict[str, list[str]], peel: Callable[[str], Peeled | None], name: str) -> int:
    """How many texts (by_first: _by_first's) the layer `name` peels."""
    first = _FIRST[name]
    hits = 0
    for c, texts in by_first.items():
        if c in first:
            if name == "compose":
                hits += sum(1 for t in texts if "| " in t and peel(t) is not None)
            else:
                hits += sum(1 for t in texts if peel(t) is not None)
    return hits


def _dns_end(name: str) -> bool:
    return name[-1] not in ".-"


def _stern_containers(texts: list[str], share: float) -> frozenset[str]:
    """Containers of a stern sample: `POD CONTAINER ` pairs that repeat over most lines, pod-like first."""
    first = _FIRST["stern"]
    pairs = Counter((m.group(1), m.group(2)) for t in texts if t[:1] in first
                    if (m := _STERN.match(t)) and _dns_end(m.group(1)) and _dns_end(m.group(2)))
    if not pairs or len(pairs) > MAX_STERN_PAIRS:
        return frozenset()
    least = min(2, len(texts))  # a one-line log cannot repeat its pair
    repeated = {p: c for p, c in pairs.items() if c >= least}
    covered = sum(repeated.values())
    if covered < max(least, share * len(texts)):
        return frozenset()
    # a pod name is a DNS name with a generated part (`sglang-0`, `sglang-7d9f8b7c6-x2x9z`)
    if not all("-" in pod or any(ch.isdigit() for ch in pod) for pod, _ in repeated):
        return frozenset()
    return frozenset(container for _, container in repeated)


def time_key(value: str) -> float | None:
    """Seconds of an RFC 3339 collector time (for ordering only: no time zone database is needed)."""
    m = _TIME_KEY.match(value)
    if m is None:
        if value.replace(".", "", 1).isdigit():  # epoch seconds / journald's microseconds
            secs = float(value)
            return secs / 1e6 if secs > 1e11 else secs
        return None
    y, mo, d, hh, mm, ss, frac, zone = m.groups()
    days = (int(y) * 372 + int(mo) * 31 + int(d))  # monotonic in the date, which is all ordering needs
    secs = days * 86400.0 + int(hh) * 3600 + int(mm) * 60 + int(ss) + (float("0." + frac) if frac else 0.0)
    if zone and zone != "Z":
        sign = -1 if zone[0] == "+" else 1
        secs += sign * (int(zone[1:3]) * 3600 + int(zone[-2:]) * 60)
    return secs


def _newest_first(env: Envelope, texts: list[str]) -> bool:
    """True when the collector times of the sample clearly go backwards (a console export)."""
    if not env.detected:  # no collector, no collector times
        return False
    keys: list[float] = []
    for t in texts:
        _, attrs, _ = env.peel(t)
        when = attrs.get("time") if attrs else None
        key = time_key(when) if when else None
        if key is not None:
            keys.append(key)
    if len(keys) < 2:
        return False
    back = sum(1 for a, b in pairwise(keys) if b < a)
    forward = sum(1 for a, b in pairwise(keys) if b > a)
    if forward == 0 and len(keys) >= 2:  # never forward, and back at least once: times of one burst tie at a millisecond
        return back > 0
    return back >= NEWEST_FIRST_MIN_TIMES - 1 and back >= NEWEST_FIRST_SHARE * (back + forward) and keys[-1] < keys[0]

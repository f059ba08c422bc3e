"""Split a line into its prefix (time, ranks, level, origin) and the message body.

Prefix forms, oldest to newest (catalog PFX rows): none; `[HH:MM:SS TP0] `; `[YYYY-MM-DD HH:MM:SS TP0] `;
`[MM-DD HH:MM:SS] ` (sglang.multimodal_gen's logger);
`[… .mmm DP0 PP1 ATTN_CP0 TP3 EP3] ` (ranks in any order); uvicorn `[…] INFO:     `; old inline
`[gpu_id=0] ` / `[gpu=0] ` / `Rank 0: `. Foreign forms: NCCL `host:pid:tid [rank] … NCCL WARN`, torch
`[rank0]:[E1130 01:45:25.890538359 File.cpp:689] `, glog `E1130 01:46:32.635000 878 file.py:986] `, vLLM
`WARNING 05-25 00:00:25 file.py:74] `, `[Gloo] `.
How the log was collected (Ray actor prefixes, `docker logs -t` / kubectl times, journald, syslog,
`srun --label`, container and cloud envelopes) is envelope.py's business: ingest peels it before a line
gets here.
"""
from __future__ import annotations

import re
from functools import lru_cache

from logdoctor import regexes
from logdoctor.records import dataclass

# Every quantifier is bounded and no two adjacent ones can take the same characters: a log line is
# untrusted input, and `.*?\s*` over 40k spaces or `[...]*pid=\d+[...]*` over a 200 KB run took
# seconds to minutes (tests/test_linear_time.py feeds each pattern such runs).
_SGLANG = regexes.compile(
    r"\[(?:((?:\d{4}-)?\d\d-\d\d) )?(\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?((?: [A-Z][A-Z_]{0,15}\d{1,6}){0,12})\] ?"
)
_UVICORN = regexes.compile(r"(INFO|WARNING|ERROR|DEBUG|CRITICAL|TRACE):\s+")
NCCL_LINE = _NCCL = regexes.compile(
    r"(?<![\w.-])(?P<host>[\w.-]{1,256}):(?P<pid>\d{1,12}):(?P<tid>\d{1,12}) \[(?P<rank>\d{1,6})\][ \t]{0,8}"
    r"(?P<loc>(?:[^\s]{1,256}[ \t]{1,8}){0,4}?)"  # `init.cc:973 ` before NCCL in newer versions; usually empty
    r"(?P<lib>NCCL|NVSHMEM) (?P<level>INFO|WARN|ERROR|TRACE|ABORT) ?(?P<msg>.*)"
)
_TORCH_OLD = regexes.compile(r"\[(?P<level>[IWEF]) (?P<src>[\w.]{1,256}:\d{1,9})\] ?")
_TORCH = regexes.compile(
    r"(?:\[rank(?P<rank>\d{1,6})\]:)?\[(?P<level>[IWEF])(?P<md>\d{3,4}) (?P<time>\d\d:\d\d:\d\d)(?:\.\d{1,12})?"
    r"(?: \d{1,12})? (?P<src>[^\]\s]{1,256})\] ?"
)
_GLOG = regexes.compile(
    r"(?:\[rank(?P<rank>\d{1,6})\]:)?(?P<level>[IWEF])(?P<md>\d{4}) (?P<time>\d\d:\d\d:\d\d)(?:\.\d{1,12})? {1,8}\d{1,12} "
    r"(?P<src>[^\]\s]{1,256}:\d{1,9})\] ?"
)
_VLLM = regexes.compile(
    r"(?P<level>INFO|WARNING|ERROR|DEBUG|CRITICAL) (?P<md>\d\d-\d\d) (?P<time>\d\d:\d\d:\d\d)"
    r"(?:\.\d{1,12})? (?:\[(?P<src2>[^\]]{1,256})\] )?(?P<src>[\w.]{1,256}:\d{1,9})\] ?"
)
_OLD_RANK = regexes.compile(r"(?:\[gpu_id=(\d{1,6})\]|\[gpu=(\d{1,6})\]|Rank (\d{1,6}):) ")
_RANK_TOKEN = regexes.compile(r"(?<![A-Z_])([A-Z][A-Z_]{0,15}?)(\d{1,6})")
_GLOO = "[Gloo] "
DAY_CACHE_SIZE = 4096            # distinct dates remembered (a log spans a few; a hostile one millions)

@dataclass(slots=True)
class Prefixed:
    body: str
    ts: str | None = None
    secs: float | None = None
    ranks: str | None = None
    rank: int | None = None
    level: str | None = None
    origin: str = "sglang"       # sglang | uvicorn | nccl | torch | glog | vllm | gloo | plain
    extra: dict[str, str] | None = None


@lru_cache(maxsize=DAY_CACHE_SIZE)
def _day_secs(d: str) -> float:
    from datetime import date
    try:
        return float(date.fromisoformat(d).toordinal() - 719163) * 86400.0
    except ValueError:
        return 0.0


def _rank_of(label: str) -> int | None:
    """The TP rank of a label like ' DP0 PP1 TP3 EP3' (attention TP when only DP is shown)."""
    tp = None
    other = None
    for name, num in _RANK_TOKEN.findall(label):
        if name == "TP":
            tp = int(num)
        elif other is None and name in ("PP", "DP", "EP"):
            other = int(num)
    return tp if tp is not None else other


def split_prefix(text: str) -> Prefixed:
    """Strip every prefix layer we recognise from one line; never raises."""
    ts: str | None = None
    secs: float | None = None
    t = text
    if t[:1] == "[":
        m = _SGLANG.match(t)
        if m:
            d, hh, mm, ss, ms, label = m.groups()
            ts = t[1:m.end()].rstrip().rstrip("]")
            if label:
                ts = ts[: len(ts) - len(label)]
            secs = int(hh) * 3600 + int(mm) * 60 + int(ss) + (float("0." + ms) if ms else 0.0)
            if d and len(d) == 10:  # multimodal_gen prints `[MM-DD HH:MM:SS]`: no year, no epoch
                secs += _day_secs(d)
            t = t[m.end():]
            if label:
                p = Prefixed(t, ts, secs, label.strip(), _rank_of(label))
                return _inner(p)
            p = Prefixed(t, ts, secs)
            return _inner(p)
        if t.startswith("[rank") or (len(t) > 2 and t[1] in "IWEF" and t[2:3].isdigit()):
            m = _TORCH.match(t)
            if m:
                rank = m.group("rank")
                return Prefixed(t[m.end():], m.group("md") + " " + m.group("time"), None,
                                f"rank{rank}" if rank else None, int(rank) if rank else None,
                                m.group("level"), "torch", {"source": m.group("src")})
            m = _GLOG.match(t)
            if m:
                rank = m.group("rank")
                return Prefixed(t[m.end():], m.group("md") + " " + m.group("time"), None,
                                f"rank{rank}" if rank else None, int(rank) if rank else None,
                                m.group("level"), "glog", {"source": m.group("src")})
        if t.startswith(_GLOO):
            return Prefixed(t[len(_GLOO):], origin="gloo")
    return _inner(Prefixed(t, ts, secs, origin="sglang" if ts else "plain"))


def _inner(p: Prefixed) -> Prefixed:
    """Prefixes that can follow an SGLang stamp (uvicorn level, NCCL, glog) or stand alone."""
    t = p.body
    c = t[:1]
    if c in "IWEDCT":
        m = _UVICORN.match(t)
        if m:
            p.level, p.origin, p.body = m.group(1), "uvicorn", t[m.end():]
            return p
        m = _VLLM.match(t)
        if m:
            p.level, p.origin, p.body = m.group("level"), "vllm", t[m.end():]
            p.ts = p.ts or (m.group("md") + " " + m.group("time"))
            p.extra = {"source": m.group("src")}
            return p
    if c in "IWEF" and t[1:2].isdigit():
        m = _GLOG.match(t)
        if m:
            p.level, p.origin, p.body = m.group("level"), "glog", t[m.end():]
            p.ts = p.ts or (m.group("md") + " " + m.group("time"))
            p.extra = {"source": m.group("src")}
            return p
    if c == "[" and t.startswith("[rank"):
        m = _TORCH.match(t) or _GLOG.match(t)
        if m:
            rank = m.group("rank")
            p.level, p.origin, p.body = m.group("level"), "torch", t[m.end():]
            if rank:
                p.rank, p.ranks = int(rank), f"rank{rank}"
            p.extra = {"source": m.group("src")}
            return p
    if " NCCL " in t or " NVSHMEM " in t:
        m = _NCCL.match(t)
        if m:
            host, pid, _, rank, loc, lib, level, msg = m.groups()  # one call: every NCCL INFO line comes here
            p.level, p.origin, p.body = level, "nccl", msg
            p.rank, p.ranks = int(rank), f"rank{rank}"
            p.extra = {"host": host, "pid": pid, "location": loc.strip(), "library": lib}
            return p
    if c == "[" and t[2:3] == " ":
        m = _TORCH_OLD.match(t)
        if m:  # older torch C++ logs: `[W socket.cpp:464] [c10d] ...`
            p.level, p.origin, p.body = m.group("level"), "torch", t[m.end():]
            p.extra = {"source": m.group("src")}
            return p
    if c in "[R":
        m = _OLD_RANK.match(t)
        if m:
            r = next(g for g in m.groups() if g is not None)
            p.rank, p.ranks, p.body = int(r), f"TP{r}", t[m.end():]
            if p.origin == "plain":
                p.origin = "sglang"
    return p

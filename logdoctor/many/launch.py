"""Several logs of one launch: one diagnosis of a multi-node launch, the root cause across nodes.

`logdoctor explain node0.log node1.log` (or a directory with --one-launch) reads each file with its own
parser (a traceback's block assembly must never see another node's lines), merges the events by time
(a stable k-way merge, streaming; an event without a time takes its node's last known time), tags
each with its node and gives it a position in merged order (citations.MergedPositions). The ranking then
sees one launch in time order, so the root cause is the node that failed first, not the one that
noticed; every citation is node + line in that node's file.

A single file that interleaves several pods / hosts (`kubectl logs --prefix` on a deployment, stern)
is split the same way: read once as usual while watching the nodes the envelope names; when a second
one shows, a pass collects them all (at most MAX_NODES) and each is re-read filtered to its own lines,
numbered densely (its parser sees its node's output as if it were a file of its own; `Line.origin`
keeps the line in the file as given). stdin whose top names pods / hosts (or that comes with other
files) is spooled to a temp file so that it can be read again; any other stdin is read once, as it comes.
One node is the ordinary path: the same report, byte for byte, as before.
"""
from __future__ import annotations

import heapq
import io
import os
import re
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from operator import itemgetter
from typing import TYPE_CHECKING, Any, BinaryIO

from logdoctor import regexes
from logdoctor.read.citations import Citations, MergedPositions
from logdoctor.read.ingest import InputError, Line, node_of, read_lines, read_stream
from logdoctor.records import dataclass, field

if TYPE_CHECKING:
    from logdoctor.diagnosis.ranking import Report
    from logdoctor.diagnosis.rules import Rule
    from logdoctor.events import Event
    from logdoctor.read.ingest import BatchSink

MAX_NODES = 64          # a file naming more pods / hosts than this is read as one stream (each node costs a pass)
NODE_SNIFF_BYTES = 1 << 20   # the top of stdin that decides whether it is kept to be read again
SPOOL_MAX = 4 << 30          # bytes of stdin kept in a temp file at most
LOCAL = "local"              # the node of lines whose envelope names none, beside lines that name one


class SeveralNodes(Exception):
    """A stream read as one node turned out to interleave several."""

    def __init__(self, stream: Stream) -> None:
        super().__init__(stream.label)
        self.stream = stream


@dataclass
class Stream:
    path: str                 # what is opened (stdin: its spooled copy, or "-" when read once)
    shown: str                # how errors name the file
    label: str                # the node as citations name it
    node: str | None = None   # keep only this node's lines (a file split into its nodes)
    watch: bool = True        # raise SeveralNodes when the envelope names a second node
    first: str = ""           # the node named first in the file (lines above any name belong to it)
    lines: int = 0            # lines as given read so far (the largest line number seen)
    ranks: set[int] = field(default_factory=set)
    once: BinaryIO | None = None  # stdin read as it comes (no node named at its top): cannot be re-read

    def read(self, batch_sink: BatchSink | None, envelope: str | None) -> Iterator[Line]:
        if self.once is not None:
            stream, self.once = self.once, None
            return read_stream(stream, "-", batch_sink, envelope)
        return read_lines(self.path, batch_sink, envelope)


# ------------------------------------------------------------------------------------------------
# line filters


def _node(attrs: dict[str, str]) -> str:
    """The node a line with an envelope is from; LOCAL when the envelope names none (a Ray actor on
    the driver's own node prints `(SGLangEngine pid=4100)`, one on another node adds `ip=`)."""
    return node_of(attrs) or LOCAL


def _watched(lines: Iterable[Line], stream: Stream) -> Iterator[Line]:
    """The lines unchanged; SeveralNodes as soon as a second node shows. A line without an envelope
    (a Ray driver's own output, a line the collector left alone) belongs to the node before it."""
    first: str | None = None
    for ln in lines:
        a = ln.attrs
        if a is not None:
            n = node_of(a) or LOCAL
            if n != first:
                if first is not None:
                    raise SeveralNodes(stream)
                first = n
        yield ln


def _counted(lines: Iterable[Line], stream: Stream) -> Iterator[Line]:
    for ln in lines:
        given = ln.origin if ln.origin is not None else ln.number
        stream.lines = max(stream.lines, given)
        yield ln


def _only(lines: Iterable[Line], node: str, first: str) -> Iterator[Line]:
    """The lines of `node`, numbered 1, 2, 3... with `origin` the line in the file as given. A line
    without an envelope belongs to the node of the line before (the first node at the top)."""
    current = first
    n = 0
    for ln in lines:
        a = ln.attrs
        if a is not None:
            current = _node(a)
        if current == node:
            n += 1
            if ln.origin is None:
                ln.origin = ln.number
            ln.number = n
            yield ln


def nodes_of(path: str, envelope: str | None) -> list[str] | None:
    """The nodes a file's envelope names, in order of appearance; None past MAX_NODES."""
    seen: dict[str, None] = {}
    for ln in read_lines(path, None, envelope):
        a = ln.attrs
        if a is not None:
            n = _node(a)
            if n not in seen:
                seen[n] = None
                if len(seen) > MAX_NODES:
                    return None
    return list(seen)


# ------------------------------------------------------------------------------------------------
# sources


def natural_key(label: str) -> list[Any]:
    """node2 before node10: the order nodes are listed in (and ties in time are broken by)."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d{1,18})", label)]


def _names_a_node(head: bytes, envelope: str | None) -> bool:
    from logdoctor.read.ingest import clean_lines
    try:
        return any(node_of(ln.attrs) for ln in clean_lines(io.BytesIO(head), None, envelope) if ln.attrs)
    except (EOFError, OSError):
        return False


@contextmanager
def stdin_spooled(envelope: str | None, force: bool = False) -> Iterator[tuple[str | None, BinaryIO | None]]:
    """stdin as (a temp copy to read as often as needed, None) when its top names pods / hosts (it may
    have to be split, and a pipe cannot be read twice), else (None, its content stream, read once as
    today; `force`: always the copy). The copy holds at most SPOOL_MAX bytes; past that the rest is read once after it. Every
    check stdin gets (terminal, device, binary, compression) is made first: `/dev/zero` is refused,
    never copied."""
    from logdoctor.read.sniff import open_source, peek_head
    content = open_source("-")
    head, content = peek_head(content, NODE_SNIFF_BYTES, "<stdin>")
    if not force and not _names_a_node(head, envelope):
        yield None, content
        return
    import tempfile  # only for stdin: its import costs every other run ~3 ms
    fd, tmp = tempfile.mkstemp(prefix="logdoctor-stdin-")
    try:
        rest: BinaryIO | None = None
        with os.fdopen(fd, "wb") as out:
            copied = 0
            try:
                while True:
                    chunk = content.read(1 << 20)
                    if not chunk:
                        break
                    out.write(chunk)
                    copied += len(chunk)
                    if copied >= SPOOL_MAX:
                        rest = content
                        break
            except EOFError:
                pass  # truncated compressed data: the log so far
            except OSError as e:
                raise InputError("-", f"read failed ({e.strerror or e})") from None
        if rest is None:
            yield tmp, None
        else:
            with open(tmp, "rb") as first:
                yield None, io.BufferedReader(_Chained(first, rest))
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


class _Chained(io.RawIOBase):
    """Two binary streams read one after the other."""

    def __init__(self, first: BinaryIO, second: BinaryIO) -> None:
        self._parts = [first, second]

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while self._parts:
            data = self._parts[0].read(len(b))
            if data:
                b[:len(data)] = data
                return len(data)
            self._parts.pop(0)
        return 0


def _renamed(e: InputError, stream: Stream) -> InputError:
    """An error about a spooled copy names what the user gave."""
    return InputError(stream.shown, e.reason) if e.source == stream.path and stream.shown != stream.path else e


# ------------------------------------------------------------------------------------------------
# diagnosis


def diagnose_logs(sources: list[str], rules: list[Rule], labels: list[str] | None = None,
                  envelope: str | None = None) -> Report:
    """One report for LOG... of one launch (one log: the ordinary diagnosis)."""
    labels = labels or [_label(s) for s in sources]
    with ExitStack() as stack:
        streams: list[Stream] = []
        for src, lab in zip(sources, labels):
            if src == "-":
                tmp, once = stack.enter_context(stdin_spooled(envelope, force=len(sources) > 1))
                streams.append(Stream(tmp or "-", "-", lab, watch=tmp is not None, once=once))
            else:
                streams.append(Stream(src, src, lab))
        if any(s.once is not None for s in streams):  # a stream read once: no second pass over anything
            for s in streams:
                s.watch = False
        notes: list[str] = []
        while True:
            try:
                return _diagnose_streams(streams, rules, envelope, notes)
            except SeveralNodes as e:
                streams = _split(streams, e.stream, envelope, notes, len(sources) > 1)
            except InputError as e:
                bad = next((s for s in streams if e.source == s.path), None)
                raise (_renamed(e, bad) if bad is not None else e) from None
    raise AssertionError("unreachable")


def _label(source: str) -> str:
    from logdoctor.read.sniff import display_name
    return display_name(source)


def _split(streams: list[Stream], which: Stream, envelope: str | None, notes: list[str],
           several_files: bool) -> list[Stream]:
    nodes = nodes_of(which.path, envelope)
    if nodes is None or len(nodes) < 2:
        which.watch = False
        if nodes is None:
            notes.append(f"{which.label} names more than {MAX_NODES} pods / hosts: read as one log")
        return streams
    out: list[Stream] = []
    for s in streams:
        if s is not which:
            out.append(s)
            continue
        for n in nodes:
            label = f"{s.label}[{n}]" if several_files else n
            out.append(Stream(s.path, s.shown, label, n, False, nodes[0]))
    return out


def _diagnose_streams(streams: list[Stream], rules: list[Rule], envelope: str | None, notes: list[str]) -> Report:
    from logdoctor.diagnosis.ranking import diagnose
    from logdoctor.parse.parse import parse_lines
    from logdoctor.run.fold import fold_lines
    if len(streams) == 1 and streams[0].node is None:
        s = streams[0]
        citations = Citations()

        def read(sink: BatchSink) -> Iterable[Line]:
            lines = s.read(sink, envelope)
            return _watched(lines, s) if s.watch else lines
        report = diagnose(fold_lines(read, s.label, citations), rules, s.label, citations=citations)
        report.notes.extend(notes)
        return report
    streams = sorted(streams, key=lambda s: natural_key(s.label))
    own = [Citations() for _ in streams]
    merged = MergedPositions([s.label for s in streams], own)
    timed = []
    for k, s in enumerate(streams):
        lines = s.read(None, envelope)
        if s.node is not None:
            lines = _only(lines, s.node, s.first)
        elif s.watch:
            lines = _watched(lines, s)
        timed.append(_timed(parse_lines(_counted(lines, s), s.label, own[k]), k, s))
    place = merged.place
    events: Iterator[Event] = (place(k, ev) for _, k, ev in heapq.merge(*timed, key=itemgetter(0)))
    source = ", ".join(_unique(_label(s.shown) for s in _files(streams)))
    report = diagnose(events, rules, source, citations=merged.citations)
    report.run.line_count = sum(s.lines for s in _files(streams))
    report.nodes = [_node_info(s) for s in streams]
    report.notes.extend(notes)
    report.notes.extend(f"{s.label}: no lines" for s in streams if s.lines == 0 and s.node is None)
    return report


_GLOG_TS = regexes.compile(r"(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?$")
_EPOCH_FLOOR = 400 * 86400.0     # seconds: below this a time is seconds since midnight (no date printed)


def glog_secs(ts: str, last: float) -> float | None:
    """Seconds of a torch / glog stamp `MMDD HH:MM:SS.us` (no year: the one of `last`, the node's time
    so far), on the same scale as SGLang's prefix times. Watchdog lines carry no SGLang prefix, and
    their node's last SGLang time can be ten minutes older: without this, node 0's watchdog would
    sort before the error on node 1 it is the consequence of."""
    m = _GLOG_TS.match(ts)
    if m is None:
        return None
    mo, dd, hh, mi, ss, frac = m.groups()
    day = int(hh) * 3600 + int(mi) * 60 + int(ss) + (float("0." + frac) if frac else 0.0)
    if last < _EPOCH_FLOOR:
        return day
    from datetime import date
    try:
        year = date.fromordinal(int(last // 86400) + 719163).year
        days = date(year, int(mo), int(dd)).toordinal() - 719163
    except ValueError:
        return None
    secs = days * 86400.0 + day
    return secs + (_year_secs(year) if secs < last - 180 * 86400 else 0.0)  # a log across new year


def _year_secs(year: int) -> float:
    import calendar
    return (366 if calendar.isleap(year + 1) else 365) * 86400.0


def _timed(events: Iterable[Event], k: int, stream: Stream) -> Iterator[tuple[float, int, Event]]:
    """(time key, node, event); the key never goes back (a node's events keep their order)."""
    last = float("-inf")
    ranks = stream.ranks
    for ev in events:
        s = ev.secs
        if s is None and ev.ts is not None and ev.ts[:1].isdigit():
            s = glog_secs(ev.ts, last)
        if s is not None and s > last:
            last = s
        if ev.rank is not None and len(ranks) < 4096:
            ranks.add(ev.rank)
        yield last, k, ev


def _files(streams: list[Stream]) -> list[Stream]:
    """One stream per file (the split ones share a file; their line counts are the same)."""
    seen: dict[str, Stream] = {}
    for s in streams:
        seen.setdefault(s.path, s)
    for s in streams:
        if s.lines > seen[s.path].lines:
            seen[s.path] = s
    return list(seen.values())


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _node_info(s: Stream) -> dict[str, Any]:
    ranks = sorted(s.ranks)
    return {"node": s.label, "file": _label(s.shown), "ranks": _span(ranks) if ranks else None, "lines": s.lines}


def _span(ranks: list[int]) -> str:
    """[0, 1, 2, 3, 8] → "0-3,8"."""
    out: list[str] = []
    start = prev = ranks[0]
    for r in ranks[1:] + [None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if r is not None:
            start = prev = r
    return ",".join(out)


__all__ = ["MAX_NODES", "SeveralNodes", "diagnose_logs", "natural_key", "nodes_of", "stdin_spooled"]

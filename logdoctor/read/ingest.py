"""Bytes to clean lines: the only stage that reads files (opening and sniffing them is `sniff`'s).

Never fails on content: bytes are decoded as UTF-8 with replacement, ANSI colour and NUL are removed,
the collector's envelope (kubectl / CRI / docker / journald / Ray / cloud exports, docker-compose
`svc-1  | `, quoted `> `: envelope.py) is peeled into `Line.attrs`, lines a terminal hard-wrapped are
joined, and a line over `MAX_LINE_BYTES` is cut and marked.

Line ends and line numbers. Line numbers are what `grep -n`, `sed -n Np` and an editor show, so evidence
can be looked up:
- a file with LF (or CRLF) line ends is numbered by its LF; a bare CR inside such a line does not start a
  new number. It does split the text, though: `a\\rb` becomes two lines, `a` and `b`, that share the
  number, so a failure written after a CR is never hidden inside another line. The exception is a
  progress-bar redraw (tqdm and friends): a run of `\\r`-separated progress states keeps only its final
  state, as a terminal would show it.
- a file whose line end is the bare CR (old Mac tools, some exporters: at least `CR_LINES_MIN` lines in
  the first `CR_SNIFF_BYTES` end in a CR, and more than end in LF) is read with universal newlines: CR,
  LF and CRLF each end a line and each counts one number, as `tr '\\r' '\\n' | grep -n` would. Runs of
  progress redraws still collapse to their final state (their numbers are skipped).

Memory stays bounded whatever the input: a line holds at most 1 MiB of bytes (so at most 1 Mi
characters after decoding), the wrap sample is bounded by `WRAP_SAMPLE_LINES` and `WRAP_SAMPLE_BYTES`,
and a joined hard-wrapped line stops growing at `MAX_LINE_BYTES` characters. Every regular expression
here is bounded or anchored so that its work per line is linear in the line's length.
"""
from __future__ import annotations

import io
import itertools
import os
import re
import sys
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any, BinaryIO

from logdoctor import regexes
from logdoctor.read import bulkscan
from logdoctor.read.bulkscan import BlockScan
from logdoctor.read.envelope import LAYER_NAMES, Envelope
from logdoctor.read.envelope import detect as detect_envelope
from logdoctor.read.envelope_stream import peel_lines, reversed_raws
from logdoctor.read.sniff import InputError, open_source, peek_head
from logdoctor.records import dataclass

MAX_LINE_BYTES = 1 << 20
TRUNCATION_MARK = " [logdoctor: line cut at 1 MiB]"
WRAP_SAMPLE_LINES = 2000
WRAP_SAMPLE_BYTES = 4 << 20          # ≤ 16 MiB of str even if every character needs 4 bytes
CR_SNIFF_BYTES = 64 << 10
CR_LINES_MIN = 16
MIN_WRAP_WIDTH, MAX_WRAP_WIDTH = 60, 4096   # terminal widths a hard wrap can come from
_READ_BUFFER = 1 << 16

__all__ = ["ANSI_ESCAPE", "LAYER_NAMES", "MAX_LINE_BYTES", "TRUNCATION_MARK", "InputError", "Line", "clean_lines", "decoded_lines",
           "iter_sources", "lines_from_text", "node_of", "open_source", "read_lines", "read_stream"]


@dataclass(slots=True)
class Line:
    number: int
    text: str
    truncated: bool = False
    wrapped: bool = False        # text is the join of a hard-wrapped line and its continuation(s)
    # What the collector's envelope said (see envelope.py): collector `time`, `stream`, `pod`,
    # `container`, `namespace`, `host`, `k8s_node`, `actor`, `pid`, `ip`, `unit`, `severity`, and
    # `envelope` (the layers peeled, outermost first, joined by "+"). None for a plain line.
    attrs: dict[str, str] | None = None
    # `number` always increases along the stream (it orders events). When the stream is not read in
    # file order (a newest-first export read oldest-first), `origin` is the line number in the file as
    # given, and every citation must use it.
    origin: int | None = None


NODE_KEYS = ("pod", "host", "ip")


def node_of(attrs: dict[str, str] | None) -> str | None:
    """Which machine / pod a line came from, by what its envelope says (None when it says nothing)."""
    if attrs:
        for key in NODE_KEYS:
            value = attrs.get(key)
            if value:
                return value
    return None


# Bounded repetitions throughout: a log line is untrusted input, and `re` backtracks.
ANSI_ESCAPE = regexes.compile(r"\x1b\[[0-9;?]{0,64}[ -/]{0,16}[@-~]|\x1b\][^\x07\x1b]{0,4096}(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
# the digit runs are bounded and must start a number: a line of 40k digits costs 40k cheap steps
_PROGRESS_NUMBERS = regexes.compile(r"(?<![0-9])[0-9]{1,3}%\||(?<![0-9])[0-9]{1,12}/[0-9]{1,12} \[")


def _is_progress(text: str) -> bool:
    """A tqdm-style progress state (`42%|`, `3/8 [`, `it/s`); substring tests first, in C."""
    if "it/s" in text or "s/it" in text:
        return True
    if "%|" in text or " [" in text:
        return _PROGRESS_NUMBERS.search(text) is not None
    return False


# ------------------------------------------------------------------------------------------------
# bytes to lines


class _CrToLf(io.RawIOBase):
    """Universal newlines for a CR-terminated file: CRLF and lone CR become LF, in C-speed replaces."""

    def __init__(self, inner: BinaryIO) -> None:
        self._read = getattr(inner, "read1", None) or inner.read
        self._cr = False   # the last chunk ended in CR: it may be the first half of a CRLF
        self._out = b""

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self._out:
            chunk = self._read(_READ_BUFFER)
            data = b"\r" + chunk if self._cr else chunk
            self._cr = False
            if not chunk:  # end of data: a held-back CR still ends the last line
                if not data:
                    return 0
                self._out = b"\n"
                break
            if data.endswith(b"\r"):
                data, self._cr = data[:-1], True
            self._out = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        n = min(len(b), len(self._out))
        b[:n] = self._out[:n]
        self._out = self._out[n:]
        return n


def _cr_terminated(head: bytes) -> bool:
    """True when the file's own line end is the bare CR (see the module docstring)."""
    if head.count(b"\r") < CR_LINES_MIN:
        return False
    pieces = head.replace(b"\r\n", b"\n").split(b"\r")
    ended = [p.rsplit(b"\n", 1)[-1] for p in pieces[:-1]]  # the text each lone CR ends
    lone = sum(1 for p in ended if p.strip() and not _is_progress(p.decode("utf-8", "replace")))
    return lone >= CR_LINES_MIN and lone > head.count(b"\n")


def _raw_lines(stream: BinaryIO) -> Iterator[tuple[bytes, bool]]:
    """Yield (line bytes without newline, truncated) with bounded memory per line."""
    produced = False
    while True:
        try:
            chunk = stream.readline(MAX_LINE_BYTES)
        except EOFError:
            if not produced:
                raise
            return  # a .gz still being written: the log so far
        if not chunk:
            return
        produced = True
        if chunk.endswith(b"\n"):
            yield chunk[:-1], False
            continue
        if len(chunk) < MAX_LINE_BYTES:  # last line without newline
            yield chunk, False
            return
        # over-long line: keep the first MiB, skip the rest up to the newline, a MiB at a time
        while True:
            try:
                rest = stream.readline(MAX_LINE_BYTES)
            except EOFError:
                rest = b""
            if not rest or rest.endswith(b"\n"):
                break
        yield chunk, True


def _clean(text: str) -> str:
    """ANSI colour and NUL removed, the CR of a CRLF dropped (other CRs are `_pieces`' business)."""
    if "\x1b" in text:
        text = ANSI_ESCAPE.sub("", text)
    if "\x00" in text:
        text = text.replace("\x00", "")
    if text.endswith("\r"):
        text = text.rstrip("\r")
    return text


_CAPTURE_BAR = "Capturing batches ("


def _pieces(text: str) -> list[str]:
    """The lines inside one physical line: split at bare CRs, progress redraws collapsed."""
    if "\r" not in text:
        return [text]
    parts = [p for p in text.split("\r") if p.strip()]
    if len(parts) <= 1:
        return parts or [""]
    progress = [_is_progress(p) for p in parts]
    last = len(parts) - 1
    # a progress state followed by another is a redraw: only the final state of each run was visible. A CUDA-graph
    # capture bar is kept frame by frame: each frame names the batch size and the free memory after the graphs so
    # far, which is how graph memory is measured (run/graph_memory.py)
    return [p for i, p in enumerate(parts)
            if not (i < last and progress[i] and progress[i + 1]) or p.startswith(_CAPTURE_BAR)]


def _lines_of(number: int, text: str, truncated: bool) -> list[Line]:
    """The lines of one decoded physical line (usually one; more when bare CRs split it)."""
    texts = _pieces(_clean(text))
    if truncated:
        texts[-1] += TRUNCATION_MARK
    return [Line(number, t, truncated and i == len(texts) - 1) for i, t in enumerate(texts)]


def _whole_line_of(number: int, text: str, truncated: bool) -> list[Line]:
    """One physical line as one Line, its bare CRs kept: for an enveloped stream, whose envelope comes
    off (and whose CRI partial records are joined) before the CRs split the text (envelope_stream)."""
    text = _clean(text)
    if truncated:
        text += TRUNCATION_MARK
    return [Line(number, text, truncated)]


LinesOf = Callable[[int, str, bool], list[Line]]


def _decoded(raws: Iterator[tuple[bytes, bool]], number: int, lines_of: LinesOf = _lines_of) -> Iterator[Line]:
    """Lines of the physical lines `raws`, numbered on from `number`.

    The hot loop of every command: the tests are inlined, and made on str (`in` on str is several
    times faster than on bytes for these one-character needles).
    """
    for raw, truncated in raws:
        number += 1
        text = raw.decode("utf-8", "replace")
        if truncated or "\r" in text or "\x1b" in text or "\x00" in text:
            yield from lines_of(number, text, truncated)
        else:
            yield Line(number, text)


def decoded_lines(stream: BinaryIO) -> Iterator[Line]:
    return _decoded(_raw_lines(stream), 0)


def _collapse_redraw_lines(lines: Iterator[Line]) -> Iterator[Line]:
    """In a CR-terminated file progress redraws are lines of their own: keep the last of each run."""
    held: Line | None = None
    for ln in lines:
        if held is not None and not (_is_progress(held.text) and _is_progress(ln.text)):
            yield held
        held = ln
    if held is not None:
        yield held


# ------------------------------------------------------------------------------------------------
# terminal wrapping (measured on the text after its envelope is peeled)


def _wrap_width_of(sample: list[Line], env: Envelope) -> int | None:
    # only lengths are needed (no stripped copies are kept); a line cut at 1 MiB is no terminal's width
    # (nothing detected: no sample line has an envelope to peel)
    peel = env.peel if env.detected else None
    return _guess_wrap_width(len(peel(ln.text)[0]) if peel else len(ln.text) for ln in sample
                             if not ln.truncated and ln.text.strip())


def _guess_wrap_width(text_lengths: Iterable[int]) -> int | None:
    """A terminal hard-wrap shows as many lines of one exact length W and none longer."""
    lengths = Counter(n for n in text_lengths if n >= MIN_WRAP_WIDTH)
    if not lengths:
        return None
    width, count = lengths.most_common(1)[0]
    longer = sum(c for ln, c in lengths.items() if ln > width)
    if width <= MAX_WRAP_WIDTH and count >= 3 and longer == 0 and count >= 0.1 * sum(lengths.values()):
        return width
    return None


_RECORD_START = regexes.compile(
    r"^(\[\d|\[rank\d|\[\w{1,64}\]|[A-Z]\d{4} |\w[\w.-]{0,255}:\d{1,10}:\d{1,10} \[\d{1,6}\]|INFO|WARNING|ERROR|"
    r"DEBUG|Traceback|  File |\S{1,256}?(?:Error|Exception)|During handling|The above exception|Loading |"
    r"Capturing )"
)


BatchSink = Callable[[bytes, int], None]  # (newline-joined periodic lines, number of the last line)
BULK_CHUNK = 4 << 20


def _take_sample(raws: Iterator[tuple[bytes, bool]],
                 stream: BinaryIO | None = None) -> tuple[list[Line], list[tuple[bytes, bool]], bool]:
    """The first lines, bounded by count and bytes, ending on a physical line, their raw bytes (kept
    in case the stream must be read backwards), and True if more may follow.

    Bounded by bytes too: 2,000 lines of 1 MiB of emoji would otherwise be 8 GB of str held at once.

    `raws` are `stream`'s physical lines (_raw_lines). A regular file's stream is read a buffer at a time
    instead: the complete lines its buffer holds are taken together (_sample_block) and read past, and a
    line the buffer does not hold whole is read through `raws`; from a buffer with a CR, colour or NUL in it
    (or near the byte limit) on, every line is read through `raws`. Either way the stream is left just
    after the last line taken, and the lines are the ones `raws` alone would give.
    """
    sample: list[Line] = []
    kept: list[tuple[bytes, bool]] = []
    size = 0
    number = 0
    peek = stream.peek if _peekable(stream) else None  # type: ignore[union-attr]
    while True:
        if peek is not None:
            buf = peek(_READ_BUFFER)
            cut = buf.rfind(b"\n")
            if cut >= 0:
                taken = _sample_block(buf[:cut], number, size, sample, kept)
                if taken is None:
                    peek = None  # a line of this buffer needs cleaning: the rest line by line
                else:
                    stream.read(taken[0])  # type: ignore[union-attr]
                    number, size = taken[1], taken[2]
                    if len(sample) >= WRAP_SAMPLE_LINES or size >= WRAP_SAMPLE_BYTES:
                        return sample, kept, True
                    continue
        item = next(raws, None)
        if item is None:
            return sample, kept, False
        raw, truncated = item
        number += 1
        kept.append((raw, truncated))
        text = raw.decode("utf-8", "replace")
        if truncated or "\r" in text or "\x1b" in text or "\x00" in text:
            sample.extend(_lines_of(number, text, truncated))
        else:
            sample.append(Line(number, text))
        size += len(raw)
        if len(sample) >= WRAP_SAMPLE_LINES or size >= WRAP_SAMPLE_BYTES:
            return sample, kept, True


def _peekable(stream: BinaryIO | None) -> bool:
    """A buffered regular file: its buffer can be looked at before it is read, and reading it never ends
    in EOFError (as a compressed stream still being written does, which _raw_lines must see first)."""
    return type(stream) is io.BufferedReader and type(stream.raw) is io.FileIO


def _sample_block(block: bytes, number: int, size: int, sample: list[Line],
                  kept: list[tuple[bytes, bool]]) -> tuple[int, int, int] | None:
    """_take_sample's lines from `block` (complete lines, newline-joined), as its one-line loop takes them, up
    to the line limit, when each is one clean Line and the byte limit is out of reach; else None (nothing
    taken). Returns the bytes taken (newlines included), the last line's number and the size."""
    if (block.find(b"\r") >= 0 or block.find(b"\x1b") >= 0 or block.find(b"\x00") >= 0
            or size + len(block) >= WRAP_SAMPLE_BYTES):
        return None
    take = block.split(b"\n")[:WRAP_SAMPLE_LINES - len(sample)]
    # a newline always ends an invalid sequence, so each line's text is what decoding it alone gives
    texts = block.decode("utf-8", "replace").split("\n", len(take))[:len(take)]
    sample.extend(map(Line, range(number + 1, number + 1 + len(take)), texts))
    kept.extend(zip(take, itertools.repeat(False)))
    taken = sum(map(len, take))
    return taken + len(take), number + len(take), size + taken


def clean_lines(stream: BinaryIO, batch_sink: BatchSink | None = None,
                envelope: str | None = None) -> Iterator[Line]:
    """Decoded lines with their envelope peeled and hard-wrapped lines joined (constant memory).

    `envelope`: None detects the collector's envelope from the first lines (envelope.py), "none"
    peels nothing, a layer name (envelope.LAYER_NAMES) peels that layer only; ValueError otherwise.

    With `batch_sink`, periodic `Decode batch` / `Prefill batch` lines after the first sample are not
    yielded: they are handed to the sink in bulk (newline-joined bytes, envelope and all), which is how
    `summary` and `explain` keep up with multi-GB serving logs. Line numbers of the other lines stay exact.

    The stream is sniffed and its first lines read when this is called, not at the first line asked for: the
    iterator returned is the last stage itself (one generator step less a line than delegating to it).
    """
    head, stream = peek_head(stream, CR_SNIFF_BYTES)
    cr_ended = _cr_terminated(head)
    del head
    if cr_ended:
        stream = io.BufferedReader(_CrToLf(stream), _READ_BUFFER)
    raws = _raw_lines(stream)
    sample, kept, more = _take_sample(raws, stream)
    env = detect_envelope((ln.text for ln in sample), envelope)
    width = _wrap_width_of(sample, env)
    # an enveloped stream splits its bare CRs after peeling: a CRI record cut inside a tqdm redraw is
    # joined first, and every piece keeps what the envelope said
    lines_of = _whole_line_of if env.detected else _lines_of
    if env.newest_first:
        del sample
        lines = _reversed_lines(reversed_raws(itertools.chain(kept, raws)), lines_of)
    else:
        if env.detected:
            sample = [ln for i, (raw, truncated) in enumerate(kept, 1)
                      for ln in _whole_line_of(i, raw.decode("utf-8", "replace"), truncated)]
        del kept
        bulk = batch_sink is not None and more and not width
        shape = _bulk_shape(env)
        last_number = sample[-1].number if sample else 0
        pending: deque[Line] = deque(sample)
        del sample  # the deque is drained as lines are yielded: nothing keeps the sample alive after that

        def drained() -> Iterator[Line]:
            while pending:
                yield pending.popleft()

        rest = (_bulk_lines(stream, last_number, batch_sink, shape, lines_of) if bulk and batch_sink is not None
                else _decoded(raws, last_number, lines_of))
        lines = itertools.chain(drained(), rest)  # chained in C: past the sample, one generator less a line
    if cr_ended:
        lines = _collapse_redraw_lines(lines)
    if not env.off:
        lines = peel_lines(lines, env, _split_peeled, MAX_LINE_BYTES, TRUNCATION_MARK, bool(env.detected))
    if width:
        lines = _join_wrapped(lines, width)
    return lines


def _split_peeled(text: str) -> list[str]:
    """The lines inside a peeled text (a JSON `log` may carry newlines, CRs and colour as escapes)."""
    return [t for part in text.split("\n") for t in _pieces(_clean(part))]


def _reversed_lines(raws: Iterator[tuple[int, bytes, bool]], lines_of: LinesOf) -> Iterator[Line]:
    """Lines of a stream read last line first: `number` counts in reading order, `origin` is the file's."""
    number = 0
    for origin, raw, truncated in raws:
        number += 1
        for ln in lines_of(number, raw.decode("utf-8", "replace"), truncated):
            ln.origin = origin
            yield ln


def _join_wrapped(lines: Iterator[Line], width: int) -> Iterator[Line]:
    """Join a line of exactly the wrap width with the continuation(s) after it."""
    held: Line | None = None
    parts: list[str] = []
    joined = 0
    for ln in lines:
        if held is not None:
            if (len(parts[-1]) == width and ln.text and joined < MAX_LINE_BYTES
                    and not _RECORD_START.match(ln.text)):
                parts.append(ln.text)  # joined once at the end: repeated += would copy quadratically
                joined += len(ln.text)
                held.wrapped = True
                continue
            if len(parts) > 1:
                held.text = "".join(parts)
            yield held
        held, parts, joined = ln, [ln.text], len(ln.text)
    if held is not None:
        if len(parts) > 1:
            held.text = "".join(parts)
        yield held


# ------------------------------------------------------------------------------------------------
# the bulk path for long serving logs


def _bulk_lines(stream: BinaryIO, number: int, sink: BatchSink, shape: _BulkShape,
                lines_of: LinesOf = _lines_of) -> Iterator[Line]:
    """Chunked reading: batch lines go to `sink` in bulk, the rest are yielded one by one."""
    carry = b""
    skipping = False  # inside an over-long line, discarding up to its newline
    counter = [number, 0]  # the last line's number; 1 when it was a partial record (see _scan_block)
    try:
        while True:
            try:
                chunk = stream.read(BULK_CHUNK)
            except EOFError:
                break  # a .gz still being written
            if not chunk:
                break
            if skipping:
                nl = chunk.find(b"\n")
                if nl < 0:
                    continue
                chunk, skipping = chunk[nl + 1:], False
            cut = chunk.rfind(b"\n")
            if cut < 0:
                data = carry + chunk
                if len(data) >= MAX_LINE_BYTES:
                    number += 1
                    yield from lines_of(number, data[:MAX_LINE_BYTES].decode("utf-8", "replace"), True)
                    carry, skipping = b"", True
                else:
                    carry = data
                continue
            # the block is the carried partial line and the chunk up to its last newline, copied once
            block = b"".join((carry, memoryview(chunk)[:cut])) if carry else chunk[:cut]
            carry = chunk[cut + 1:]
            counter[0] = number
            yield from _scan_block(block, counter, sink, shape, lines_of)
            number = counter[0]
    finally:
        bulkscan.forget()
    if carry and not skipping:
        number += 1
        yield from lines_of(number, carry[:MAX_LINE_BYTES].decode("utf-8", "replace"), len(carry) > MAX_LINE_BYTES)


_PERIODIC_MARKS = (b"Decode batch", b"Prefill batch", b'HTTP/1.1" 200')
_SMALL_BLOCK = 1 << 16


# what every block is scanned for (bulkscan: one pass when compiled): its lines and what makes it dirty
_BLOCK_NEEDLES = (b"\n", b"\x1b", b"\r", b"\x00")


@dataclass(frozen=True, slots=True)
class _BulkShape:
    """How periodic lines look inside this stream's envelope, and which records are partial.

    A partial record (CRI `P`, a docker json-file `log` without its newline) and the record after it
    never go to the sink: envelope_stream joins them into one line first. `has_partial` asks that of a
    raw line, `block_partial` of a whole scanned block (the same test, on the counts of `tells`)."""

    marks: tuple[bytes, ...] = _PERIODIC_MARKS
    has_partial: Callable[[bytes], bool] | None = None
    block_partial: Callable[[BlockScan], bool] | None = None
    tells: tuple[bytes, ...] = ()

    @property
    def needles(self) -> tuple[bytes, ...]:
        return _BLOCK_NEEDLES + self.marks + self.tells


_CRI_TELLS = (b" stdout P ", b" stderr P ")


# Each test is written once, over `has` / `count`: a raw line answers them with `in` / bytes.count, a scanned
# block from its counts.
Has = Callable[[bytes], bool]
Count = Callable[[bytes], int]


def _cri_partial_by(has: Has, count: Count) -> bool:
    return has(b" stdout P ") or has(b" stderr P ")


_JSON_TELLS = (b'"logtag":"', b'"_p":"', b'"logtag":"P"', b'"_p":"P"', b'"log":"', b'\\n","')


def _json_partial_by(has: Has, count: Count) -> bool:
    if has(b'"logtag":"') or has(b'"_p":"'):  # fluent-bit's CRI parsers: the tag says it
        return has(b'"logtag":"P"') or has(b'"_p":"P"')
    return count(b'"log":"') != count(b'\\n","')  # docker json-file: `log` ends in \n unless split


def _cri_partial(raw: bytes) -> bool:
    return _cri_partial_by(_holds(raw), raw.count)


def _cri_block_partial(scan: BlockScan) -> bool:
    return _cri_partial_by(scan.has, scan.count)


def _json_partial(raw: bytes) -> bool:
    return _json_partial_by(_holds(raw), raw.count)


def _json_block_partial(scan: BlockScan) -> bool:
    return _json_partial_by(scan.has, scan.count)


_PLAIN_SHAPE = _BulkShape()
# inside a JSON string the quotes of an access line are escaped
_JSON_SHAPE = _BulkShape(_PERIODIC_MARKS[:2] + (b'HTTP/1.1\\" 200',), _json_partial, _json_block_partial, _JSON_TELLS)
_CRI_SHAPE = _BulkShape(_PERIODIC_MARKS, _cri_partial, _cri_block_partial, _CRI_TELLS)


def _bulk_shape(env: Envelope) -> _BulkShape:
    if env.json:
        return _JSON_SHAPE
    return _CRI_SHAPE if env.cri else _PLAIN_SHAPE


# `find`, not `in`: bytes' `in` first tries its operand as an int, and formats the TypeError it then drops
# (~0.1 us a test, three tests a line)
def _is_periodic(raw: bytes) -> bool:
    return ((raw.find(b" batch") >= 0 and (raw.find(b"Decode batch") >= 0 or raw.find(b"Prefill batch") >= 0))
            or raw.find(b'HTTP/1.1" 200') >= 0)


def _holds(raw: bytes) -> Has:
    return lambda needle: raw.find(needle) >= 0


def _scan_block(block: bytes, counter: list[int], sink: BatchSink, shape: _BulkShape = _PLAIN_SHAPE,
                lines_of: LinesOf = _lines_of) -> Iterator[Line]:
    """Hand all-periodic stretches to `sink` whole (counted in C); look line by line only where needed.

    A block whose line count equals its count of periodic markers holds nothing else; otherwise it is
    halved until the stretches that hold other lines are small. Steady serving logs never reach the
    per-line loop, which is what keeps multi-GB logs within reach of `grep -c`.
    """
    scan = bulkscan.scan(block, shape.needles)  # kept: the sink is handed this very block and asks again
    n_lines = scan.count(b"\n") + 1
    dirty = scan.has(b"\x1b") or scan.has(b"\r") or scan.has(b"\x00")
    partial = shape.has_partial
    n_marks = sum(scan.count(m) for m in shape.marks)
    if not dirty:
        if (n_marks == n_lines and len(block) < n_lines * 8192 and not counter[1]
                and (shape.block_partial is None or not shape.block_partial(scan))):
            counter[0] += n_lines
            sink(block, counter[0])
            return
        if n_marks and len(block) > _SMALL_BLOCK:
            mid = block.find(b"\n", len(block) // 2)
            if mid > 0:
                yield from _scan_block(block[:mid], counter, sink, shape, lines_of)
                yield from _scan_block(block[mid + 1:], counter, sink, shape, lines_of)
                return
    number = counter[0]
    if not n_marks and partial is None and not counter[1] and len(block) <= MAX_LINE_BYTES:
        # nothing periodic and no line that can be over the limit: decoded whole (a newline always ends an
        # invalid sequence, so each line's text is what decoding it alone gives), lines cleaned as below
        for text in block.decode("utf-8", "replace").split("\n"):
            number += 1
            if dirty and ("\r" in text or "\x1b" in text or "\x00" in text):
                yield from lines_of(number, text, False)
            else:
                yield Line(number, text)
        counter[0] = number
        return
    batch: list[bytes] = []
    last_periodic = 0
    plain = shape is _PLAIN_SHAPE
    after_partial = counter[1]
    for raw in block.split(b"\n"):
        number += 1
        if partial is not None:
            was_after, after_partial = after_partial, partial(raw)
            periodic = not was_after and not after_partial and any(raw.find(m) >= 0 for m in shape.marks)
        else:
            periodic = _is_periodic(raw) if plain else any(raw.find(m) >= 0 for m in shape.marks)
        if len(raw) < 8192 and periodic and not (dirty and raw.rstrip(b"\r").find(b"\r") >= 0):
            batch.append(raw)
            last_periodic = number
            continue
        if len(raw) > MAX_LINE_BYTES:
            yield from lines_of(number, raw[:MAX_LINE_BYTES].decode("utf-8", "replace"), True)
        elif dirty:  # the block holds a CR, colour or NUL somewhere: this line may not
            text = raw.decode("utf-8", "replace")
            if "\r" in text or "\x1b" in text or "\x00" in text:
                yield from lines_of(number, text, False)
            else:
                yield Line(number, text)
        else:
            yield Line(number, raw.decode("utf-8", "replace"))
    counter[0] = number
    counter[1] = after_partial
    if batch:
        sink(b"\n".join(batch), last_periodic)


# ------------------------------------------------------------------------------------------------
# entry points


def read_lines(source: str | os.PathLike[str], batch_sink: BatchSink | None = None,
               envelope: str | None = None) -> Iterator[Line]:
    """All clean lines of one source; InputError (naming it) if it cannot be opened or read.

    `envelope` as in clean_lines (ValueError for an unknown layer name, before the source is opened).
    Nothing is opened until the first line is asked for."""
    return _read(source, None, batch_sink, envelope)


def read_stream(stream: BinaryIO, source: str | os.PathLike[str], batch_sink: BatchSink | None = None,
                envelope: str | None = None) -> Iterator[Line]:
    """Clean lines of an opened content stream (what read_lines does after open_source); errors name
    `source`. The caller closes the stream."""
    return _read(source, stream, batch_sink, envelope)


def _read(source: str | os.PathLike[str], stream: BinaryIO | None, batch_sink: BatchSink | None,
          envelope: str | None) -> Iterator[Line]:
    """read_lines (`stream` None: opened here, and closed) and read_stream, as one generator: each line passes
    through one generator step here, not two."""
    opened = stream is None
    if stream is None:
        if envelope is not None and envelope != "none" and envelope not in LAYER_NAMES:
            raise ValueError(f"unknown envelope {envelope!r} (one of: none, {', '.join(LAYER_NAMES)})")
        stream = open_source(source)
    produced = False
    try:
        lines = clean_lines(stream, batch_sink, envelope)
        for ln in lines:  # the first line by hand, the rest delegated (one generator step less a line)
            produced = True
            yield ln
            break
        yield from lines
    except EOFError as e:
        # compressed data still being written ends mid-stream: what was readable is the log so far
        if not produced:
            raise InputError(source, f"read failed: truncated compressed data ({e})") from None
    except OSError as e:  # an I/O error of the device under the file
        raise InputError(source, f"read failed ({e.strerror or e})") from None
    finally:
        if opened and stream is not getattr(sys.stdin, "buffer", None):
            stream.close()


def lines_from_text(text: str, envelope: str | None = None) -> Iterator[Line]:
    """Clean lines of an in-memory string (tests, fuzzing)."""
    return clean_lines(io.BytesIO(text.encode("utf-8", errors="surrogatepass")), envelope=envelope)


def iter_sources(sources: Iterable[str]) -> Iterator[tuple[str, Iterator[Line]]]:
    for s in sources:
        yield s, read_lines(s)


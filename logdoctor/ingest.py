"""Bytes to clean lines: the only stage that touches files.

Never fails on content: bytes are decoded as UTF-8 with replacement, CRLF / `\\r` redraws / ANSI colour /
NUL are cleaned, paste wrappers (docker-compose `svc-1  | `, quoted `> `) are removed, lines a terminal
hard-wrapped are joined, and a line over `MAX_LINE_BYTES` is cut and marked. Every line keeps the
1-based number it had in the input, so evidence can cite it.
"""
from __future__ import annotations

import io
import os
import re
import sys
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

MAX_LINE_BYTES = 1 << 20
TRUNCATION_MARK = " [logdoctor: line cut at 1 MiB]"
WRAP_SAMPLE_LINES = 2000


class InputError(Exception):
    """A source that cannot be read at all (missing, a directory, permission denied, ...)."""


@dataclass(slots=True)
class Line:
    number: int
    text: str
    truncated: bool = False
    wrapped: bool = False        # text is the join of a hard-wrapped line and its continuation(s)


_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_DOCKER = re.compile(r"^([A-Za-z0-9][\w.-]*(?:[-_]\d+)?)\s+\| ")
_QUOTE = re.compile(r"^(?:> ?)+")
_PROGRESS_HINT = re.compile(r"\d+%\||it/s|s/it|\d+/\d+ \[")


def open_source(source: str | os.PathLike[str]) -> BinaryIO:
    """Open a path, `-` (stdin) or a `.gz` file for binary reading; raise InputError on failure."""
    import gzip  # only here and in read errors: most logs are plain text

    if str(source) == "-":
        stream: BinaryIO = sys.stdin.buffer
        head = stream.peek(2)[:2] if hasattr(stream, "peek") else b""
        return gzip.GzipFile(fileobj=stream) if head == b"\x1f\x8b" else stream  # type: ignore[return-value]
    path = Path(source)
    try:
        if path.is_dir():
            raise InputError(f"{path}: is a directory")
        raw = open(path, "rb")
    except InputError:
        raise
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied") from None
    except OSError as e:
        raise InputError(f"{path}: cannot open ({e.strerror or e})") from None
    head = raw.read(2)
    raw.seek(0) if raw.seekable() else None
    if head == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]
    if not raw.seekable():  # FIFO: we consumed two bytes; put them back in front
        return io.BufferedReader(_Prepend(head, raw))  # type: ignore[arg-type]
    return raw


class _Prepend(io.RawIOBase):
    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        self._head, self._rest = head, rest

    def readable(self) -> bool:
        return True

    def readinto(self, b: memoryview) -> int:  # type: ignore[override]
        if self._head:
            n = min(len(b), len(self._head))
            b[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._rest.read(len(b))
        b[: len(data)] = data
        return len(data)


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
        # over-long line: keep the first MiB, skip the rest up to the newline
        while True:
            rest = stream.readline(MAX_LINE_BYTES)
            if not rest or rest.endswith(b"\n"):
                break
        yield chunk, True


def _clean(text: str) -> str:
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    if "\x00" in text:
        text = text.replace("\x00", "")
    if "\r" in text:
        text = _last_redraw(text)
    return text


def _last_redraw(text: str) -> str:
    """A `\\r`-redrawn progress bar keeps only its final state; other text before a `\\r` is kept."""
    parts = [p for p in text.split("\r") if p.strip()]
    if not parts:
        return ""
    if all(_PROGRESS_HINT.search(p) for p in parts[:-1]):
        return parts[-1]
    # mixed content: keep the last state of each run of progress redraws, joined by a space
    kept: list[str] = []
    for i, p in enumerate(parts):
        nxt = parts[i + 1] if i + 1 < len(parts) else None
        if nxt is not None and _PROGRESS_HINT.search(p) and _PROGRESS_HINT.search(nxt):
            continue
        kept.append(p)
    return " ".join(kept)


def decoded_lines(stream: BinaryIO) -> Iterator[Line]:
    number = 0
    for raw, truncated in _raw_lines(stream):
        number += 1
        text = _clean(raw.decode("utf-8", errors="replace"))
        if truncated:
            text += TRUNCATION_MARK
        yield Line(number, text, truncated)


class _Unwrapper:
    """Learns the paste wrapper (docker prefix, quote marks) and terminal wrap width from a sample."""

    def __init__(self, sample: list[Line]) -> None:
        texts = [ln.text for ln in sample if ln.text.strip()]
        n = max(len(texts), 1)
        docker = Counter(m.group(1) for t in texts if (m := _DOCKER.match(t)))
        self.docker = bool(docker) and sum(docker.values()) >= max(2, n * 0.3)
        self.quoted = sum(1 for t in texts if t.startswith(">")) >= max(2, n * 0.6)
        stripped = [self.strip(t) for t in texts]
        self.wrap_width = _guess_wrap_width(stripped)

    def strip(self, text: str) -> str:
        if self.docker:
            m = _DOCKER.match(text)
            if m:
                text = text[m.end():]
        if self.quoted and text.startswith(">"):
            text = _QUOTE.sub("", text, count=1)
        return text


def _guess_wrap_width(texts: list[str]) -> int | None:
    """A terminal hard-wrap shows as many lines of one exact length W and none longer."""
    lengths = Counter(len(t) for t in texts if len(t) >= 60)
    if not lengths:
        return None
    width, count = lengths.most_common(1)[0]
    longer = sum(c for ln, c in lengths.items() if ln > width)
    if count >= 3 and longer == 0 and count >= 0.1 * sum(lengths.values()):
        return width
    return None


_RECORD_START = re.compile(
    r"^(\[\d|\[rank\d|\[\w+\]|[A-Z]\d{4} |\w[\w.-]*:\d+:\d+ \[\d+\]|INFO|WARNING|ERROR|DEBUG|Traceback|"
    r"  File |\S+Error|\S+Exception|During handling|The above exception|Loading |Capturing )"
)


BatchSink = Callable[[bytes, int], None]  # (newline-joined periodic lines, number of the last line)
BULK_CHUNK = 4 << 20


def clean_lines(stream: BinaryIO, batch_sink: BatchSink | None = None) -> Iterator[Line]:
    """Decoded lines with paste wrappers removed and hard-wrapped lines joined (constant memory).

    With `batch_sink`, periodic `Decode batch` / `Prefill batch` lines after the first sample are not
    yielded: they are handed to the sink in bulk (newline-joined bytes), which is how `summary` and
    `explain` keep up with multi-GB serving logs. Line numbers of the other lines stay exact.
    """
    lines = decoded_lines(stream)
    sample: list[Line] = []
    for ln in lines:
        sample.append(ln)
        if len(sample) >= WRAP_SAMPLE_LINES:
            break
    unwrap = _Unwrapper(sample)
    pending: deque[Line] = deque(sample)
    bulk = batch_sink is not None and not (unwrap.docker or unwrap.quoted or unwrap.wrap_width) \
        and len(sample) >= WRAP_SAMPLE_LINES

    def source() -> Iterator[Line]:
        while pending:
            yield pending.popleft()
        if bulk:
            assert batch_sink is not None
            yield from _bulk_lines(stream, sample[-1].number if sample else 0, batch_sink)
        else:
            yield from lines

    width = unwrap.wrap_width
    held: Line | None = None
    for ln in source():
        ln.text = unwrap.strip(ln.text)
        if held is not None:
            if width and len(held.text) == width and ln.text and not _RECORD_START.match(ln.text):
                held.text += ln.text
                held.wrapped = True
                continue
            yield held
        held = ln
    if held is not None:
        yield held


def _bulk_lines(stream: BinaryIO, number: int, sink: BatchSink) -> Iterator[Line]:
    """Chunked reading: batch lines go to `sink` in bulk, the rest are yielded one by one."""
    carry = b""
    skipping = False  # inside an over-long line, discarding up to its newline
    counter = [number]
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
        data = carry + chunk if carry else chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            if len(data) >= MAX_LINE_BYTES:
                number += 1
                yield Line(number, _clean(data[:MAX_LINE_BYTES].decode("utf-8", "replace")) + TRUNCATION_MARK, True)
                carry, skipping = b"", True
            else:
                carry = data
            continue
        carry = data[cut + 1:]
        counter[0] = number
        yield from _scan_block(data[:cut], counter, sink)
        number = counter[0]
    if carry and not skipping:
        number += 1
        yield Line(number, _clean(carry[:MAX_LINE_BYTES].decode("utf-8", "replace")), len(carry) > MAX_LINE_BYTES)


_PERIODIC_MARKS = (b"Decode batch", b"Prefill batch", b'HTTP/1.1" 200')
_SMALL_BLOCK = 1 << 16


def _is_periodic(raw: bytes) -> bool:
    return (b" batch" in raw and (b"Decode batch" in raw or b"Prefill batch" in raw)) or b'HTTP/1.1" 200' in raw


def _scan_block(block: bytes, counter: list[int], sink: BatchSink) -> Iterator[Line]:
    """Hand all-periodic stretches to `sink` whole (counted in C); look line by line only where needed.

    A block whose line count equals its count of periodic markers holds nothing else; otherwise it is
    halved until the stretches that hold other lines are small. Steady serving logs never reach the
    per-line loop, which is what keeps multi-GB logs within reach of `grep -c`.
    """
    n_lines = block.count(b"\n") + 1
    dirty = b"\x1b" in block or b"\r" in block or b"\x00" in block
    if not dirty:
        n_marks = sum(block.count(m) for m in _PERIODIC_MARKS)
        if n_marks == n_lines and len(block) < n_lines * 8192:
            counter[0] += n_lines
            sink(block, counter[0])
            return
        if n_marks and len(block) > _SMALL_BLOCK:
            mid = block.find(b"\n", len(block) // 2)
            if mid > 0:
                yield from _scan_block(block[:mid], counter, sink)
                yield from _scan_block(block[mid + 1:], counter, sink)
                return
    batch: list[bytes] = []
    number = counter[0]
    last_periodic = 0
    for raw in block.split(b"\n"):
        number += 1
        if len(raw) < 8192 and _is_periodic(raw):
            batch.append(raw)
            last_periodic = number
            continue
        if len(raw) > MAX_LINE_BYTES:
            yield Line(number, _clean(raw[:MAX_LINE_BYTES].decode("utf-8", "replace")) + TRUNCATION_MARK, True)
            continue
        text = raw.decode("utf-8", "replace")
        yield Line(number, _clean(text) if dirty else text)
    counter[0] = number
    if batch:
        sink(b"\n".join(batch), last_periodic)


def read_lines(source: str | os.PathLike[str], batch_sink: BatchSink | None = None) -> Iterator[Line]:
    """All clean lines of one source; InputError if it cannot be opened or read."""
    stream = open_source(source)
    produced = False
    try:
        for ln in clean_lines(stream, batch_sink):
            produced = True
            yield ln
    except EOFError as e:
        # a .gz still being written ends mid-stream: what was readable is the log so far
        if not produced:
            raise InputError(f"{source}: read failed ({e})") from None
    except OSError as e:  # gzip.BadGzipFile is an OSError
        raise InputError(f"{source}: read failed ({e})") from None
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()


def lines_from_text(text: str) -> Iterator[Line]:
    """Clean lines of an in-memory string (tests, fuzzing)."""
    return clean_lines(io.BytesIO(text.encode("utf-8", errors="surrogatepass")))


def iter_sources(sources: Iterable[str]) -> Iterator[tuple[str, Iterator[Line]]]:
    for s in sources:
        yield s, read_lines(s)

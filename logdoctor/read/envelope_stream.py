"""Lines through their envelope (envelope.py): peeled, partial records joined, newest-first reversed.

- Partial records: a CRI `P` record, and a docker json-file record whose `log` does not end in a
  newline, go on in the next record of the same stream, up to the one that ends it (`F`, or a
  newline). They are joined into one line that keeps the FIRST record's number. Lines of the other
  stream that arrive meanwhile are held back and follow the joined line, so numbers never go down.
  The joined text stops growing at `max_chars` (then it is cut and marked, as ingest cuts a long line);
  lines held meanwhile are bounded too (HOLD_LINES, and their characters), past which the partial
  is let go as it is.
- Newest-first exports are spooled (raw bytes, `SPOOL_MEMORY` in memory then a temporary file, one
  int64 offset per line) and read back last line first, so memory stays bounded on stdin too.
"""
from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from logdoctor.read.envelope import MAYBE_FIRST, Envelope
from logdoctor.records import replace

SPOOL_MEMORY = 32 << 20
# A newest-first export is reversed only this far (its first, i.e. newest, part): an endless or huge
# stream must not fill the disk, or the offsets the memory. Real exports are far smaller (GCP's
# download holds at most some 10^5 entries).
REVERSE_MAX_BYTES = 2 << 30
REVERSE_MAX_LINES = 16_000_000       # 128 MB of offsets
HOLD_LINES = 1000
_NEEDS_SPLIT = ("\n", "\r", "\x1b", "\x00")


def peel_lines(lines: Iterable[Any], env: Envelope, split: Callable[[str], list[str]], max_chars: int,
               mark: str, whole: bool = False) -> Iterator[Any]:
    """Each ingest.Line with its envelope peeled off into `attrs` (plain lines pass untouched).

    `split` turns a peeled text into the lines it holds (a JSON `log` can carry ANSI colour, CRs and
    newlines as escapes, which ingest cleans only in raw bytes). `whole`: the lines still hold their
    bare CRs (ingest splits them here, after the join), plain lines too."""
    peel = env.peel
    # a stream with distinctive layers only: most lines fail the first-character test, done here inline
    quick = env.guarded
    pending: dict[str, list[Any]] = {}      # stream -> [first Line, parts, characters]
    held: list[Any] = []
    held_chars = 0
    for ln in lines:
        if quick and not pending and ln.text[:1] not in MAYBE_FIRST:
            yield ln
            continue
        text, attrs, partial = peel(ln.text)
        if attrs is None:
            out = _split_line(ln, text, split) if whole and "\r" in text else [ln]
            if not pending:
                yield from out
                continue
        else:
            if partial is not None:
                join = pending.get(partial)
                if join is None:
                    ln.attrs = attrs
                    pending[partial] = [ln, [text], len(text)]
                elif join[2] < max_chars:
                    join[1].append(text)
                    join[2] += len(text)
                continue
            stream = attrs.get("stream")
            join = pending.pop(stream, None) if pending and stream is not None else None
            if join is not None:
                first, parts, size = join
                parts.append(text)
                text = _joined(first, parts, size + len(text), max_chars, mark)
                ln = first
            else:
                ln.attrs = attrs
            out = _split_line(ln, text, split)
        if not pending and not held:
            yield from out
            continue
        held.extend(out)
        held_chars += sum(len(x.text) for x in out)
        if not pending or len(held) > HOLD_LINES or held_chars > 4 * max_chars:
            yield from _release(pending, held, split, max_chars, mark)
            held, held_chars = [], 0
    if pending or held:
        yield from _release(pending, held, split, max_chars, mark)


def _joined(first: Any, parts: list[str], size: int, max_chars: int, mark: str) -> str:
    text = "".join(parts)
    if size > max_chars:
        text = text[:max_chars] + mark
        first.truncated = True
    return text


def _release(pending: dict[str, list[Any]], held: list[Any], split: Callable[[str], list[str]],
             max_chars: int, mark: str) -> list[Any]:
    """Partials that never ended (or waited too long) as they are, and the held lines, in number order."""
    out = list(held)
    for first, parts, size in pending.values():
        out.extend(_split_line(first, _joined(first, parts, size, max_chars, mark), split))
    pending.clear()
    out.sort(key=lambda x: x.number)  # stable: lines that share a number keep their order
    return out


def _split_line(ln: Any, text: str, split: Callable[[str], list[str]]) -> list[Any]:
    if not any(c in text for c in _NEEDS_SPLIT):
        ln.text = text
        return [ln]
    texts = split(text)
    ln.text = texts[0]
    return [ln] + [replace(ln, text=t) for t in texts[1:]]


def reversed_raws(raws: Iterable[tuple[bytes, bool]]) -> Iterator[tuple[int, bytes, bool]]:
    """(line number in the file, raw bytes, truncated) from the last physical line to the first.

    Past REVERSE_MAX_BYTES or REVERSE_MAX_LINES the rest is not read: what is reversed is the file's
    first part, which in a newest-first export holds the newest lines (where a launch's end is)."""
    from tempfile import SpooledTemporaryFile  # only newest-first exports: its import costs every other run ~3 ms
    offsets = array("q")
    with SpooledTemporaryFile(max_size=SPOOL_MEMORY) as spool:
        pos = 0
        for raw, truncated in raws:
            offsets.append(-pos - 1 if truncated else pos)  # the sign carries the truncation mark
            spool.write(raw)
            pos += len(raw)
            if pos >= REVERSE_MAX_BYTES or len(offsets) >= REVERSE_MAX_LINES:
                break
        end = pos
        for i in range(len(offsets) - 1, -1, -1):
            off = offsets[i]
            start = -off - 1 if off < 0 else off
            spool.seek(start)
            raw = spool.read(end - start)
            end = start
            yield i + 1, raw, off < 0

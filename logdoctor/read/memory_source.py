"""A log that is not a file (bytes, text, an open file object), made a file the readers can open.

Every reader takes a path (`ingest.read_lines`, and `many.launch`, which may read a file twice to split
the nodes it interleaves), so an in-memory source is copied, as given (compressed or not), to a private
temporary file that lives as long as the `with` block. The copy is streamed: a file object of any size
costs a buffer, not its size in memory. What the content is (compressed, binary, empty) is then decided
by the same code as for a file (`sniff.open_source`); `renamed` makes its errors name the source as the
caller called it instead of the temporary path.
"""
from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from logdoctor.read.sniff import InputError

CHUNK = 1 << 20                   # bytes (or characters of a text stream) copied per read

# what counts as content rather than a path: bytes-like data, or an object with .read()
InMemory = bytes | bytearray | memoryview | IO[bytes] | IO[str]


def is_file_object(source: Any) -> bool:
    """Something with a callable `read` (io streams, gzip.open(...), sockets' makefile(), ...)."""
    return callable(getattr(source, "read", None))


def _bytes_under(stream: Any) -> Any:
    """A text file nothing was read from yet, by its bytes as given: text mode turns the bare CRs of
    progress bars into line breaks (universal newlines), which would shift every line number after them."""
    buffer = getattr(stream, "buffer", None)
    if isinstance(stream, io.TextIOBase) and buffer is not None:
        try:
            if stream.tell() == 0 and buffer.tell() == 0:
                return buffer
        except (OSError, ValueError):  # a pipe or a terminal cannot tell: read it as text
            pass
    return stream


def _write_all(out: IO[bytes], source: InMemory) -> None:
    if isinstance(source, (bytes, bytearray, memoryview)):
        out.write(source)
        return
    stream = _bytes_under(source)
    while True:
        chunk = stream.read(CHUNK)
        if not chunk:
            return
        if isinstance(chunk, str):  # a text stream: the readers decode UTF-8 (lone surrogates kept as bytes)
            out.write(chunk.encode("utf-8", "surrogatepass"))
        elif isinstance(chunk, (bytes, bytearray, memoryview)):
            out.write(chunk)
        else:
            raise TypeError(f"read() returned {type(chunk).__name__}, not bytes or str")


@contextmanager
def spooled(source: InMemory, name: str) -> Iterator[str]:
    """The path of a private temporary copy of `source` (removed at the end of the block).

    `name` is how errors name the source. A stream that fails while it is read (a closed file, an I/O
    error, a text stream that cannot decode its own bytes) is an InputError naming it; a full disk too."""
    fd, path = tempfile.mkstemp(prefix="logdoctor-memory-")
    try:
        try:
            with os.fdopen(fd, "wb") as out:
                _write_all(out, source)
        except UnicodeError as e:
            raise InputError(name, f"read failed: the text stream cannot decode its content ({e})") from None
        except (OSError, ValueError) as e:  # ValueError: I/O operation on a closed file
            raise InputError(name, f"read failed ({getattr(e, 'strerror', None) or e})") from None
        yield path
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


def renamed(error: InputError, path: str, name: str) -> InputError:
    """An error about the temporary copy at `path`, naming the source as given instead."""
    return InputError(name, error.reason) if error.source == path else error


__all__ = ["InMemory", "is_file_object", "renamed", "spooled"]

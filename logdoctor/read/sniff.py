"""What a log source is, before any line is read: the one place every command asks.

`open_source` (used by explain, summary, parse, memory, compare, runs, clusters through
`ingest.read_lines`) and `check_path` (batch's precheck) share these answers:

- a directory, a character / block device or a socket is refused without being opened ("not a regular
  file (device)"), so `/dev/zero`, `/dev/urandom` or a terminal can never hang or flood a command. The
  null device is the one exception for `open_source`: it reads as the empty input it is.
- a named FIFO is opened non-blocking; a writer that is connected (or data that is waiting) makes it a
  normal stream, no writer within `FIFO_WAIT_SECONDS` is an InputError. Pipes from process substitution
  (`<(cat x.gz)`) have their writer from the start. batch never opens FIFOs.
- stdin (`-`) may be a pipe, a file or the null device; a terminal on stdin is refused (it would block
  until the user types), and so is a closed stdin.
- compression is recognised by its magic bytes, never by the file name: gzip, bzip2, xz / lzma (stdlib)
  and zstd (`zstandard`). Decompression is streamed, so memory does not depend on the expansion ratio;
  xz / lzma decoders get a memory limit (a crafted header can ask for a 1.5 GiB dictionary). Corrupt data
  is an InputError naming the file; data that simply stops (a `.gz` still being written) surfaces as
  EOFError, which `ingest` turns into "the lines so far".
- binary content (NUL bytes or non-text in the first `SNIFF_BYTES` of the decompressed data) is refused
  ("binary file (not a text log)"): a log reader that answers "no failure found" for random bytes lies.
  Leading NUL padding of a regular file (what `logrotate copytruncate` leaves) is skipped, not refused.

- a URL (`s3://`, `gs://`, `https://`, `file://` …: `remote.is_url`) is opened by `remote.open_url` and
  its bytes then go through the same sniffing as a file's; `file://` gets the local checks above.

Every InputError message is one line: the file as given (control characters escaped), then what is wrong.
"""
from __future__ import annotations

import errno
import io
import os
import stat
import sys
import time
import zlib
from collections.abc import Callable
from typing import Any, BinaryIO

SNIFF_BYTES = 8192
FIFO_WAIT_SECONDS = 2.0
XZ_MEMLIMIT = 256 << 20      # xz -9 needs 65 MiB; anything above this is a crafted or exotic header
ZSTD_MAX_WINDOW = 1 << 27    # zstd's own default limit (128 MiB), made explicit
BUFFER_SIZE = 1 << 16
NUL_RATIO_LIMIT = 0.1
NON_TEXT_RATIO_LIMIT = 0.3
BINARY_REASON = "binary file (not a text log)"


class InputError(Exception):
    """A source that cannot be read as a log: missing, a directory, a device, binary, corrupt, ...

    `InputError(source, reason)` formats as "<source>: <reason>"; `.reason` is the part after the name
    (batch rows carry only that). The one-argument form is a ready message.
    """

    def __init__(self, source: str | os.PathLike[str], reason: str | None = None) -> None:
        if reason is None:
            super().__init__(str(source))
            self.source, self.reason = "", str(source)
        else:
            super().__init__(f"{display_name(source)}: {reason}")
            self.source, self.reason = os.fspath(source), reason


def display_name(source: str | os.PathLike[str]) -> str:
    """The source as every output shows it (`paths.display_path`: one printable line); `-` is `<stdin>`."""
    from logdoctor.paths import display_path

    name = os.fspath(source)
    return "<stdin>" if name == "-" else display_path(name)


# ------------------------------------------------------------------------------------------------
# content


def non_text_ratio(head: bytes) -> float:
    """Share of the decoded head that is neither text nor the control characters logs carry."""
    if not head:
        return 0.0
    text = head.decode("utf-8", errors="replace")
    bad = sum(map(text.count, _NOT_TEXT))  # one count each, in C: every run sniffs its input
    return bad / max(len(text), 1)


# the replacement character and the control characters a log does not carry (it does carry \n \r \t and ESC)
_NOT_TEXT = ("\ufffd", *(chr(i) for i in range(32) if chr(i) not in "\n\r\t\x1b"))


def binary_reason(head: bytes) -> str | None:
    """Why these first bytes of (decompressed) content are not a log, or None."""
    head = head[:SNIFF_BYTES]
    if not head:
        return None
    if head.count(b"\x00") > len(head) * NUL_RATIO_LIMIT:
        return BINARY_REASON
    if non_text_ratio(head) > NON_TEXT_RATIO_LIMIT:
        return BINARY_REASON
    return None


def compression_of(head: bytes) -> str | None:
    """The compression format announced by the first bytes, or None for plain data."""
    if head.startswith(b"\x1f\x8b"):
        return "gzip"
    if head.startswith(b"BZh") and head[3:4].isdigit() and head[4:10] in (b"1AY&SY", b"\x17rE8P\x90"):
        return "bzip2"
    if head.startswith(b"\xfd7zXZ\x00"):
        return "xz"
    if head.startswith(b"\x5d\x00\x00") and len(head) >= 13:   # .lzma: props 0x5d, dict size, size
        return "lzma"
    if head.startswith(b"\x28\xb5\x2f\xfd"):
        return "zstd"
    return None


# ------------------------------------------------------------------------------------------------
# streams


class _Source(io.RawIOBase):
    """A raw stream that first replays bytes already read, and names its file in decompression errors.

    Used wherever seeking back is impossible (pipes, FIFOs, decompressors), so sniffing costs nothing
    the reader later misses (the cause of the old `<(cat x.gz)` failure: two bytes sniffed, not put back).
    """

    def __init__(self, inner: Any, head: bytes, name: str, fmt: str | None = None,
                 closes: tuple[Any, ...] = ()) -> None:
        self._inner, self._head, self._name, self._fmt, self._closes = inner, head, name, fmt, closes
        # one underlying read per call: a pipe delivers what it has instead of blocking for a full buffer,
        # and truncated compressed data gives up its last bytes (a filling read drops them with EOFError)
        self._readinto: Callable[[Any], int | None] = getattr(inner, "readinto1", None) or inner.readinto

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        if self._head:
            n = min(len(b), len(self._head))
            b[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        try:
            return self._readinto(b) or 0
        except (EOFError, InputError):
            raise  # EOFError: data that stops early (a .gz still being written); ingest keeps the lines
        except OSError as e:
            if e.errno is not None:
                raise InputError(self._name, f"read failed ({e.strerror or e})") from None
            raise InputError(self._name, f"read failed: corrupt {self._fmt} data ({e})") from None
        except zlib.error as e:
            raise InputError(self._name, f"read failed: corrupt {self._fmt} data ({e})") from None
        except Exception as e:  # by name: the decompressors' modules are imported only for such data
            name = type(e).__name__
            if name == "LZMAError" and "memory" in str(e).lower():
                raise InputError(self._name, f"read failed: {self._fmt} data needs more than "
                                             f"{XZ_MEMLIMIT >> 20} MiB to decode") from None
            if name in ("LZMAError", "ZstdError"):
                raise InputError(self._name, f"read failed: corrupt {self._fmt} data ({e})") from None
            raise

    def close(self) -> None:
        if not self.closed:
            for stream in self._closes:
                if stream is not getattr(sys.stdin, "buffer", None):
                    try:
                        stream.close()
                    except Exception:
                        pass
        super().close()


class _XzReader(io.RawIOBase):
    """Streamed xz / lzma decoding with a memory limit (lzma.LZMAFile has none); concatenated streams
    are read on, trailing garbage ends the data as in the standard library."""

    def __init__(self, raw: Any) -> None:
        import lzma  # only for such data
        self._raw = raw
        self._lzma = lzma
        self._dec = self._new()

    def _new(self) -> Any:
        return self._lzma.LZMADecompressor(self._lzma.FORMAT_AUTO, memlimit=XZ_MEMLIMIT)

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while True:
            if self._dec.eof:
                rest = self._dec.unused_data.lstrip(b"\x00")  # stream padding between streams
                while not rest:
                    more = self._raw.read(BUFFER_SIZE)
                    if not more:
                        return 0
                    rest = more.lstrip(b"\x00")
                self._dec = self._new()
                try:
                    out = self._dec.decompress(rest, len(b))
                except self._lzma.LZMAError:
                    return 0  # trailing garbage after a complete stream ends the data, as in LZMAFile
            else:
                data = b""
                if self._dec.needs_input:
                    data = self._raw.read(BUFFER_SIZE)
                    if not data:
                        raise EOFError("compressed data ended before the end-of-stream marker")
                out = self._dec.decompress(data, len(b))
            if out:
                b[: len(out)] = out
                return len(out)


def _decompressor(raw: Any, fmt: str) -> Any:
    # each module imported only for its own data: a plain log never needs them
    if fmt == "gzip":
        import gzip
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if fmt == "bzip2":
        import bz2
        return bz2.BZ2File(raw)
    if fmt in ("xz", "lzma"):
        return _XzReader(raw)
    import zstandard  # only for .zst data

    # the window (what the decoder must hold) is capped, whatever the frame header asks for
    return zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW).stream_reader(
        raw, read_across_frames=True, closefd=False)


def _read_head(stream: Any, n: int) -> tuple[bytes, BaseException | None]:
    """Up to `n` bytes without blocking for more than the source offers at EOF; the error that ended
    the read early (EOFError of truncated compressed data) is returned, not raised."""
    read = getattr(stream, "read1", None) or stream.read
    parts: list[bytes] = []
    got = 0
    try:
        while got < n:
            chunk = read(n - got)
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
    except EOFError as e:
        return b"".join(parts), e
    return b"".join(parts), None


def peek_head(stream: BinaryIO, n: int, name: str = "<stream>") -> tuple[bytes, BinaryIO]:
    """The first `n` bytes of `stream`, and a stream that still yields them (seek back or replay)."""
    start = stream.tell() if _seekable(stream) else None
    head, err = _read_head(stream, n)
    if start is not None and err is None:
        stream.seek(start)
        return head, stream
    # the caller keeps owning (and closing) `stream`; the replaying wrapper closes nothing
    return head, io.BufferedReader(_Source(stream, head, name), BUFFER_SIZE)


def _seekable(stream: Any) -> bool:
    try:
        return bool(stream.seekable())
    except Exception:
        return False


# ------------------------------------------------------------------------------------------------
# opening


def _null_rdev() -> int | None:
    try:
        st = os.stat(os.devnull)
    except OSError:
        return None
    return st.st_rdev if stat.S_ISCHR(st.st_mode) else None


def mode_problem(st: os.stat_result, *, allow_fifo: bool, allow_null: bool) -> str | None:
    """Why a file of this type is not opened as a log (None: open it)."""
    mode = st.st_mode
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a directory"
    if stat.S_ISFIFO(mode):
        return None if allow_fifo else "not a regular file (FIFO)"
    if stat.S_ISCHR(mode) and allow_null and st.st_rdev == _null_rdev():
        return None
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "not a regular file (device)"
    if stat.S_ISSOCK(mode):
        return "not a regular file (socket)"
    return "not a regular file"


def stat_problem(path: str) -> tuple[os.stat_result | None, str | None]:
    """stat() a path; the reason it cannot be used when that fails."""
    try:
        return os.stat(path), None
    except FileNotFoundError:
        return None, "broken symlink" if os.path.islink(path) else "no such file"
    except PermissionError:
        return None, "permission denied"
    except NotADirectoryError:
        return None, "no such file (a parent is not a directory)"
    except OSError as e:
        if e.errno == errno.ELOOP:
            return None, "symlink loop"
        return None, f"cannot stat ({e.strerror or e})"
    except ValueError:  # an embedded NUL
        return None, "invalid file name"


def _open_error(e: OSError) -> str:
    if isinstance(e, FileNotFoundError):
        return "no such file"
    if isinstance(e, PermissionError):
        return "permission denied"
    if e.errno == errno.ELOOP:
        return "symlink loop"
    return f"cannot open ({e.strerror or e})"


def _open_path(name: str) -> Any:
    st, problem = stat_problem(name)
    if problem is None:
        assert st is not None
        problem = mode_problem(st, allow_fifo=True, allow_null=True)
    if problem is not None:
        raise InputError(name, problem)
    assert st is not None
    if stat.S_ISCHR(st.st_mode):  # the null device (others were refused above)
        return io.BytesIO(b"")
    try:
        # O_NONBLOCK: a path swapped for a FIFO between stat and open must not block the open itself
        f = open(name, "rb", buffering=0, opener=_open_nonblocking)
    except OSError as e:
        raise InputError(name, _open_error(e)) from None
    try:
        now = os.fstat(f.fileno())
        problem = mode_problem(now, allow_fifo=True, allow_null=False)
        if problem is not None:
            raise InputError(name, problem)
        if stat.S_ISFIFO(now.st_mode):
            first = _wait_for_writer(f.fileno(), name)
            os.set_blocking(f.fileno(), True)
            return io.BufferedReader(_Source(f, first, name, closes=(f,)), BUFFER_SIZE)
        os.set_blocking(f.fileno(), True)
        return io.BufferedReader(f)
    except BaseException:
        f.close()
        raise


def open_local(path: str) -> Any:
    """A local path opened with every check above (what a `file://` URL is opened with)."""
    return _open_path(path)


def _is_url(name: str) -> bool:
    if "://" not in name:  # a plain path never imports the URL module
        return False
    from logdoctor.read.remote import is_url
    return is_url(name)


def _open_nonblocking(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NONBLOCK)


def _wait_for_writer(fd: int, name: str) -> bytes:
    """First bytes of a FIFO, once a writer is there; InputError if none comes within the wait.

    On a non-blocking FIFO, read() says which case we are in: data, EAGAIN (a writer is connected but
    has not written yet: from here a blocking read is safe) or b"" (no writer now). Then POLLHUP tells
    a writer that came and went without writing (an empty input) from one that never came.
    """
    import select

    deadline = time.monotonic() + FIFO_WAIT_SECONDS
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while True:
        try:
            data = os.read(fd, BUFFER_SIZE)
        except BlockingIOError:
            return b""
        if data:
            return data
        if any(ev & select.POLLHUP for _, ev in poller.poll(0)):
            return b""
        if time.monotonic() >= deadline:
            raise InputError(name, f"FIFO with no writer (none within {FIFO_WAIT_SECONDS:g} s)")
        time.sleep(0.02)


def _open_stdin() -> Any:
    stdin = sys.stdin
    stream = getattr(stdin, "buffer", None) if stdin is not None else None
    if stream is None:
        raise InputError("-", "stdin is closed")
    try:
        fd = stream.fileno()
    except (OSError, ValueError):
        return stream  # an in-memory stdin (tests, embedding): nothing to check
    try:
        st = os.fstat(fd)
    except OSError:
        raise InputError("-", "stdin is closed") from None
    if stat.S_ISCHR(st.st_mode) and os.isatty(fd):
        raise InputError("-", "stdin is a terminal: pipe a log in or pass a file")
    if stat.S_ISSOCK(st.st_mode):
        return stream  # a socket on stdin is a stream like a pipe (inetd, systemd, ssh)
    problem = mode_problem(st, allow_fifo=True, allow_null=True)
    if problem is not None:
        raise InputError("-", problem)
    return stream


def open_source(source: str | os.PathLike[str]) -> BinaryIO:
    """Open a path or `-` (stdin) for binary reading of its (decompressed) content.

    Raises InputError, naming the source, for everything listed in the module docstring. The returned
    stream starts at the first byte of content; closing it never closes stdin.
    """
    name = os.fspath(source)
    if name == "-":
        raw, owned = _open_stdin(), False
    elif _is_url(name):  # s3://, gs://, https://, file:// …: the object's bytes, then as a file's
        from logdoctor.read.remote import open_url
        raw, owned = open_url(name), True
    else:
        raw, owned = _open_path(name), True
    try:
        return _content(raw, name, owned)
    except BaseException:
        if owned:
            raw.close()
        raise


def _content(raw: Any, name: str, owned: bool) -> BinaryIO:
    """The content of an opened source: compression undone, binary refused, sniffed bytes replayed."""
    # where we start: stdin redirected from a file may have been read partly by whoever ran before us
    start = raw.tell() if _seekable(raw) else None
    try:
        head, _ = _read_head(raw, SNIFF_BYTES)
        if start is not None and head[:1] == b"\x00":
            start = _after_nul_padding(raw, start, head)
            raw.seek(start)
            head, _ = _read_head(raw, SNIFF_BYTES)
    except OSError as e:
        raise InputError(name, f"read failed ({e.strerror or e})") from None
    mine = (raw,) if owned else ()
    if start is not None:
        raw.seek(start)
        base = raw
    else:  # a pipe or FIFO: the sniffed bytes are put back in front
        base = io.BufferedReader(_Source(raw, head, name, closes=mine), BUFFER_SIZE)
    fmt = compression_of(head)
    if fmt is None:
        problem = binary_reason(head)
        if problem is not None:
            raise InputError(name, problem)
        return base  # a regular file is returned as is: the fastest readline
    decompressed = _decompressor(base, fmt)
    guarded = _Source(decompressed, b"", name, fmt, closes=(decompressed, base) if base is not raw else (decompressed, *mine))
    try:
        content, err = _read_head(guarded, SNIFF_BYTES)
        if not content and err is not None:
            raise InputError(name, f"read failed: truncated {fmt} data ({err})")
        problem = binary_reason(content)
        if problem is not None:
            raise InputError(name, f"{problem} inside {fmt} data")
    except BaseException:
        guarded.close()
        raise
    guarded._head = content  # replay the sniffed content before the rest
    return io.BufferedReader(guarded, BUFFER_SIZE)


def _after_nul_padding(raw: Any, start: int, head: bytes) -> int:
    """Where the text starts in a file that begins with NUL padding (or `start` if it is all NUL).

    `logrotate copytruncate` truncates a log while the server keeps writing at its old offset: the file
    then starts with a hole that reads as NUL bytes, as long as the log was, and the real lines after it.
    The padding holds no newline, so skipping it changes no line number.
    """
    rest = head.lstrip(b"\x00")
    if rest:
        return start + len(head) - len(rest)
    pos = start + len(head)
    raw.seek(pos)
    while True:
        chunk = raw.read(1 << 20)
        if not chunk:
            return start  # nothing but NUL: sniffed (and refused) as binary
        rest = chunk.lstrip(b"\x00")
        if rest:
            return pos + len(chunk) - len(rest)
        pos += len(chunk)


def check_path(path: str) -> str | None:
    """Why a path cannot be read as a log, without reading past its first bytes (batch's precheck).

    FIFOs and the null device are refused here: batch walks directories and must neither wait for a
    writer on every FIFO it meets nor report a device as an empty log. A URL is checked by
    its metadata (`remote.check_url`).
    """
    if _is_url(path):
        from logdoctor.read.remote import check_url
        return check_url(path)
    st, problem = stat_problem(path)
    if problem is not None:
        return problem
    assert st is not None
    problem = mode_problem(st, allow_fifo=False, allow_null=False)
    if problem is not None:
        return problem
    if st.st_size == 0:
        return "empty file"
    try:
        open_source(path).close()
    except InputError as e:
        return e.reason
    return None

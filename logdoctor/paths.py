"""Paths in and out: how a file name is shown, and where an output file really goes.

File names are bytes. Internally a path stays the `str` Python makes of them (`os.fsdecode`, so bytes
that are not UTF-8 become lone surrogates and the file can still be opened). Whatever is shown or written
(tables, text, JSON, CSV, parquet, stderr) uses the display form instead, which is always valid UTF-8 and
one line: each byte that is not UTF-8 and each control character (C0, DEL, C1) becomes `\\xNN`, and the
invisible line and bidi controls (U+2028, U+2029, U+202A-U+202E, U+2066-U+2069) become `\\uNNNN`.
Ordinary names are unchanged; a backslash is not doubled, so the form is for reading, not for parsing back.

`-o FILE` is checked before any work starts (`Destination.check`) and written so that it replaces only
what the user named: a symlink is followed and its target written, a FIFO or device is written through
(never replaced by a regular file), an existing file keeps its permission bits, and a new file gets
0666 minus the umask. Regular files are written to a `.logdoctor-*.part` file in the same directory and
renamed into place when complete, so a reader never sees half an output.
"""
from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager

from logdoctor import regexes
from logdoctor.records import dataclass

# one character per match: linear, and the class is small enough to read
_UNSHOWABLE = regexes.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group())
    if 0xDC80 <= c <= 0xDCFF:  # a byte os.fsdecode could not decode
        return f"\\x{c - 0xDC00:02x}"
    return f"\\x{c:02x}" if c <= 0xFF else f"\\u{c:04x}"


def display_text(text: str) -> str:
    """`text` as one printable line of valid UTF-8 (see the module doc for the escapes)."""
    return _UNSHOWABLE.sub(_escape, text) if _UNSHOWABLE.search(text) else text


def display_path(path: str | os.PathLike[str] | bytes) -> str:
    """How a path is shown to users and stored in every output format."""
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    return display_text(os.fspath(path))


class OutputError(Exception):
    """An output destination that cannot be written; the message names it: `PATH: what is wrong`."""


def _reason(e: OSError) -> str:
    if isinstance(e, PermissionError):
        return "permission denied"
    if e.errno == errno.ELOOP:
        return "symlink loop"
    if e.errno == errno.EROFS:
        return "read-only file system"
    if e.errno == errno.ENOSPC:
        return "no space left on device"
    return e.strerror or str(e)


def _current_umask() -> int:
    mask = os.umask(0o022)  # reading the umask means setting it; put it straight back
    os.umask(mask)
    return mask


@dataclass(frozen=True)
class Destination:
    """Where an output goes, checked before any work starts."""

    given: str
    real: str  # symlinks resolved: the file that is written
    through: bool  # a FIFO or device: opened and written in place, never renamed over
    mode: int  # permission bits the finished file gets
    owner: tuple[int, int] | None  # (uid, gid) of the file being replaced, kept when we may

    @classmethod
    def check(cls, given: str) -> Destination:
        """Resolve and validate `given`; OutputError (`PATH: what is wrong`) when it cannot be written."""
        shown = display_path(given)
        real = os.path.realpath(given)
        try:
            st: os.stat_result | None = os.stat(real)
        except FileNotFoundError:
            st = None
        except OSError as e:
            raise OutputError(f"{shown}: {_reason(e)}") from None
        if st is not None:
            kind = st.st_mode
            if stat.S_ISDIR(kind):
                raise OutputError(f"{shown}: is a directory")
            if stat.S_ISSOCK(kind):
                raise OutputError(f"{shown}: is a socket, not a file")
            if not stat.S_ISREG(kind):  # FIFO, character or block device
                if not os.access(real, os.W_OK):
                    raise OutputError(f"{shown}: permission denied")
                return cls(given, real, True, 0, None)
            if not os.access(real, os.W_OK):
                raise OutputError(f"{shown}: permission denied")
        parent = os.path.dirname(real) or "."
        if not os.path.isdir(parent):
            what = "no such directory" if not os.path.exists(parent) else "not a directory"
            raise OutputError(f"{shown}: {what}: {display_path(parent)}")
        try:  # the only reliable test that the rename will work (root ignores modes, file systems are read-only)
            import tempfile  # only when writing a file: its import (random, shutil) costs every run ~3 ms
            fd, probe = tempfile.mkstemp(prefix=".logdoctor-", suffix=".part", dir=parent)
            os.close(fd)
            os.unlink(probe)
        except OSError as e:
            raise OutputError(f"{shown}: cannot create files in {display_path(parent)} ({_reason(e)})") from None
        if st is None:
            return cls(given, real, False, 0o666 & ~_current_umask(), None)
        return cls(given, real, False, stat.S_IMODE(st.st_mode) & 0o777, (st.st_uid, st.st_gid))

    def same_file(self, other: Destination) -> bool:
        return self.real == other.real

    @contextmanager
    def writing(self) -> Iterator[str]:
        """A path to write the whole output to (opened once); it lands at `real` when the block ends.

        An exception or signal inside the block leaves no partial file (a FIFO or device has received
        what was written so far: that cannot be taken back).
        """
        shown = display_path(self.given)
        if self.through:
            try:
                yield self.real
            except BrokenPipeError:
                raise  # the reader went away: the command ends as it does on a closed stdout
            except OSError as e:
                raise OutputError(f"{shown}: write failed ({_reason(e)})") from None
            return
        parent = os.path.dirname(self.real) or "."
        try:
            import tempfile
            fd, tmp = tempfile.mkstemp(prefix=".logdoctor-", suffix=".part", dir=parent)
        except OSError as e:  # checked at the start, but the directory may have changed since
            raise OutputError(f"{shown}: cannot create files in {display_path(parent)} ({_reason(e)})") from None
        os.close(fd)
        try:
            try:
                yield tmp
                os.chmod(tmp, self.mode)
                if self.owner is not None and os.geteuid() == 0:
                    try:
                        os.chown(tmp, *self.owner)
                    except OSError:
                        pass  # e.g. a file system without owners; the mode is what matters
                os.replace(tmp, self.real)
            except OSError as e:  # disk full, the directory changed under us, ...
                raise OutputError(f"{shown}: write failed ({_reason(e)})") from None
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise


__all__ = ["Destination", "OutputError", "display_path", "display_text"]

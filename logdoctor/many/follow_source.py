"""Where `explain --follow` reads from: a growing file, read like `tail -F`, or a live pipe (stdin).

A file may not exist yet when the follow starts (logdoctor started before `launch_server … > log 2>&1`
created it): it is waited for, the caller's stall timeout bounding the wait. Its directory must exist —
a missing one is a typo, said at once. Once open, the file is drained to its end before its name is
looked at again, so lines written to a file that has just been rotated are not lost; then a name that
points to another file (logrotate's rename + create) or a file shorter than what was read (`> log`,
copytruncate) is a new launch: `restarted` says which, and reading starts again from the first byte.

A pipe — stdin, or a named FIFO given as LOG (opened non-blocking: its writer may come later) — is read
with select(), never blocking past the caller's poll interval, so a stall is seen.
"""
from __future__ import annotations

import errno
import os
import select
import stat
import sys
import time
from collections.abc import Callable
from typing import BinaryIO

from logdoctor.read.ingest import InputError

READ_CHUNK = 1 << 16


class FollowSource:
    """New bytes of a file or of stdin, without blocking past `timeout`; `say` gets the one-line notices."""

    def __init__(self, source: str, say: Callable[[str], None], wait_s: float) -> None:
        self.source = source
        self.ended = False             # a pipe's writer closed it
        self.restarted: str | None = None  # "replaced" / "truncated" since the last read: a new launch
        self.waiting = False           # the file does not exist yet
        self._say = say
        self._file: BinaryIO | None = None
        self._ino: tuple[int, int] | None = None
        self._fd = -1                  # a pipe's descriptor
        self._fifo_fd = -1             # ...when it is a named FIFO this opened
        self._fifo_writer = False      # a writer of that FIFO has shown up (before it, no data is not EOF)
        if source == "-":
            self._fd = sys.stdin.fileno() if hasattr(sys.stdin, "fileno") else 0
        elif _is_fifo(source):
            try:
                self._fd = self._fifo_fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK)
            except OSError as e:
                raise InputError(source, f"cannot be opened ({e.strerror or e})") from None
        elif not self._open(missing_ok=True):
            parent = os.path.dirname(source) or "."
            if not os.path.isdir(parent):
                raise InputError(source, "no such file, and its directory does not exist either")
            self.waiting = True
            say(f"does not exist yet: waiting up to {wait_s:g} s for it to appear (--stall-timeout)")

    def _open(self, missing_ok: bool = False) -> bool:
        """Open the file by its name; False when it does not exist (yet) and that is all right."""
        try:
            f = open(self.source, "rb")  # noqa: SIM115  (kept open across reads; close() closes it)
        except OSError as e:
            if missing_ok and e.errno == errno.ENOENT:
                return False
            if e.errno == errno.EISDIR:
                raise InputError(self.source, "is a directory: --follow reads one growing file or - (a pipe)") \
                    from None
            raise InputError(self.source, f"cannot be opened ({e.strerror or e})") from None
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) and not stat.S_ISFIFO(st.st_mode):
            f.close()
            raise InputError(self.source, "not a regular file or a pipe: --follow reads a growing file or -")
        self._file, self._ino = f, (st.st_dev, st.st_ino)
        return True

    @property
    def is_pipe(self) -> bool:
        return self._fd >= 0

    def read(self, timeout: float) -> bytes:
        if self._fd >= 0:
            return self._read_fd(self._fd, timeout)
        if self._file is None:  # waiting for the file to appear
            if not self._open(missing_ok=True):
                time.sleep(timeout)
                return b""
            self.waiting = False
            self._say("appeared: following it")
        assert self._file is not None
        data = self._read_file()
        if data:
            return data
        why = self._replaced()
        if why is not None:
            self._file.close()
            self._file = None
            if not self._open(missing_ok=True):  # gone again between the stat and the open
                self.waiting = True
                return b""
            self.restarted = why
            return self._read_file()
        time.sleep(timeout)
        return b""

    def _read_file(self) -> bytes:
        assert self._file is not None
        try:
            return self._file.read(READ_CHUNK)
        except OSError as e:
            raise InputError(self.source, f"read failed ({e.strerror or e})") from None

    def _replaced(self) -> str | None:
        """Whether the name now points to another file, or the file shrank below what was read."""
        assert self._file is not None
        try:
            st = os.stat(self.source)
        except OSError:
            return None  # rotated away and not recreated yet: keep the old file
        if (st.st_dev, st.st_ino) != self._ino:
            return "replaced"
        return "truncated" if st.st_size < self._file.tell() else None

    def _read_fd(self, fd: int, timeout: float) -> bytes:
        try:
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                return b""
            data = os.read(fd, READ_CHUNK)
        except BlockingIOError:
            return b""
        except OSError as e:
            raise InputError(self.source, f"read failed ({e.strerror or e})") from None
        if fd == self._fifo_fd and not self._fifo_writer:
            if not data:  # no writer has opened the FIFO yet: it reads as EOF at once, and is not one
                time.sleep(timeout)
                return b""
            self._fifo_writer = True
        if not data:
            self.ended = True
        return data

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        if self._fifo_fd >= 0:
            os.close(self._fifo_fd)
            self._fifo_fd = -1


def _is_fifo(path: str) -> bool:
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        return False


__all__ = ["READ_CHUNK", "FollowSource"]

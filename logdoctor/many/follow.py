"""`explain --follow`: diagnose a launch while it happens, from a growing file or a live pipe.

The bytes read are appended, whole lines only, to a private spool file, and the spool is diagnosed
with the ordinary path (launch.diagnose_logs: the same report, envelope peeling, node splitting and
citations as `explain` on the finished file, since the spool is a verbatim copy of the log so far).
A re-diagnosis reads the whole prefix, so it is bounded: it runs when a line looks like it could
change the verdict (an error, a traceback, the ready line), when the writer has paused, or every
REDIAGNOSE_LINES lines — and never sooner than RATE_FACTOR × the last diagnosis took, so diagnosing
costs at most about a third of the time however chatty the log is.

It stops at the first failed verdict (after a short settle, and not while the log so far ends inside a
traceback — its frames are indented, its error line is not yet written — so the report names the error), at a healthy one (the ready line), at the end of a pipe, when no line
has come for the stall timeout (default from the stage reached: STALL_DEFAULTS), or on SIGINT / SIGTERM
(the caller passes the exception its signal handler raises). A file is read like `tail -F`: when it
shrinks or is replaced by another file (rotation), the new file is a new launch and the spool restarts.
"""
from __future__ import annotations

import os
import re
import select
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO

from logdoctor.read.ingest import InputError

if TYPE_CHECKING:
    from logdoctor.diagnosis.ranking import Report
    from logdoctor.diagnosis.rules import Rule

POLL_S = 0.1              # how often a file at its end is looked at again / stdin is waited on
QUIET_S = 0.3             # the writer paused this long: diagnose what came
SETTLE_S = 0.15           # after a failed verdict, wait this long for the rest of the burst (a traceback)...
SETTLE_MAX_S = 0.3        # ...but never longer than this: the verdict is due within a second
BLOCK_QUIET_S = 1.0       # a traceback left open this long (the writer paused inside it) is taken as it is
REDIAGNOSE_LINES = 5000   # a chatty log without triggers is still diagnosed this often
RATE_FACTOR = 2.0         # a diagnosis waits at least this many times the previous one's duration
READ_CHUNK = 1 << 16
# seconds without a new line before the launch is called stalled, by the stage it reached: weight loading
# prints nothing for minutes on a large model from slow storage
STALL_DEFAULTS: dict[str | None, float] = {"weights": 600.0}
STALL_DEFAULT = 300.0
EXIT_STALLED = 3          # explain --follow: no line arrived for --stall-timeout seconds

# lines that may change the verdict: plain alternatives (no nested quantifiers: a line is untrusted input)
_TRIGGER = re.compile(rb"Traceback|[Ee]rror|[Ee]xception|fired up|ready to roll|[Kk]illed|[Ff]ailed|FAILED|"
                      rb"[Ff]atal|SIGSEGV|SIGABRT|Segmentation|[Aa]bort|died|exit|NCCL WARN|[Tt]imeout|"
                      rb"timed out|out of memory|OOM|Received sig")


@dataclass
class Followed:
    report: Report
    why: str                  # "failed", "healthy", "eof", "stalled", "interrupted"
    signum: int | None = None # the signal that interrupted the follow
    stall_s: float | None = None

    def exit_code(self, verdict_code: int, exit_zero: bool) -> int:
        """explain's exit code (`verdict_code`, from --fail-on / --exit-zero) unless the follow was cut short."""
        if self.why == "interrupted":
            return 128 + (self.signum or 2)
        if self.why == "stalled" and not exit_zero:
            return EXIT_STALLED
        return verdict_code


def stall_timeout_for(stage: str | None, given: float | None) -> float:
    """The stall timeout in force at `stage`: the user's, else the stage's default."""
    if given is not None:
        return given
    return STALL_DEFAULTS.get(stage, STALL_DEFAULT)


class _Reader:
    """New bytes of a file (tail -F) or of stdin, without blocking past `timeout`."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.ended = False        # a pipe's writer closed it
        self.restarted = False    # the file shrank or was replaced since the last read
        self._file: BinaryIO | None = None
        self._ino: tuple[int, int] | None = None
        if source == "-":
            self._fd = sys.stdin.fileno() if hasattr(sys.stdin, "fileno") else 0
        else:
            self._open()

    def _open(self) -> None:
        try:
            f = open(self.source, "rb")  # noqa: SIM115  (kept open across reads; close() closes it)
        except OSError as e:
            raise InputError(self.source, f"cannot be opened ({e.strerror or e})") from None
        st = os.fstat(f.fileno())
        if not os.path.isfile(self.source) and not _is_fifo(st.st_mode):
            f.close()
            raise InputError(self.source, "not a regular file or a pipe: --follow reads a growing file or -")
        self._file, self._ino = f, (st.st_dev, st.st_ino)

    def read(self, timeout: float) -> bytes:
        if self.source == "-":
            return self._read_fd(self._fd, timeout)
        assert self._file is not None
        data = self._file.read(READ_CHUNK)
        if data:
            return data
        if self._replaced():
            self._file.close()
            self._open()
            self.restarted = True
            return self._file.read(READ_CHUNK)
        time.sleep(timeout)
        return b""

    def _replaced(self) -> bool:
        assert self._file is not None
        try:
            st = os.stat(self.source)
        except OSError:
            return False  # rotated away and not recreated yet: keep the old file
        return (st.st_dev, st.st_ino) != self._ino or st.st_size < self._file.tell()

    def _read_fd(self, fd: int, timeout: float) -> bytes:
        try:
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                return b""
            data = os.read(fd, READ_CHUNK)
        except OSError as e:
            raise InputError(self.source, f"read failed ({e.strerror or e})") from None
        if not data:
            self.ended = True
        return data

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def _is_fifo(mode: int) -> bool:
    import stat
    return stat.S_ISFIFO(mode)


def _accepted(report: Report, quiet: float) -> bool:
    """A failed verdict to stop at: a rule names the failure, or only a catch-all does (a log that *ends*
    with an unknown error) and the writer has been quiet long enough for that to be the end."""
    if report.verdict != "failed":
        return False
    return report.primary is None or report.primary.category != "unknown" or quiet >= BLOCK_QUIET_S


class _Progress:
    """One redrawn line on stderr (a terminal only): the stage reached and the ranks' progress."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.on = bool(getattr(sys.stderr, "isatty", lambda: False)())
        self.shown = False

    def show(self, lines: int, report: Report | None) -> None:
        if not self.on:
            return
        text = f"following {self.label}: {lines} lines"
        if report is not None:
            run = report.run
            text += f", stage {run.last_stage or 'starting'}"
            ranks = rank_progress(report)
            if ranks:
                text += f", ranks: {ranks}"
        self._write("\r\x1b[K" + text[:200])
        self.shown = True

    def clear(self) -> None:
        if self.on and self.shown:
            self._write("\r\x1b[K")
            self.shown = False

    def _write(self, s: str) -> None:
        try:
            sys.stderr.write(s)
            sys.stderr.flush()
        except (OSError, ValueError):
            self.on = False


def rank_progress(report: Report) -> str:
    """How many ranks reached each stage, from their memory lines: `2 graph_capture, 6 kv_pool`."""
    counts: dict[str, int] = {}
    for r in report.run.rank_list():
        stage = ("graph_capture" if r.graph_gib is not None or r.last_capture_bs is not None
                 else "kv_pool" if r.kv_tokens is not None or r.kv_gib is not None
                 else "weights" if r.weights_gib is not None else "init")
        counts[stage] = counts.get(stage, 0) + 1
    return ", ".join(f"{n} {s}" for s, n in counts.items())


def follow_log(source: str, label: str, rules: list[Rule], envelope: str | None = None,
               stall_timeout: float | None = None,
               interrupts: tuple[type[BaseException], ...] = ()) -> Followed:
    """Follow `source` (a path or -) until a verdict, its end, a stall or a signal; the report then."""
    fd, spool_path = tempfile.mkstemp(prefix="logdoctor-follow-")
    os.close(fd)
    try:
        return _Follow(source, label, rules, envelope, stall_timeout, spool_path).run(
            (KeyboardInterrupt, *interrupts))
    finally:
        try:
            os.unlink(spool_path)
        except OSError:
            pass


class _Follow:
    def __init__(self, source: str, label: str, rules: list[Rule], envelope: str | None,
                 stall_timeout: float | None, spool_path: str) -> None:
        self.source, self.label, self.rules, self.envelope = source, label, rules, envelope
        self.stall_timeout = stall_timeout
        self.spool_path = spool_path
        self.spool = open(spool_path, "wb")  # noqa: SIM115  (appended to while following; run() closes it)
        self.partial = b""            # bytes after the last newline: not a line yet
        self.last_line = b""          # the last whole line (does the log end inside a traceback?)
        self.lines = 0
        self.report: Report | None = None
        self.progress = _Progress(label)

    def run(self, interrupts: tuple[type[BaseException], ...]) -> Followed:
        try:
            return self._loop()
        except BaseException as e:
            # KeyboardInterrupt, or what the CLI's signal handler raises (it carries the signal's number)
            if not isinstance(e, interrupts) and not isinstance(getattr(e, "signum", None), int):
                raise
            signum = getattr(e, "signum", 2)
            self.progress.clear()
            report = self._diagnose(final=True)
            report.notes.append(f"followed: interrupted at line {self.lines}, stage "
                                f"{report.run.last_stage or 'start'}: the diagnosis so far")
            return Followed(report, "interrupted", signum)
        finally:
            self.progress.clear()
            self.spool.close()

    def _loop(self) -> Followed:
        reader = _Reader(self.source)
        try:
            now = time.monotonic()
            last_line = now          # when the last whole line came
            last_diag_end, last_diag_took = 0.0, 0.0
            pending = False          # lines came that should be diagnosed
            triggered = False        # one of them may change the verdict
            since_diag = 0
            failed_at: float | None = None
            while True:
                data = reader.read(POLL_S)
                now = time.monotonic()
                if reader.restarted:
                    reader.restarted = False
                    self._restart()
                    pending, since_diag, failed_at = True, 0, None
                if data:
                    new, trig = self._take(data)
                    if new:
                        last_line = now
                        pending = True
                        since_diag += new
                        triggered = triggered or trig
                if reader.ended:
                    if self.partial:  # the last line without a newline is a line at the end
                        self._append(self.partial + b"\n")
                        self.partial = b""
                    return Followed(self._diagnose(final=True), "eof")
                quiet = now - last_line
                if failed_at is not None:
                    # a traceback still being written (its frames are indented) has not named its error yet
                    settled = quiet >= SETTLE_S or now - failed_at >= SETTLE_MAX_S
                    if not ((settled and not self._in_block()) or quiet >= BLOCK_QUIET_S):
                        continue
                    report = self._diagnose()
                    pending, triggered, since_diag, failed_at = False, False, 0, None
                    if report.verdict == "healthy" or _accepted(report, quiet):
                        return Followed(report, report.verdict)
                    # the lines after it took the failure back, or only a catch-all names it: follow on
                elif not pending and self.report is not None and _accepted(self.report, quiet):
                    return Followed(self.report, "failed")  # a catch-all failure, and the writer went quiet
                due = triggered or quiet >= QUIET_S or since_diag >= REDIAGNOSE_LINES
                if pending and due and now - last_diag_end >= RATE_FACTOR * last_diag_took:
                    started = time.monotonic()
                    report = self._diagnose()
                    last_diag_end = time.monotonic()
                    last_diag_took = last_diag_end - started
                    pending, triggered, since_diag = False, False, 0
                    self.progress.show(self.lines, report)
                    if report.verdict == "healthy":
                        return Followed(report, "healthy")
                    if report.verdict == "failed":
                        failed_at = last_diag_end
                        continue
                stage = self.report.run.last_stage if self.report is not None else None
                limit = stall_timeout_for(stage, self.stall_timeout)
                if quiet >= limit:
                    if self.lines == 0:
                        raise InputError(self.source, f"no line arrived in {limit:g} s (--stall-timeout)")
                    report = self._diagnose(final=True)
                    report.notes.append(f"followed: no new line for {limit:g} s at stage "
                                        f"{report.run.last_stage or 'start'} (--stall-timeout): stopped "
                                        f"following at line {self.lines}")
                    return Followed(report, "stalled", stall_s=limit)
        finally:
            reader.close()

    def _take(self, data: bytes) -> tuple[int, bool]:
        """Append the whole lines of partial + data to the spool: (how many, whether one is a trigger)."""
        buf = self.partial + data
        cut = buf.rfind(b"\n") + 1
        whole, self.partial = buf[:cut], buf[cut:]
        if len(self.partial) > 1 << 20:  # a "line" of a megabyte without a newline: take it as it is
            whole, self.partial = buf + b"\n", b""
        if not whole:
            return 0, False
        self._append(whole)
        return whole.count(b"\n"), _TRIGGER.search(whole) is not None

    def _in_block(self) -> bool:
        """The log so far ends inside a traceback: its last line is a frame (indented), blank, or the header."""
        last = self.last_line
        return not last.strip() or last[:1] in (b" ", b"\t") or last.startswith(b"Traceback") or \
            last.rstrip().endswith(b"Traceback (most recent call last):")

    def _append(self, whole: bytes) -> None:
        end = whole.rstrip(b"\n").rsplit(b"\n", 1)[-1]
        self.last_line = end[-4096:] if len(end) > 4096 else end
        self.spool.write(whole)
        self.spool.flush()
        self.lines += whole.count(b"\n")

    def _restart(self) -> None:
        """The file was truncated or replaced: a new launch, diagnosed from its first line."""
        self.spool.seek(0)
        self.spool.truncate()
        self.partial, self.lines, self.report, self.last_line = b"", 0, None, b""

    def _diagnose(self, final: bool = False) -> Report:
        from logdoctor.many.launch import diagnose_logs
        if final and self.partial:
            self._append(self.partial + b"\n")
            self.partial = b""
        try:
            self.report = diagnose_logs([self.spool_path], self.rules, [self.label], self.envelope)
        except InputError as e:  # name what the user gave, not the spool
            raise InputError(self.source, e.reason) from None
        return self.report


__all__ = ["EXIT_STALLED", "STALL_DEFAULTS", "Followed", "follow_log", "rank_progress", "stall_timeout_for"]

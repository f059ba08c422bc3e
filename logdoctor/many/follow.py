"""`explain --follow`: diagnose a launch while it happens, from a growing file or a live pipe.

The bytes read (follow_source.FollowSource: tail -F on a file, select() on a pipe) are appended, whole
lines only, to a private spool file, and the spool is diagnosed with the ordinary path
(launch.diagnose_logs: the same report, envelope peeling, node splitting and citations as `explain` on
the finished file, since the spool is a verbatim copy of the log so far). A re-diagnosis reads the whole
prefix, so it is bounded: it runs when a line looks like it could change the verdict (an error, a
traceback, the ready line), when the writer has paused, or every REDIAGNOSE_LINES lines — and never
sooner than RATE_FACTOR × the last diagnosis took, so diagnosing costs at most about a third of the time
however chatty the log is.

It stops at the first failed verdict (after a short settle, and not while a Python traceback is open —
its header has come, its frames are coming, its error line is not written yet — so the report names the
error: the envelope of each line, kubectl's time or docker's JSON, is peeled to see the frames' indent),
at a healthy one (the ready line), at the end of a pipe, when no line has come for the stall timeout
(default from the stage reached: STALL_DEFAULTS), or on SIGINT / SIGTERM (the caller's signal handler
raises an exception carrying `signum`). A file that is replaced (rotation) or truncated is a new launch:
the spool restarts, and stderr says so. Compressed input (by its magic bytes, as read/sniff.py decides) is
not split into lines as it comes: it is read to its end and diagnosed as `explain` reads it.
"""
from __future__ import annotations

import os
import re
import sys
import tempfile
import time
from typing import TYPE_CHECKING

from logdoctor import regexes
from logdoctor.many.follow_source import FollowSource
from logdoctor.read.ingest import InputError, node_of
from logdoctor.read.sniff import compression_of, display_name
from logdoctor.records import dataclass
from logdoctor.run.model import STAGES

if TYPE_CHECKING:
    from logdoctor.diagnosis.ranking import Report
    from logdoctor.diagnosis.rules import Rule
    from logdoctor.read.envelope import Envelope

POLL_S = 0.1              # how often a file at its end is looked at again / stdin is waited on
QUIET_S = 0.3             # the writer paused this long: diagnose what came
SETTLE_S = 0.15           # after a failed verdict, wait this long for the rest of the burst...
SETTLE_MAX_S = 0.3        # ...but never longer than this: the verdict is due within a second
BLOCK_QUIET_S = 1.0       # only a catch-all names the failure: the writer must be quiet this long
DRAIN_S = 0.5             # on a signal, read what has come for at most this long before the diagnosis so far
TRACEBACK_WAIT_S = 3.0    # a traceback left open this long (its writer paused or died inside it) is taken as is
REDIAGNOSE_LINES = 5000   # a chatty log without triggers is still diagnosed this often
RATE_FACTOR = 2.0         # a diagnosis waits at least this many times the previous one's duration...
WARMUP_DIAGNOSES = 2      # ...except after the first ones, slow from lazy imports and pattern compiling
ENVELOPE_SAMPLE = 64      # first lines the envelope is detected from (ingest looks at as many)
MAGIC_BYTES = 16          # enough of the first bytes to tell compressed data (sniff.compression_of)
MAX_PARTIAL = 1 << 20     # a "line" of a megabyte without a newline is taken as it is
# seconds without a new line before the launch is called stalled, by the stage it reached: weight loading
# prints nothing for minutes on a large model from slow storage
STALL_DEFAULTS: dict[str | None, float] = {"weights": 600.0}
STALL_DEFAULT = 300.0
EXIT_STALLED = 3          # explain --follow: no line arrived for --stall-timeout seconds

# lines that may change the verdict: plain alternatives (no nested quantifiers: a line is untrusted input)
_TRIGGER = regexes.compile(rb"Traceback|[Ee]rror|[Ee]xception|fired up|ready to roll|[Kk]illed|[Ff]ailed|FAILED|"
                      rb"[Ff]atal|SIGSEGV|SIGABRT|Segmentation|[Aa]bort|died|exit|NCCL WARN|[Tt]imeout|"
                      rb"timed out|out of memory|OOM|Received sig")
_MAGICS = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00", b"\x5d\x00\x00", b"\x28\xb5\x2f\xfd")
_TRACEBACK = "Traceback (most recent call last):"


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


def _accepted(report: Report, quiet: float) -> bool:
    """A failed verdict to stop at: a rule names the failure, or only a catch-all does (a log that *ends*
    with an unknown error) and the writer has been quiet long enough for that to be the end."""
    if report.verdict != "failed":
        return False
    return report.primary is None or report.primary.category != "unknown" or quiet >= BLOCK_QUIET_S


def _compression(head: bytes, at_end: bool) -> tuple[bool, str | None]:
    """(known, the compression the first bytes announce or None for text); not known while they could
    still be the start of a magic number."""
    if len(head) >= MAGIC_BYTES or at_end:
        return True, compression_of(head)
    return not any(head.startswith(m) or m.startswith(head) for m in _MAGICS), None


class _Tracebacks:
    """Which sources of the log are inside a Python traceback: its header came, only indented frames since.

    Each line's envelope is peeled first (a kubectl time or a docker JSON record hides the indent); the
    sources of an interleaved log (pods, containers: what the envelope says) are told apart, so one pod's
    plain line does not close another pod's traceback."""

    def __init__(self, override: str | None) -> None:
        self.override = override
        self.sample: list[str] = []
        self.env: Envelope | None = None
        self.open: dict[str, tuple[int, float]] = {}  # source → its open traceback's header line, when it grew

    def feed(self, whole: bytes, first: int, now: float) -> None:
        """Take lines (`whole` ends with a newline), the first of them line `first`."""
        sampling = len(self.sample) < ENVELOPE_SAMPLE
        if not sampling and not self.open and b"Traceback" not in whole:
            return  # the common case: nothing can open or close a traceback here
        texts = [raw.decode("utf-8", "replace").rstrip("\r") for raw in whole.split(b"\n")[:-1]]
        if sampling or self.env is None:
            from logdoctor.read.envelope import detect
            self.sample.extend(t for t in texts[:ENVELOPE_SAMPLE] if t.strip())
            del self.sample[ENVELOPE_SAMPLE:]
            self.env = detect(self.sample, self.override)
        assert self.env is not None
        for n, text in enumerate(texts, first):
            body, attrs, _ = self.env.peel(text)
            body = body.rstrip("\r\n")
            if not body.strip():
                continue  # a blank line neither opens nor closes one
            key = f"{node_of(attrs)}|{attrs.get('container')}|{attrs.get('pid')}" if attrs else ""
            if body.endswith(_TRACEBACK):
                self.open[key] = (n, now)
            elif body[:1] in (" ", "\t"):
                if key in self.open:
                    self.open[key] = (self.open[key][0], now)
            else:
                self.open.pop(key, None)  # the error line (or any plain line) ends it

    def any_open(self, now: float, by_line: int | None = None) -> bool:
        """A traceback is open (opened at or before `by_line`: one that came after a verdict's lines is
        a cascade, not what the verdict waits for) and its writer has not left it for TRACEBACK_WAIT_S."""
        return any(now - t < TRACEBACK_WAIT_S and (by_line is None or line <= by_line)
                   for line, t in self.open.values())


class _Progress:
    """One redrawn line on stderr (a terminal only): the stage reached and the ranks' progress."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.on = bool(getattr(sys.stderr, "isatty", lambda: False)())
        self.shown = False

    def show(self, lines: int, report: Report | None) -> None:
        if not self.on:
            return
        text = f"following {self.label}: {lines} line{'' if lines == 1 else 's'}"
        if report is not None:
            text += f", stage {report.run.last_stage or 'starting'}"
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
    """Where the ranks are, furthest stage first, of the ranks the launch has: `weights 6/8, init 2/8`."""
    run = report.run
    reached: dict[str, str] = {label: rs.reached for label, rs in run.rank_stages.items() if rs.reached}
    for r in run.rank_list():  # the memory lines: a rank may print them without a stage line
        stage = ("graph_capture" if r.graph_gib is not None or r.last_capture_bs is not None
                 else "kv_pool" if r.kv_tokens is not None or r.kv_gib is not None
                 else "weights" if r.weights_gib is not None else "init")
        if r.rank not in reached or _stage_index(stage) > _stage_index(reached[r.rank]):
            reached[r.rank] = stage
    if not reached:
        return ""
    total = max(len(reached), (run.tp_size or 0) * (run.pp_size or 1))
    counts: dict[str, int] = {}
    for stage in reached.values():
        counts[stage] = counts.get(stage, 0) + 1
    return ", ".join(f"{s} {counts[s]}/{total}" for s in sorted(counts, key=_stage_index, reverse=True))


def _stage_index(stage: str) -> int:
    return STAGES.index(stage) if stage in STAGES else -1


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
        self.sniffed = False          # enough first bytes came to tell compressed data from text
        self.compression: str | None = None
        self.lines = 0
        self.report: Report | None = None
        self.progress = _Progress(label)
        self.tracebacks = _Tracebacks(envelope)

    def run(self, interrupts: tuple[type[BaseException], ...]) -> Followed:
        reader: FollowSource | None = None
        try:
            reader = FollowSource(self.source, self.say, stall_timeout_for(None, self.stall_timeout))
            return self._loop(reader)
        except BaseException as e:
            # KeyboardInterrupt, or what the CLI's signal handler raises (it carries the signal's number)
            if not isinstance(e, interrupts) and not isinstance(getattr(e, "signum", None), int):
                raise
            self.progress.clear()
            if reader is not None:
                self._drain(reader)
            if self.lines == 0 and not self.partial and not self.compression:
                raise  # nothing came: there is no diagnosis so far, only the interruption
            signum = getattr(e, "signum", 2)
            report = self._diagnose(final=True)
            report.notes.append(f"followed: interrupted at line {self.lines}, stage "
                                f"{report.run.last_stage or 'start'}: the diagnosis so far")
            return Followed(report, "interrupted", signum)
        finally:
            self.progress.clear()
            self.spool.close()
            if reader is not None:
                reader.close()

    def _drain(self, reader: FollowSource) -> None:
        """What was written before the signal is part of the diagnosis so far (bounded: DRAIN_S)."""
        end = time.monotonic() + DRAIN_S
        while not (reader.ended or reader.waiting or self.compression) and time.monotonic() < end:
            data = reader.read(0)
            if not data or reader.restarted:
                break
            self._take(data, time.monotonic())

    def say(self, message: str) -> None:
        """One notice line on stderr (whether or not it is a terminal), under the progress line."""
        self.progress.clear()
        try:
            sys.stderr.write(f"logdoctor: {display_name(self.source)}: {message}\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass

    def _loop(self, reader: FollowSource) -> Followed:
        now = time.monotonic()
        last_line = now          # when the last whole line came
        last_diag_end, last_diag_took, diagnoses = 0.0, 0.0, 0
        pending = False          # lines came that should be diagnosed
        triggered = False        # one of them may change the verdict
        since_diag = 0
        failed_at: float | None = None
        failed_lines = 0         # the lines the failed verdict was diagnosed from
        while True:
            waiting = reader.waiting
            data = reader.read(POLL_S)
            now = time.monotonic()
            if waiting and not reader.waiting:
                last_line = now  # the file appeared: its stall clock starts now
            if reader.restarted:
                self._restart(reader.restarted)
                reader.restarted = None
                pending, since_diag, failed_at = True, 0, None
            if data:
                new, trig = self._take(data, now)
                if self.compression:
                    return self._read_to_end(reader, self.compression)
                if new:
                    last_line = now
                    pending = True
                    since_diag += new
                    triggered = triggered or trig
            if reader.ended:
                if not self.sniffed and self.partial:
                    self.sniffed, self.compression = _compression(self.partial, at_end=True)
                    if self.compression:
                        return self._read_to_end(reader, self.compression)
                return Followed(self._diagnose(final=True), "eof")
            quiet = now - last_line
            if failed_at is not None:
                settled = quiet >= SETTLE_S or now - failed_at >= SETTLE_MAX_S
                if not settled or self.tracebacks.any_open(now, failed_lines):
                    continue  # the rest of the burst, or the error line of an open traceback, is coming
                report = self._diagnose()
                pending, triggered, since_diag, failed_at = False, False, 0, None
                if report.verdict == "healthy" or _accepted(report, quiet):
                    return Followed(report, report.verdict)
                # the lines after it took the failure back, or only a catch-all names it: follow on
            elif not pending and self.report is not None and _accepted(self.report, quiet) \
                    and not self.tracebacks.any_open(now):
                return Followed(self.report, "failed")  # a catch-all failure, and the writer went quiet
            due = triggered or quiet >= QUIET_S or since_diag >= REDIAGNOSE_LINES
            if pending and due and now - last_diag_end >= RATE_FACTOR * last_diag_took:
                started = time.monotonic()
                report = self._diagnose()
                last_diag_end = time.monotonic()
                diagnoses += 1
                last_diag_took = last_diag_end - started if diagnoses > WARMUP_DIAGNOSES else 0.0
                pending, triggered, since_diag = False, False, 0
                self.progress.show(self.lines, report)
                if report.verdict == "healthy":
                    return Followed(report, "healthy")
                if report.verdict == "failed":
                    failed_at, failed_lines = last_diag_end, self.lines
                    continue
            stage = self.report.run.last_stage if self.report is not None else None
            limit = stall_timeout_for(stage, self.stall_timeout)
            if quiet >= limit:
                return self._stalled(reader, limit)

    def _stalled(self, reader: FollowSource, limit: float) -> Followed:
        if reader.waiting:
            raise InputError(self.source, f"did not appear in {limit:g} s (--stall-timeout)")
        if self.lines == 0 and not self.partial:
            raise InputError(self.source, f"no line arrived in {limit:g} s (--stall-timeout)")
        report = self._diagnose(final=True)
        report.notes.append(f"followed: no new line for {limit:g} s at stage {report.run.last_stage or 'start'} "
                            f"(--stall-timeout): stopped following at line {self.lines}")
        return Followed(report, "stalled", stall_s=limit)

    def _read_to_end(self, reader: FollowSource, compression: str) -> Followed:
        """Compressed data: its lines cannot be told as they come; read it to its end (a pipe's close, a
        file's current end: a .gz still being written is its lines so far, as explain reads it)."""
        self.say(f"{compression}-compressed: read to its end and diagnosed as explain does, not followed")
        self.spool.write(self.partial)
        self.partial = b""
        last = time.monotonic()
        limit = stall_timeout_for(None, self.stall_timeout)
        stalled = False
        while not reader.ended:
            data = reader.read(POLL_S)
            now = time.monotonic()
            if data:
                self.spool.write(data)
                last = now
            elif not reader.is_pipe:
                break  # a file's current end
            elif now - last >= limit:
                stalled = True
                break
        self.spool.flush()
        report = self._diagnose()
        report.notes.append(f"followed: {compression}-compressed input, read to its end, not followed"
                            + (f" (no new data for {limit:g} s, --stall-timeout)" if stalled else ""))
        return Followed(report, "stalled", stall_s=limit) if stalled else Followed(report, "eof")

    def _take(self, data: bytes, now: float) -> tuple[int, bool]:
        """Append the whole lines of partial + data to the spool: (how many, whether one is a trigger)."""
        buf = self.partial + data
        if not self.sniffed:
            self.sniffed, self.compression = _compression(buf, at_end=False)
            if self.compression or not self.sniffed:  # compressed, or not known yet: nothing is a line
                self.partial = buf
                return 0, False
        cut = buf.rfind(b"\n") + 1
        whole, self.partial = buf[:cut], buf[cut:]
        if len(self.partial) > MAX_PARTIAL:
            whole, self.partial = buf + b"\n", b""
        if not whole:
            return 0, False
        self._append(whole, now)
        return whole.count(b"\n"), _TRIGGER.search(whole) is not None

    def _append(self, whole: bytes, now: float) -> None:
        self.tracebacks.feed(whole, self.lines + 1, now)
        self.spool.write(whole)
        self.spool.flush()
        self.lines += whole.count(b"\n")

    def _restart(self, why: str) -> None:
        """The file was truncated or replaced: a new launch, diagnosed from its first line."""
        self.say("replaced by a new file (rotated): following the new file from its start" if why == "replaced"
                 else "truncated: following it again from its start")
        self.spool.seek(0)
        self.spool.truncate()
        self.partial, self.lines, self.report, self.sniffed, self.compression = b"", 0, None, False, None
        self.tracebacks = _Tracebacks(self.envelope)

    def _diagnose(self, final: bool = False) -> Report:
        from logdoctor.many.launch import diagnose_logs
        if final and self.partial and not self.compression:
            self._append(self.partial + b"\n", time.monotonic())
            self.partial = b""
        self.spool.flush()
        try:
            self.report = diagnose_logs([self.spool_path], self.rules, [self.label], self.envelope)
        except InputError as e:  # name what the user gave, not the spool
            raise InputError(self.source, e.reason) from None
        return self.report


__all__ = ["EXIT_STALLED", "STALL_DEFAULTS", "Followed", "follow_log", "rank_progress", "stall_timeout_for"]

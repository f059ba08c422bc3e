"""`explain --follow`: a writer process prints a fixture line by line into a pipe or a growing file.

The time from the fatal (or ready) line being written to the follower's exit is measured and printed
(`pytest -s tests/test_follow.py` shows it); the bound asserted is only a hang guard, not a speed goal.
Tests that need several followers start them together (each costs a second of interpreter start-up).
"""
from __future__ import annotations

import gzip
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import zstandard

ROOT = Path(__file__).resolve().parent.parent
FAILING = ROOT / "fixtures/logs/v0.5-capture-oom-tp4.log"   # MEM003 at line 126 of 430; a traceback from 67
HEALTHY = ROOT / "fixtures/logs/v0.4-tp8.log"               # ready at line 123 of 148
HANG_GUARD_S = 10.0
# runs the steps in argv[1] (JSON) against argv[2] (a path, or - for stdout): ["lines", LOG, FIRST, LAST]
# writes LOG's lines FIRST..LAST (LAST 0: to the end) 0.01 s apart, each line's number and write time on
# stderr; ["sleep", S]; ["rotate"] renames the file to FILE.1 and goes on in a new FILE (logrotate);
# ["truncate"] empties it (`> FILE`) and goes on writing at its start
WRITER = """
import json, os, sys, time
steps, target = json.loads(sys.argv[1]), sys.argv[2]
out = sys.stdout.buffer if target == "-" else None
for step in steps:
    if step[0] == "sleep":
        time.sleep(step[1])
    elif step[0] == "rotate":
        out.close()
        os.rename(target, target + ".1")
        out = None
    elif step[0] == "truncate":
        open(target, "wb").close()
    else:
        _, path, first, last = step
        out = out or open(target, "ab", buffering=0)
        for i, line in enumerate(open(path, "rb"), 1):
            if i < first or (last and i > last):
                continue
            try:
                out.write(line)
                out.flush()
            except BrokenPipeError:
                sys.exit(0)
            sys.stderr.write(f"{i} {time.time():.6f}\\n")
            sys.stderr.flush()
            time.sleep(0.01)
"""


def _steps(log: Path, most: int = 0, pause: float = 5.0) -> list[Any]:
    return [["sleep", 0.5], ["lines", str(log), 1, most], ["sleep", pause]]


def _writer(steps: list[Any], times: IO[str], into: Path | None, stdout: Any = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", WRITER, json.dumps(steps), str(into) if into else "-"],
                            stdout=stdout, stderr=times)


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("GITHUB_STEP_SUMMARY", "LOGDOCTOR_CONFIG")}


def _follower(target: str, *extra: str, stdin: Any = None, stderr: Any = subprocess.PIPE) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "logdoctor", "explain", "--follow", target, "--format", "json",
                             *extra], stdin=stdin, stdout=subprocess.PIPE, stderr=stderr, env=_env(), cwd=ROOT)


class _Run:
    """A writer and a follower; `finish` waits for the follower, then ends the writer. On a file the writer
    starts once the follower has opened it (or, for a file not created yet, said it waits for it): a rotation
    must not happen before the follower's start-up (a second or more on a loaded machine) is over."""

    def __init__(self, tmp: Path, steps: list[Any], how: str, *extra: str, stderr: Any = subprocess.PIPE,
                 create: bool = True) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        self.times_path = tmp / "times"
        self.times = open(self.times_path, "w")  # noqa: SIM115  (closed in finish)
        if how == "pipe":
            self.writer = _writer(steps, self.times, None, stdout=subprocess.PIPE)
            self.follower = _follower("-", *extra, stdin=self.writer.stdout, stderr=stderr)
            assert self.writer.stdout is not None
            self.writer.stdout.close()  # the follower holds the read end
        else:
            self.path = tmp / "growing.log"
            if create:
                self.path.write_bytes(b"")
            self.follower = _follower(str(self.path), *extra, stderr=stderr)
            self.said = _wait_opened(self.follower, self.path) if create else _first_line(self.follower)
            self.writer = _writer(steps, self.times, self.path)

    def finish(self) -> tuple[int, dict[str, Any] | None, dict[int, float], float, str]:
        """(exit code, report or None, write time per line, follower end time, stderr)."""
        try:
            out, err = self.follower.communicate(timeout=20)
            ended = time.time()
        finally:
            self.writer.kill()
            self.writer.wait()
            self.times.close()
        lines = (ln.split() for ln in self.times_path.read_text().splitlines())
        written = {int(n): float(t) for n, t in lines}
        report = json.loads(out) if out.strip() else None
        return self.follower.returncode, report, written, ended, (getattr(self, "said", b"") + (err or b"")).decode()


def _wait_opened(follower: subprocess.Popen[bytes], path: Path) -> bytes:
    """Until the follower holds `path` open (Linux: /proc/PID/fd)."""
    deadline = time.time() + 15
    while time.time() < deadline and follower.poll() is None:
        fds = Path(f"/proc/{follower.pid}/fd")
        try:
            if any(os.readlink(fd) == str(path) for fd in fds.iterdir()):
                break
        except OSError:  # an fd closed while looked at
            pass
        time.sleep(0.02)
    return b""


def _first_line(follower: subprocess.Popen[bytes]) -> bytes:
    """The follower's first stderr line (read here, so it is given back with the rest by finish)."""
    assert follower.stderr is not None
    fd, got, deadline = follower.stderr.fileno(), b"", time.time() + 15
    while b"\n" not in got and time.time() < deadline:
        if select.select([fd], [], [], 0.1)[0]:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            got += chunk
    return got


def _follow(tmp_path: Path, log: Path, how: str, *extra: str, most: int = 0,
            pause: float = 5.0) -> tuple[int, dict[str, Any], dict[int, float], float, str]:
    code, report, written, ended, err = _Run(tmp_path / how, _steps(log, most, pause), how, *extra).finish()
    assert report is not None, err
    return code, report, written, ended, err


def _verdict_delay(how: str, what: str, line: int, written: dict[int, float], ended: float) -> float:
    delay = ended - written[line]
    print(f"\nfollow {how}: {what} line {line} written → verdict printed in {delay:.2f} s")
    assert delay < HANG_GUARD_S
    return delay


def test_failing_launch_on_a_pipe_and_a_growing_file(tmp_path: Path) -> None:
    for how in ("pipe", "file"):
        code, report, written, ended, _ = _follow(tmp_path, FAILING, how)
        assert code == 1, how
        assert report["verdict"] == "failed" and report["primary"]["rule"] == "MEM003"
        fatal = report["primary"]["line"]
        assert fatal == 126
        assert max(written) < 430  # stopped before the end of the log: the writer was still going
        _verdict_delay(how, "fatal", fatal, written, ended)


def test_healthy_launch_stops_at_the_ready_line(tmp_path: Path) -> None:
    for how in ("pipe", "file"):
        code, report, written, ended, err = _follow(tmp_path, HEALTHY, how)
        assert code == 0, how
        assert report["verdict"] == "healthy" and report["run"]["ready"]
        assert "budget_line" in report["memory"]
        ready = report["run"]["stages"]["ready"]["first_line"]
        assert ready == 123
        assert "following" not in err  # stderr is a pipe here: no progress line
        _verdict_delay(how, "ready", ready, written, ended)


def test_a_stall_prints_the_incomplete_diagnosis_and_exits_3(tmp_path: Path) -> None:
    for how in ("pipe", "file"):
        code, report, _, _, _ = _follow(tmp_path, FAILING, how, "--stall-timeout", "1", most=60, pause=30)
        assert code == 3, how
        assert report["verdict"] == "incomplete"
        assert report["run"]["last_stage"] == "kv_pool"
        assert any("no new line for 1 s" in n for n in report["notes"])


def test_the_end_of_a_pipe_is_diagnosed_by_the_usual_rules(tmp_path: Path) -> None:
    code, report, _, _, _ = _follow(tmp_path, FAILING, "pipe", most=60, pause=0)
    assert code == 0  # incomplete is not past the default --fail-on failed
    assert report["verdict"] == "incomplete" and report["run"]["counts"]["lines"] == 60


def test_ctrl_c_and_sigterm_print_the_diagnosis_so_far_and_exit_130_and_143(tmp_path: Path) -> None:
    runs = {sig: _Run(tmp_path / sig.name, _steps(FAILING, most=60, pause=30), "pipe")
            for sig in (signal.SIGINT, signal.SIGTERM)}
    deadline = time.time() + 15
    for sig, run in runs.items():
        while len(run.times_path.read_text().splitlines()) < 60 and time.time() < deadline:
            time.sleep(0.05)
    time.sleep(0.5)  # the followers have read them
    for sig, run in runs.items():
        run.follower.send_signal(sig)
    for sig, run in runs.items():
        code, report, _, _, err = run.finish()
        assert code == 128 + sig, err
        assert report is not None
        assert report["verdict"] == "incomplete" and report["run"]["counts"]["lines"] == 60
        assert any("interrupted" in n for n in report["notes"])


def test_follow_refuses_several_logs(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "logdoctor", "explain", "--follow", str(FAILING), str(HEALTHY)],
                       check=False, capture_output=True, text=True, env=_env(), timeout=20)
    assert r.returncode == 2 and "--follow reads one log" in r.stderr


def test_an_error_no_rule_knows_is_reported_once_the_writer_goes_quiet(tmp_path: Path) -> None:
    # the first 67 lines end on a traceback's header: nothing names the error, and the pipe stays open
    code, report, _, _, _ = _follow(tmp_path, FAILING, "pipe", most=67, pause=30)
    assert code == 1
    assert report["verdict"] == "failed" and report["primary"]["category"] == "unknown"


def test_a_log_not_created_yet_is_waited_for_and_bad_paths_are_one_line_errors(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("x\n")
    bad = {"is a directory": str(tmp_path),
           "its directory does not exist": str(tmp_path / "no-such-dir" / "server.log"),
           "cannot be opened": str(tmp_path / "a-file" / "server.log")}
    refused = {why: _follower(path, "--stall-timeout", "5") for why, path in bad.items()}
    # SIGTERM while waiting: nothing came, so no diagnosis, only the exit code
    waiting = _follower(str(tmp_path / "never.log"), "--stall-timeout", "30")
    # started last, so that their start-up is mostly over when its writer runs (the delay measured is its own)
    later = _Run(tmp_path / "later", _steps(FAILING), "file", create=False)  # the writer creates it at 0.5 s
    for why, p in refused.items():
        r_out, r_err = p.communicate(timeout=20)
        assert p.returncode == 2 and r_out == b"", why
        assert why in r_err.decode() and len(r_err.decode().strip().splitlines()) == 1, r_err
    code, report, written, ended, err = later.finish()
    assert code == 1 and report is not None and report["primary"]["line"] == 126
    assert "does not exist yet: waiting up to 300 s" in err and "appeared" in err, repr(err)
    _verdict_delay("file created late", "fatal", 126, written, ended)
    waiting.send_signal(signal.SIGTERM)
    w_out, w_err = waiting.communicate(timeout=20)
    assert waiting.returncode == 143 and w_out == b"" and b"terminated" in w_err


def test_a_rotated_or_truncated_file_is_followed_from_the_new_start(tmp_path: Path) -> None:
    # a healthy launch's first 40 lines, then logrotate (rename + new file) or `> log`, then a failing launch
    runs = {how: _Run(tmp_path / how, [["sleep", 0.5], ["lines", str(HEALTHY), 1, 40], ["sleep", 0.6], [how],
                                       ["sleep", 0.3], ["lines", str(FAILING), 1, 0], ["sleep", 5]], "file")
            for how in ("rotate", "truncate")}
    for how, run in runs.items():
        code, report, written, ended, err = run.finish()
        assert code == 1, err
        assert report is not None and report["primary"]["rule"] == "MEM003"
        assert report["primary"]["line"] == 126  # counted from the new file's first line
        assert ("replaced by a new file (rotated)" if how == "rotate" else "truncated: following it again") in err
        _verdict_delay(f"file after {how}", "fatal", 126, written, ended)


def test_compressed_input_is_read_to_its_end_not_followed(tmp_path: Path) -> None:
    gz = tmp_path / "server.log.gz"
    gz.write_bytes(gzip.compress(FAILING.read_bytes()))
    zst = tmp_path / "server.log.zst"
    zst.write_bytes(zstandard.ZstdCompressor().compress(FAILING.read_bytes()))
    with open(zst, "rb") as stdin:
        followers = {"gzip": _follower(str(gz)), "zstd": _follower("-", stdin=stdin)}
        for name, p in followers.items():
            out, err = p.communicate(timeout=20)
            assert p.returncode == 1, err
            report = json.loads(out)
            assert report["primary"]["rule"] == "MEM003" and report["run"]["counts"]["lines"] == 430
            assert f"{name}-compressed: read to its end" in err.decode()


def _enveloped(tmp_path: Path) -> dict[str, Path]:
    """FAILING as `kubectl logs -f --timestamps` (RFC 3339 with nanoseconds) and docker's json-file show it."""
    lines = FAILING.read_bytes().splitlines(keepends=True)
    kubectl, docker = tmp_path / "kubectl.log", tmp_path / "docker.log"
    kubectl.write_bytes(b"".join(b"2025-06-01T10:%02d:%02d.%09dZ " % (i // 60, i % 60, 123456789 + i) + line
                                 for i, line in enumerate(lines)))
    docker.write_bytes(b"".join(json.dumps({"log": line.decode(), "stream": "stderr",
                                            "time": f"2025-06-01T10:00:00.{i:09d}Z"}).encode() + b"\n"
                                for i, line in enumerate(lines)))
    return {"kubectl": kubectl, "docker": docker}


def test_an_enveloped_traceback_on_a_pipe_is_reported_at_its_error_line(tmp_path: Path) -> None:
    # the writer pauses 1.5 s inside the traceback that starts at line 67: its header names no error, and
    # a verdict then would be early (a catch-all on the header); the error line is 126 (MEM003)
    runs = {name: _Run(tmp_path / name, [["sleep", 0.5], ["lines", str(log), 1, 100], ["sleep", 1.5],
                                         ["lines", str(log), 101, 0], ["sleep", 5]], "pipe")
            for name, log in _enveloped(tmp_path).items()}
    for name, run in runs.items():
        code, report, written, ended, err = run.finish()
        assert code == 1, err
        assert report is not None, err
        assert report["primary"]["rule"] == "MEM003", report["primary"]
        evidence = report["primary"]["evidence"][0]
        assert evidence["text"].startswith("CUDA out of memory") and evidence["rank"] == "TP2"  # unwrapped
        assert report["run"]["counts"]["lines"] >= 126
        _verdict_delay(f"pipe, {name} envelope", "fatal", 126, written, ended)


def test_progress_is_drawn_on_a_terminal_only(tmp_path: Path) -> None:
    master, slave = os.openpty()
    try:
        run = _Run(tmp_path, _steps(HEALTHY), "pipe", stderr=slave)
        os.close(slave)
        slave = -1
        code, report, _, _, _ = run.finish()
        drawn = b""
        while True:
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:  # EIO: the terminal's other side is closed and all of it was read
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)
    assert code == 0 and report is not None and report["verdict"] == "healthy"
    text = drawn.decode(errors="replace")
    assert "\r\x1b[Kfollowing <stdin>: " in text and ", stage " in text
    assert re.search(r"ranks: [a-z_]+ [1-8]/8", text), text  # where the 8 ranks are


def test_a_named_fifo_is_read_as_a_pipe_whose_writer_may_come_later(tmp_path: Path) -> None:
    fifo = tmp_path / "server.log"
    os.mkfifo(fifo)
    follower = _follower(str(fifo))
    time.sleep(0.3)  # the follower may be up before the writer, or not: both are fine
    with open(fifo, "wb") as w:  # blocks until the follower has opened it
        w.write(FAILING.read_bytes())
    out, err = follower.communicate(timeout=20)
    assert follower.returncode == 1, err
    assert json.loads(out)["primary"]["rule"] == "MEM003"

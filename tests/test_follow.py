"""`explain --follow`: a writer process prints a fixture line by line into a pipe or a growing file.

The time from the fatal (or ready) line being written to the follower's exit is measured and printed
(`pytest -s tests/test_follow.py` shows it); the bound asserted is only a hang guard, not a speed goal.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
FAILING = ROOT / "fixtures/logs/v0.5-capture-oom-tp4.log"   # MEM003 at line 126 of 430
HEALTHY = ROOT / "fixtures/logs/v0.4-tp8.log"               # ready at line 123 of 148
HANG_GUARD_S = 10.0
# prints LOG's first MAX lines (0: all) at DELAY s each after a START s pause, the write time of each line
# on stderr, then waits PAUSE s before closing
WRITER = """
import sys, time
path, delay, start, pause, most = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
out = open(sys.argv[6], "ab", buffering=0) if len(sys.argv) > 6 else sys.stdout.buffer
time.sleep(start)
for i, line in enumerate(open(path, "rb"), 1):
    if most and i > most:
        break
    try:
        out.write(line)
        out.flush()
    except BrokenPipeError:
        break
    sys.stderr.write(f"{i} {time.time():.6f}\\n")
    sys.stderr.flush()
    time.sleep(delay)
time.sleep(pause)
"""


def _writer(log: Path, times: IO[str], into: Path | None, *, most: int = 0, pause: float = 5.0,
            stdout: Any = None) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-c", WRITER, str(log), "0.01", "0.5", str(pause), str(most)]
    if into is not None:
        args.append(str(into))
    return subprocess.Popen(args, stdout=stdout, stderr=times)


def _follower(target: str, *extra: str, stdin: Any = None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_STEP_SUMMARY", "LOGDOCTOR_CONFIG")}
    return subprocess.Popen([sys.executable, "-m", "logdoctor", "explain", "--follow", target, "--format", "json",
                             *extra], stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            cwd=ROOT)


def _follow(tmp_path: Path, log: Path, how: str, *extra: str, most: int = 0,
            pause: float = 5.0) -> tuple[int, dict[str, Any], dict[int, float], float, str]:
    """Run writer and follower; (exit code, report, write time per line, follower end time, stderr)."""
    times_path = tmp_path / "times"
    with open(times_path, "w") as times:
        if how == "pipe":
            writer = _writer(log, times, None, most=most, pause=pause, stdout=subprocess.PIPE)
            follower = _follower("-", *extra, stdin=writer.stdout)
            assert writer.stdout is not None
            writer.stdout.close()  # the follower holds the read end
        else:
            growing = tmp_path / "growing.log"
            growing.write_bytes(b"")
            follower = _follower(str(growing), *extra)
            writer = _writer(log, times, growing, most=most, pause=pause)
        try:
            out, err = follower.communicate(timeout=20)
            ended = time.time()
        finally:
            writer.kill()
            writer.wait()
    written = {int(n): float(t) for n, t in (ln.split() for ln in times_path.read_text().splitlines())}
    return follower.returncode, json.loads(out), written, ended, err.decode()


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
        code, report, written, ended, _ = _follow(tmp_path, HEALTHY, how)
        assert code == 0, how
        assert report["verdict"] == "healthy" and report["run"]["ready"]
        assert "budget_line" in report["memory"]
        ready = report["run"]["stages"]["ready"]["first_line"]
        assert ready == 123
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


def test_ctrl_c_prints_the_diagnosis_so_far_and_exits_130(tmp_path: Path) -> None:
    times_path = tmp_path / "times"
    with open(times_path, "w") as times:
        writer = _writer(FAILING, times, None, most=60, pause=30, stdout=subprocess.PIPE)
        follower = _follower("-", stdin=writer.stdout)
        assert writer.stdout is not None
        writer.stdout.close()
        try:
            deadline = time.time() + 15
            while len(times_path.read_text().splitlines()) < 60 and time.time() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)  # the follower has read them
            follower.send_signal(signal.SIGINT)
            out, _ = follower.communicate(timeout=20)
        finally:
            writer.kill()
            writer.wait()
    assert follower.returncode == 130
    report = json.loads(out)
    assert report["verdict"] == "incomplete" and report["run"]["counts"]["lines"] == 60
    assert any("interrupted" in n for n in report["notes"])


def test_follow_refuses_several_logs(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    r = subprocess.run([sys.executable, "-m", "logdoctor", "explain", "--follow", str(FAILING), str(HEALTHY)],
                       check=False, capture_output=True, text=True, env=env, timeout=20)
    assert r.returncode == 2 and "--follow reads one log" in r.stderr


def test_an_error_no_rule_knows_is_reported_once_the_writer_goes_quiet(tmp_path: Path) -> None:
    # the first 67 lines end on a traceback's header: nothing names the error, and the pipe stays open
    code, report, _, _, _ = _follow(tmp_path, FAILING, "pipe", most=67, pause=30)
    assert code == 1
    assert report["verdict"] == "failed" and report["primary"]["category"] == "unknown"

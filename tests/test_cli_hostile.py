"""The command line with closed or vanishing standard streams, signals, odd file names; exit codes (issue 9)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cliserver import run_cli

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "fixtures" / "logs"
HEALTHY, FAILED = LOGS / "v0.4-tp8.log", LOGS / "v0.4-kv-not-enough-tp8.log"
HANG_GUARD_S = 120  # not a speed goal: only keeps a broken build from hanging the suite
LOGDOCTOR = [sys.executable, "-m", "logdoctor.cli"]


def run(*args: str, close: int | None = None, stdin: bytes | None = None, cwd: Path = ROOT
        ) -> subprocess.CompletedProcess[bytes]:
    """Run logdoctor; `close` names a standard descriptor (0 or 1) the child starts without."""
    return run_cli(args, input=stdin, close=() if close is None else (close,), cwd=cwd, timeout=HANG_GUARD_S)


def _quiet(p: subprocess.CompletedProcess[bytes]) -> str:
    err = p.stderr.decode()
    assert "Traceback" not in err and "AttributeError" not in err and "internal error" not in err, err
    return err


# ------------------------------------------------------------------------------------------------
# standard streams


@pytest.mark.parametrize("args", [("explain", "-"), ("explain",), ("summary", "-"), ("parse", "-")])
def test_a_closed_stdin_is_an_input_error(args: tuple[str, ...]) -> None:
    p = run(*args, close=0)
    assert p.returncode == 2
    assert _quiet(p).strip() == "logdoctor: <stdin>: stdin is closed"


def test_a_closed_stdout_is_an_error_unless_output_goes_to_a_file(tmp_path: Path) -> None:
    p = run("parse", str(HEALTHY), close=1)
    assert p.returncode == 2
    assert "stdout is closed" in _quiet(p)
    log, out = tmp_path / "failed.log", tmp_path / "rows.csv"
    shutil.copy(FAILED, log)
    for jobs in ("1", "2"):
        p = run("batch", str(log), "--format", "csv", "-o", str(out), "--jobs", jobs, "--no-progress", close=1)
        assert p.returncode == 1, p.stderr  # a failure diagnosed, and written where -o points
        assert "failed.log,failed" in out.read_text()
    # the log was opened while fd 1 was free: nothing meant for stdout went into it
    assert log.read_bytes() == FAILED.read_bytes()


def test_a_reader_that_stops_early_ends_the_command_quietly(tmp_path: Path) -> None:
    big = tmp_path / "big.log"
    big.write_bytes(HEALTHY.read_bytes() * 40)  # far more output than a pipe buffer holds
    for args in (("parse", str(big)), ("parse", "--format", "table", str(big))):
        proc = subprocess.Popen([*LOGDOCTOR, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
        assert proc.stdout is not None and proc.stdout.readline()  # `| head -1`
        proc.stdout.close()
        _, err = proc.communicate(timeout=HANG_GUARD_S)
        assert proc.returncode == 141, err  # 128 + SIGPIPE, as a shell reports a writer the pipe ended
        assert err == b"", err


def _handles(pid: int, *sigs: int) -> bool:
    """Whether the process has installed handlers for these signals (Linux: SigCgt in /proc)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("SigCgt:")), 16)
    return all(caught >> (s - 1) & 1 for s in sigs)


@pytest.mark.parametrize("sig, code, word", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
def test_signals_end_explain_with_130_and_143(sig: int, code: int, word: str) -> None:
    # stdin stays open and empty: explain waits for the log, as it does behind a slow pipe
    proc = subprocess.Popen([*LOGDOCTOR, "explain", "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=ROOT)
    deadline = time.monotonic() + HANG_GUARD_S
    while not _handles(proc.pid, signal.SIGINT, signal.SIGTERM):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == code
    assert err.decode().strip() == f"logdoctor: {word}"


# ------------------------------------------------------------------------------------------------
# file names in human-readable output


def test_file_names_are_escaped_in_reports_and_messages(tmp_path: Path) -> None:
    name = "esc\x1b[2Jnl\nbad"
    shutil.copy(FAILED, tmp_path / f"{name}.log")
    raw = os.path.join(os.fsencode(tmp_path), b"x\xff.log")
    with open(raw, "wb") as f:
        f.write(HEALTHY.read_bytes())
    shown = "esc\\x1b[2Jnl\\x0abad.log"
    for args in (("explain", f"{name}.log"), ("explain", "--format", "markdown", f"{name}.log"),
                 ("summary", f"{name}.log"), ("memory", f"{name}.log")):
        p = run(*args, cwd=tmp_path)
        out = p.stdout.decode("utf-8")
        assert "\x1b" not in out and (shown in out or args[0] == "memory"), args  # memory names no file
    p = run("explain", "--format", "json", f"{name}.log", cwd=tmp_path)
    assert json.loads(p.stdout)["source"] == shown
    p = run("explain", os.fsdecode(b"x\xff.log"), cwd=tmp_path)
    assert p.returncode == 0 and "x\\xff.log" in p.stdout.decode("utf-8")
    p = run("compare", f"{name}.log", os.fsdecode(b"x\xff.log"), cwd=tmp_path)
    assert f"A: {shown}" in p.stdout.decode("utf-8") and "B: x\\xff.log" in p.stdout.decode("utf-8")
    p = run("parse", "--no-unparsed", f"{name}.log", os.fsdecode(b"x\xff.log"), cwd=tmp_path)
    assert {json.loads(ln)["source"] for ln in p.stdout.decode().splitlines()} == {shown, "x\\xff.log"}
    missing = run("explain", "gone\x1b]0;owned\x07.log", cwd=tmp_path)
    assert missing.returncode == 2
    assert _quiet(missing).strip() == "logdoctor: gone\\x1b]0;owned\\x07.log: no such file"


# ------------------------------------------------------------------------------------------------
# exit codes, command by command (README: 0 nothing failed, 1 failure diagnosed, 2 usage or input error)


def test_exit_codes_are_the_documented_ones(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    shutil.copy(HEALTHY, logs / "ok.log")
    codes = {
        ("parse", str(HEALTHY)): 0,
        ("summary", str(FAILED)): 0,  # a summary diagnoses nothing
        ("memory", str(FAILED)): 0,
        ("explain", str(HEALTHY)): 0,
        ("explain", str(FAILED)): 1,
        ("explain", "--exit-zero", str(FAILED)): 0,
        ("batch", str(logs), "--no-progress"): 0,
        ("batch", str(logs), str(FAILED), "--no-progress"): 1,
        ("batch", str(logs), str(FAILED), str(tmp_path / "gone.log"), "--no-progress"): 2,
        ("runs", str(logs), "--no-progress"): 0,
        ("runs", str(FAILED), "--no-progress"): 1,
        ("clusters", str(logs), "--no-progress"): 0,
        ("clusters", str(logs), str(tmp_path / "gone.log"), "--no-progress"): 2,
        ("compare", str(HEALTHY), str(FAILED)): 0,
        ("rules", "list"): 0,
        ("explain", str(tmp_path / "gone.log")): 2,
        ("batch",): 2,
        ("batch", str(logs), "--jobs", "0"): 2,
        ("batch", str(logs), "--timeout", "-1"): 2,
    }
    got = {args: run(*args).returncode for args in codes}
    assert got == codes

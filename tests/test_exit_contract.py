"""One exit-code contract for every command (README "Exit codes"), command by command on the same hostile
inputs: an empty file, a binary file, a missing file, a directory, `-` with empty stdin, stdin closed,
stdout closed (`>&-`), stdout full (`> /dev/full`) and stdout's reader gone (`| head`).

0 nothing found / success, 1 a finding (--fail-on), 2 usage or input error (one line on stderr naming the
file or option, never a traceback), 141 stdout's reader went away (quiet).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cliserver import run_cli

ROOT = Path(__file__).resolve().parent.parent
FAILED = ROOT / "fixtures" / "logs" / "v0.5-capture-oom-tp4.log"      # a failed launch
HEALTHY = ROOT / "fixtures" / "logs" / "v0.4-tp8.log"

# every command that reads logs, with the arguments that go before the log
ONE_LOG = {"parse": ("parse",), "summary": ("summary",), "memory": ("memory",), "explain": ("explain",)}
MANY_LOGS = {"batch": ("batch", "--no-progress", "--jobs", "1"), "runs": ("runs", "--no-progress", "--jobs", "1"),
             "clusters": ("clusters", "--no-progress", "--jobs", "1"),
             "report": ("report", "--no-progress", "--jobs", "1")}


def run(*args: str, stdin: bytes | None = None, cwd: Path = ROOT, **kw: Any) -> subprocess.CompletedProcess[bytes]:
    """`python -m logdoctor.cli ARGS` in a process of its own (forked from tests/cliserver.py's warm server)."""
    return run_cli(args, input=stdin, cwd=cwd, timeout=120, **kw)


def one_line_error(p: subprocess.CompletedProcess[bytes], *names: str) -> str:
    """The stderr of a failed command: exactly one `logdoctor: …` line that names each of `names`."""
    err = p.stderr.decode()
    assert p.returncode == 2, (p.returncode, err)
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith("logdoctor: "), err
    for n in names:
        assert n in err, (n, err)
    return err


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("hostile")
    (d / "empty.log").write_bytes(b"")
    (d / "binary.log").write_bytes(bytes(range(256)) * 16)
    (d / "nologs").mkdir()
    (d / "nologs" / "notes.md").write_text("not a log\n")
    return {"empty": d / "empty.log", "binary": d / "binary.log", "missing": d / "missing.log",
            "directory": d / "nologs"}


WHY = {"empty": "empty", "binary": "binary file", "missing": "no such file", "directory": "directory"}


@pytest.mark.parametrize("command", list(ONE_LOG))
@pytest.mark.parametrize("kind", list(WHY))
def test_one_log_commands_refuse_what_is_not_a_log(command: str, kind: str, hostile: dict[str, Path]) -> None:
    path = hostile[kind]
    p = run(*ONE_LOG[command], str(path))
    one_line_error(p, path.name, WHY[kind])
    assert p.stdout == b""  # no half a document before the error


@pytest.mark.parametrize("command", list(ONE_LOG) + ["compare"])
def test_empty_stdin_is_an_empty_input(command: str) -> None:
    args = ("compare", "-", str(HEALTHY)) if command == "compare" else (*ONE_LOG[command], "-")
    one_line_error(run(*args, stdin=b""), "<stdin>", "empty input")


@pytest.mark.parametrize("command", list(ONE_LOG))
def test_a_closed_stdin_is_said_to_be_closed(command: str) -> None:
    p = run(*ONE_LOG[command], "-", stdin=None, close=(0,))
    one_line_error(p, "stdin is closed")


@pytest.mark.parametrize("kind", list(WHY))
@pytest.mark.parametrize("side", ["a", "b"])
def test_compare_refuses_either_side(kind: str, side: str, hostile: dict[str, Path]) -> None:
    bad = str(hostile[kind])
    args = (bad, str(HEALTHY)) if side == "a" else (str(HEALTHY), bad)
    one_line_error(run("compare", *args), hostile[kind].name, WHY[kind])


@pytest.mark.parametrize("command", list(MANY_LOGS))
@pytest.mark.parametrize("kind", ["empty", "binary", "missing"])
def test_many_log_commands_name_each_unreadable_file(command: str, kind: str, hostile: dict[str, Path]) -> None:
    path = hostile[kind]
    p = run(*MANY_LOGS[command], str(path), str(HEALTHY))
    err = p.stderr.decode()
    assert p.returncode == 2 and "Traceback" not in err, err
    # one line per unreadable file, naming it; the readable one still gets its row
    assert err.splitlines() == [f"logdoctor: {path}: {err.split(': ', 2)[2].strip()}"]
    assert WHY[kind].split()[0] in err
    if command != "clusters":
        assert HEALTHY.name in p.stdout.decode()


@pytest.mark.parametrize("command", list(MANY_LOGS))
def test_a_directory_without_logs_is_nothing_read(command: str, hostile: dict[str, Path]) -> None:
    one_line_error(run(*MANY_LOGS[command], str(hostile["directory"])), "nologs", "no logs found")


@pytest.mark.parametrize("command", [c for c in MANY_LOGS if c != "report"])  # `report -` is one log's page
def test_many_log_commands_do_not_read_stdin(command: str) -> None:
    one_line_error(run(*MANY_LOGS[command], "-", stdin=b"x\n"), "-:", "explain -")


def test_report_of_stdin_is_one_log_and_empty_stdin_is_an_error() -> None:
    assert run(*MANY_LOGS["report"], "-", stdin=open(FAILED, "rb").read()).returncode == 1
    one_line_error(run(*MANY_LOGS["report"], "-", stdin=b""), "<stdin>", "empty input")


def test_findings_exit_1_and_nothing_found_exits_0() -> None:
    assert run("explain", str(FAILED)).returncode == 1
    assert run("explain", str(HEALTHY)).returncode == 0
    assert run("explain", "--exit-zero", str(FAILED)).returncode == 0
    assert run(*MANY_LOGS["batch"], str(FAILED)).returncode == 1
    assert run(*MANY_LOGS["runs"], str(FAILED)).returncode == 1
    assert run(*MANY_LOGS["batch"], str(HEALTHY)).returncode == 0
    for args in (("parse", str(FAILED)), ("summary", str(FAILED)), ("memory", str(FAILED)),
                 ("compare", str(FAILED), str(HEALTHY)), (*MANY_LOGS["clusters"], "--all", str(FAILED)),
                 ("rules", "list"), ("rules", "explain", "MEM001")):
        assert run(*args).returncode == 0, args  # these report, they do not judge


@pytest.mark.parametrize("kind", ["empty", "missing", "directory"])
def test_rules_check_and_test_refuse_a_directory_with_no_rules(kind: str, hostile: dict[str, Path]) -> None:
    for command in ("check", "test"):
        p = run("rules", command, str(hostile[kind]))
        one_line_error(p, hostile[kind].name)


@pytest.mark.parametrize("kind", list(WHY))
def test_rules_new_refuses_what_is_not_a_log(kind: str, hostile: dict[str, Path]) -> None:
    one_line_error(run("rules", "new", "--from", str(hostile[kind])), hostile[kind].name)


def test_rule_ids_are_case_insensitive_with_did_you_mean() -> None:
    p = run("rules", "explain", "mem001")
    assert p.returncode == 0 and p.stdout.decode().startswith("MEM001")
    err = one_line_error(run("rules", "explain", "MEM00"), "'MEM00'", "did you mean")
    assert "'MEM001'" in err
    err = one_line_error(run("rules", "explain", "kv-pool-does-not-fi"), "did you mean 'kv-pool-does-not-fit'")
    assert "rules list" in one_line_error(run("rules", "explain", "zzzzzz"))


def test_library_errors_are_one_line_naming_the_option() -> None:
    err = one_line_error(run(*MANY_LOGS["runs"], "--filter", "path~[", str(HEALTHY)))
    assert err == "logdoctor: --filter path~[: bad regex: unclosed character class\n"
    err = one_line_error(run(*MANY_LOGS["runs"], "--sort", "-kvtokens", str(HEALTHY)), "--sort", "'kvtokens'")
    assert "did you mean 'kv_tokens'" in err
    one_line_error(run(*MANY_LOGS["runs"], "--filter", "pth=x", str(HEALTHY)), "--filter", "did you mean 'path'")
    one_line_error(run(*MANY_LOGS["runs"], "--group-by", "nope", str(HEALTHY)), "--group-by", "'nope'")
    one_line_error(run(*MANY_LOGS["runs"], "--filter", "kv_tokens>lots", str(HEALTHY)), "--filter", "numeric")


def test_usage_errors_are_one_line_naming_the_option() -> None:
    one_line_error(run("explain", "--format", "nope", str(HEALTHY)), "'--format'", "'nope'", "explain --help")
    one_line_error(run("summary", "--bogus", str(HEALTHY)), "--bogus")
    one_line_error(run("compare", str(HEALTHY)), "'B'")
    one_line_error(run("nosuchcommand"), "nosuchcommand")


def test_broken_rule_files_are_one_line_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "yaml").mkdir()
    (tmp_path / "yaml" / "bad.yaml").write_text("id: [unclosed\n")
    (tmp_path / "schema").mkdir()
    (tmp_path / "schema" / "odd.yaml").write_text("id: X1\nname: odd\n")
    for d, name in (("yaml", "bad.yaml"), ("schema", "odd.yaml")):
        one_line_error(run("explain", "--rules", str(tmp_path / d), str(HEALTHY)), name)


# ------------------------------------------------------------------------------------------------
# stdout that cannot take the output

EVERY_COMMAND = [("parse", str(HEALTHY)), ("summary", str(HEALTHY)), ("memory", str(HEALTHY)),
                 ("explain", str(FAILED)), (*MANY_LOGS["batch"], str(FAILED)), (*MANY_LOGS["runs"], str(FAILED)),
                 (*MANY_LOGS["clusters"], "--all", str(FAILED)), (*MANY_LOGS["report"], str(FAILED)), ("compare", str(FAILED), str(HEALTHY)),
                 ("rules", "list"), ("rules", "explain", "MEM001"), ("rules", "new", "--from", str(FAILED)),
                 ("rules", "check", "rules/unsupported"), ("rules", "test", "rules/unsupported"), ("config",),
                 ("--help",), ("--version",), ("explain", "--help")]


def test_every_command_is_in_the_contract() -> None:
    """A new command joins these tests: each (sub)command of the CLI is exercised on a closed stdout."""
    import click

    from logdoctor.cli.main import cli as group

    def names(g: click.Group, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
        out: set[tuple[str, ...]] = set()
        for name, c in g.commands.items():
            out |= names(c, (*prefix, name)) if isinstance(c, click.Group) else {(*prefix, name)}
        return out
    covered = {a[:2] if a[0] == "rules" else a[:1] for a in EVERY_COMMAND}
    assert names(group) <= covered, names(group) - covered


def test_a_broken_config_file_is_one_line_naming_it(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.logdoctor\n")
    for args in (("config",), ("explain", str(HEALTHY))):
        one_line_error(run(*args, cwd=tmp_path), "pyproject.toml:1", "TOML")


@pytest.mark.parametrize("args", EVERY_COMMAND, ids=lambda a: " ".join(x for x in a if not x.startswith("/")))
def test_a_reader_gone_exits_141_quietly(args: tuple[str, ...]) -> None:
    r, w = os.pipe()
    os.close(r)  # the reader went away before the first byte: every write is EPIPE
    try:
        p = run(*args, stdout=w)
    finally:
        os.close(w)
    assert p.returncode == 141 and p.stderr == b"", (p.returncode, p.stderr)


@pytest.mark.parametrize("args", EVERY_COMMAND[:4] + EVERY_COMMAND[8:10],
                         ids=lambda a: " ".join(x for x in a if not x.startswith("/")))
def test_head_c1_is_quiet(args: tuple[str, ...], tmp_path: Path) -> None:
    """`| head -c1`: the output may fit the pipe before head leaves (the command's own code) or not (141)."""
    cmd = " ".join([sys.executable, "-m", "logdoctor.cli", *args])
    err = tmp_path / "err"
    p = subprocess.run(["bash", "-c", f"{cmd} 2>{err} | head -c1 >/dev/null; echo ${{PIPESTATUS[0]}}"],
                       capture_output=True, cwd=ROOT, timeout=120)
    code = int(p.stdout.decode().split()[-1])
    assert code in (0, 1, 141), code
    assert err.read_bytes() == b""


@pytest.mark.parametrize("args", EVERY_COMMAND, ids=lambda a: " ".join(x for x in a if not x.startswith("/")))
def test_a_closed_stdout_is_one_line_exit_2(args: tuple[str, ...]) -> None:
    p = run(*args, close=(1,))
    one_line_error(p, "stdout is closed")


@pytest.mark.parametrize("args", EVERY_COMMAND, ids=lambda a: " ".join(x for x in a if not x.startswith("/")))
def test_a_full_stdout_is_one_line_exit_2(args: tuple[str, ...]) -> None:
    with open("/dev/full", "wb") as full:
        p = run(*args, stdout=full)
    one_line_error(p, "stdout: write failed (no space left on device)")


# ------------------------------------------------------------------------------------------------
# how the process ends: `main` skips the interpreter's teardown only when nothing else needs the exit

def _program(tmp_path: Path, before: str, *args: str) -> subprocess.CompletedProcess[str]:
    """A fresh interpreter that runs `before`, then `logdoctor ARGS` through `main` (the script's entry)."""
    code = (f"import sys\n{before}\n"
            "from logdoctor.cli.main import main\n"
            f"sys.argv = ['logdoctor', *{list(args)!r}]\n"
            "main()\n"
            "print('main returned')\n")
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          check=False)


def test_main_ends_the_process_with_the_exit_code_after_atexit_and_a_full_flush(tmp_path: Path) -> None:
    mark = tmp_path / "atexit.txt"
    p = _program(tmp_path, f"import atexit; atexit.register(lambda: open({str(mark)!r}, 'w').write('ran'))",
                 "explain", "--format", "json", str(FAILED))
    assert p.returncode == 1, p.stderr       # a failure diagnosed
    assert mark.read_text() == "ran"         # atexit functions run as at a normal exit
    assert "main returned" not in p.stdout   # the process ended inside main
    assert p.stdout.rstrip().endswith("}")   # the JSON reached the pipe whole (buffered output flushed)
    import json
    assert json.loads(p.stdout)["verdict"] == "failed"


def test_with_another_thread_alive_the_exit_is_the_interpreters(tmp_path: Path) -> None:
    # a non-daemon thread still running when the command ends: the interpreter's exit waits for it
    mark = tmp_path / "thread.txt"
    before = ("import threading, time\n"
              f"threading.Thread(target=lambda: (time.sleep(0.5), open({str(mark)!r}, 'w').write('done'))).start()")
    p = _program(tmp_path, before, "--version")
    assert p.returncode == 0, p.stderr
    assert mark.read_text() == "done"
    assert "logdoctor" in p.stdout and "main returned" not in p.stdout

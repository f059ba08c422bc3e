"""Every output logdoctor gives on a set of logs, recorded so a change meant to be invisible can be checked.

    python tools/output_snapshot.py write before.json.gz [--corpus ../shared/corpus] [--big]
    python tools/output_snapshot.py check before.json.gz [--corpus ../shared/corpus] [--big]

For every log under `fixtures/` (and `--corpus DIR`, recursively), the outputs of `explain --format json`,
`summary --format json`, `memory --format json` and `parse --format jsonl` are recorded, each run in
this process through the CLI. `--big` adds generated logs the fixtures are too small to be: the bench's
5,000-line launch log and a serving log past the exact-quantile limit (`bench/bench_parse.py`), plain and
wrapped the four ways `bench/bench_envelope.py` wraps it, through `summary` and `explain` in a child process
(as a user runs them). `check` prints every output that differs and exits 1 if any does.

A speed change (issue 17) must leave this unchanged: the before and after snapshots are compared.
"""
from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

LOG_SUFFIXES = (".log", ".txt", ".gz", ".bz2", ".xz", ".zst", ".jsonl", ".bin")
COMMANDS = (("explain", "--format", "json", "--exit-zero"), ("summary", "--format", "json"),
            ("memory", "--format", "json"), ("parse", "--format", "jsonl"))


def logs_under(directory: Path) -> Iterator[Path]:
    for path in sorted(directory.rglob("*")):
        if path.is_file() and path.name.endswith(LOG_SUFFIXES):
            yield path


def run_in_process(args: list[str]) -> str:
    """The CLI's stdout and exit code for `args`, run in this process (stderr is not part of it)."""
    from logdoctor.cli import cli
    out, err = io.StringIO(), io.StringIO()
    code: object = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(args=args, prog_name="logdoctor", standalone_mode=False)
        except SystemExit as e:
            code = e.code
        except Exception as e:  # a click usage error and the like: recorded as such
            code = f"{type(e).__name__}: {e}"
    return f"exit={code}\n{out.getvalue()}"


def small_outputs(dirs: list[Path]) -> dict[str, str]:
    outputs: dict[str, str] = {}
    for args in (["rules", "list", "--format", "json"],
                 ["batch", "fixtures/logs", "--format", "csv", "--jobs", "1", "--no-progress", "--fail-on", "failed"]):
        outputs[" ".join(args)] = run_in_process(args)
    for directory in dirs:
        # paths relative to the directory's parent, so a snapshot of another checkout compares equal
        os.chdir(directory.parent)
        for path in logs_under(directory):
            shown = os.path.relpath(path, directory.parent)
            for cmd in COMMANDS:
                outputs[f"{' '.join(cmd[:1])} {shown}"] = run_in_process([cmd[0], shown, *cmd[1:]])
    os.chdir(ROOT)
    return outputs


def big_outputs(work: Path) -> dict[str, str]:
    from bench_envelope import WRAPPERS, wrap_file
    from bench_parse import write_launch_log, write_serving_log
    # this checkout's code, whatever the environment has installed
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    logs: list[Path] = []
    launch = work / "launch5k.log"
    write_launch_log(launch, 5000)
    logs.append(launch)
    serving = work / "serving.log"
    write_serving_log(serving, 60)  # ≈ 300k decode lines: past EXACT_LIMIT (200,000 values)
    logs.append(serving)
    for name, wrap in WRAPPERS.items():
        wrapped = work / f"serving.{name}.log"
        wrap_file(serving, wrapped, wrap)
        logs.append(wrapped)
    outputs: dict[str, str] = {}
    for log in logs:
        for cmd in COMMANDS[:2]:
            done = subprocess.run([sys.executable, "-m", "logdoctor.cli", cmd[0], str(log), *cmd[1:]],
                                  capture_output=True, text=True, cwd=work, env=env)
            outputs[f"{cmd[0]} <big>/{log.name}"] = f"exit={done.returncode}\n{done.stdout.replace(str(work), '<big>')}"
    return outputs


def snapshot(corpus: list[Path], big: bool) -> dict[str, str]:
    os.chdir(ROOT)
    outputs = small_outputs([ROOT / "fixtures", *corpus])
    if big:
        with tempfile.TemporaryDirectory(prefix="logdoctor-snapshot-") as work:
            outputs.update(big_outputs(Path(work)))
    return outputs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=["write", "check"])
    ap.add_argument("file", type=Path)
    ap.add_argument("--corpus", type=Path, action="append", default=[], help="more logs (a directory, recursively)")
    ap.add_argument("--big", action="store_true", help="also the generated launch and serving logs")
    a = ap.parse_args()
    outputs = snapshot([p.resolve() for p in a.corpus], a.big)
    if a.action == "write":
        with gzip.open(a.file, "wt", encoding="utf-8") as f:
            json.dump(outputs, f, sort_keys=True)
        print(f"{len(outputs)} outputs written to {a.file}")
        return 0
    with gzip.open(a.file, "rt", encoding="utf-8") as f:
        before: dict[str, str] = json.load(f)
    differ = sorted(k for k in before.keys() | outputs.keys() if before.get(k) != outputs.get(k))
    for key in differ:
        print(f"differs: {key}")
    print(f"{len(outputs)} outputs, {len(differ)} differ from {a.file}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())

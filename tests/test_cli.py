from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "fixtures" / "logs"
SCHEMA = json.loads((ROOT / "logdoctor" / "diagnosis.schema.json").read_text())


def run(*args: str, stdin: bytes | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "logdoctor.cli", *args], capture_output=True, input=stdin,
                          cwd=ROOT, env=e)


def test_parse_jsonl_json_and_table() -> None:
    log = str(LOGS / "v0.4-tp8.log")
    jl = run("parse", log)
    assert jl.returncode == 0
    events = [json.loads(x) for x in jl.stdout.decode().splitlines()]
    kinds = {e["kind"] for e in events}
    assert {"server_args", "weight_load_end", "kv_cache_allocated", "server_ready"} <= kinds
    assert all({"kind", "line", "rank", "ts", "fields"} <= set(e) for e in events)
    js = json.loads(run("parse", "--format", "json", log).stdout)
    assert len(js) == len(events)
    table = run("parse", "--format", "table", "--no-unparsed", log).stdout.decode()
    assert "server_ready" in table and "unparsed" not in table


def test_parse_several_files_marks_sources() -> None:
    p = run("parse", "--no-unparsed", str(LOGS / "v0.2-tp2.log"), str(LOGS / "v0.3-tp2.log"))
    sources = {json.loads(x)["source"] for x in p.stdout.decode().splitlines()}
    assert len(sources) == 2


def test_summary_json_and_text_and_stdin_and_gz(tmp_path: Path) -> None:
    log = LOGS / "v0.4-tp8.log"
    d = json.loads(run("summary", str(log), "--format", "json").stdout)
    assert d["ready"] is True and d["last_stage"] == "ready"
    gz = tmp_path / "x.log.gz"
    gz.write_bytes(gzip.compress(log.read_bytes()))
    d_gz = json.loads(run("summary", str(gz), "--format", "json").stdout)
    d_stdin = json.loads(run("summary", "-", "--format", "json", stdin=log.read_bytes()).stdout)
    for other in (d_gz, d_stdin):
        assert other["stages"] == d["stages"] and other["memory"] == d["memory"]
    text = run("summary", str(log)).stdout.decode()
    assert "stages" in text and "memory per rank" in text


@pytest.mark.parametrize("args, message", [
    (("summary", "/no/such/file.log"), "no such file"),
    (("parse", "/"), "is a directory"),
    (("explain", "/no/such/file.log"), "no such file"),
    (("explain", "--format", "yaml", "x"), "Invalid value"),
    (("explain", "--rules", "/no/such/dir", str(LOGS / "v0.4-tp8.log")), "not a directory"),
    (("explain", "/dev/null"), "empty input"),
    (("summary", "/dev/null"), "empty input"),
    (("memory", "/dev/null"), "empty input"),
])
def test_bad_input_is_one_line_and_exit_2(args: tuple[str, ...], message: str) -> None:
    p = run(*args)
    err = p.stderr.decode()
    assert p.returncode == 2
    assert message in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) <= 4  # click adds a usage hint to option errors


def test_explain_exit_codes_and_formats() -> None:
    failed = run("explain", str(LOGS / "v0.4-kv-not-enough-tp8.log"), "--format", "json")
    assert failed.returncode == 1
    d = json.loads(failed.stdout)
    jsonschema.validate(d, SCHEMA)
    assert d["verdict"] == "failed" and d["primary"]["category"] == "memory_pressure"
    assert d["diagnoses"][0] == d["primary"]
    assert run("explain", "--exit-zero", str(LOGS / "v0.4-kv-not-enough-tp8.log")).returncode == 0
    healthy = run("explain", str(LOGS / "v0.4-tp8.log"), "--format", "json")
    assert healthy.returncode == 0
    h = json.loads(healthy.stdout)
    jsonschema.validate(h, SCHEMA)
    assert h["verdict"] == "healthy" and h["primary"] is None
    md = run("explain", str(LOGS / "v0.4-kv-not-enough-tp8.log"), "--format", "markdown").stdout.decode()
    assert md.startswith("### logdoctor: **failed**") and "```" in md and "**What to do**" in md


def test_explain_reads_stdin_and_never_colours_a_pipe() -> None:
    data = (LOGS / "v0.4-kv-not-enough-tp8.log").read_bytes()
    p = run("explain", stdin=data)
    assert p.returncode == 1
    out = p.stdout.decode()
    assert "FAILED" in out and "\x1b[" not in out
    forced = run("explain", "-", stdin=data, env={"FORCE_COLOR": "1"}).stdout.decode()
    assert "\x1b[" in forced
    no_color = run("explain", "-", stdin=data, env={"FORCE_COLOR": "1", "NO_COLOR": "1"}).stdout.decode()
    assert "\x1b[" not in no_color

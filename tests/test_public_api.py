"""The public Python API, as a notebook uses it: `logdoctor.diagnose` (one log's Report, the document
`explain` prints), `logdoctor.events` (the events as a typed polars frame), `logdoctor.runs` (one row
per log), from every kind of source, and the README's examples run as they are written."""
from __future__ import annotations

import gzip
import importlib
import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import logdoctor
from logdoctor.diagnosis.engine import Diagnosis
from logdoctor.diagnosis.ranking import Report as RankedReport
from logdoctor.diagnosis.rules import load_ruleset
from logdoctor.read.sniff import InputError as ReadInputError
from logdoctor.run.model import Run

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "fixtures" / "example" / "tp8-mem-fraction.log"   # MEM003 at line 299, bare CRs (tqdm)
EXAMPLE_GZ = ROOT / "fixtures" / "compressed" / "tp8-mem-fraction.log.gz"
MULTI_NODE = ROOT / "fixtures" / "launch" / "lws-prefix.log"       # one file, two pods interleaved
NO_DATE = ROOT / "fixtures" / "logs" / "v0.3-tp2.log"              # `[HH:MM:SS TP0]`: a time, no date
RANDOM = ROOT / "fixtures" / "compressed" / "random-bytes.log"
LOGS = ROOT / "fixtures" / "logs"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "logdoctor", *args], capture_output=True, text=True,
                          check=False, timeout=120, cwd=cwd)


def _unnamed(d: dict[str, Any]) -> dict[str, Any]:
    """A report's document without the names of its source (which differ by source type)."""
    d = json.loads(json.dumps(d))
    d["source"] = d["run"]["source"] = "x"
    return d


# ------------------------------------------------------------------------------------------------
# the package


def test_import_loads_no_stage_and_a_diagnosis_never_imports_polars() -> None:
    code = f"""
import sys
import logdoctor
assert 'polars' not in sys.modules
assert sorted(m for m in sys.modules if m.startswith('logdoctor')) == ['logdoctor', 'logdoctor.events', 'logdoctor.records', 'logdoctor.records_built'], sys.modules
r = logdoctor.diagnose({str(EXAMPLE)!r})
r.to_json(); r.to_markdown(); r.to_text(); r._repr_html_()
logdoctor.diagnose(open({str(EXAMPLE)!r}, 'rb').read())
assert 'polars' not in sys.modules, 'diagnose imported polars'
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr


def test_logdoctor_events_is_the_function_whatever_imported_the_event_model_first() -> None:
    # in a fresh interpreter, the event model imported before the package and again after a diagnosis
    code = f"""
from logdoctor.events import Event
import logdoctor, logdoctor.events, importlib
assert callable(logdoctor.events) and logdoctor.events.__module__ == 'logdoctor.api', logdoctor.events
logdoctor.diagnose({str(EXAMPLE)!r})
import logdoctor.events
from logdoctor import events
assert events is logdoctor.events and events.__name__ == 'events' and events.__module__ == 'logdoctor.api'
assert importlib.import_module('logdoctor.events').Event is Event
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    # and here, after every stage of this process has imported `logdoctor.events` its own way
    import logdoctor.events
    importlib.import_module("logdoctor.events")
    assert logdoctor.events is logdoctor.api.events
    assert sys.modules["logdoctor.events"].Event.__name__ == "Event"


def test_public_names() -> None:
    assert set(logdoctor.__all__) == {"diagnose", "events", "runs", "Report", "InputError", "RuleError", "__version__"}
    for name in logdoctor.__all__:
        assert getattr(logdoctor, name) is not None
        assert name in dir(logdoctor)
    assert logdoctor.InputError is ReadInputError   # what the CLI turns into its one-line error, exit 2
    assert issubclass(logdoctor.Report, RankedReport)
    with pytest.raises(AttributeError, match="no attribute 'diagnose_source'"):
        _ = logdoctor.diagnose_source  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------------------------
# diagnose


def test_diagnose_is_the_document_explain_prints(tmp_path: Path) -> None:
    report = logdoctor.diagnose(str(EXAMPLE))
    cli = _cli("explain", "--format", "json", str(EXAMPLE), cwd=tmp_path)
    assert cli.returncode == 1, cli.stderr
    assert report.to_dict() == json.loads(cli.stdout)
    assert report.to_json() == cli.stdout.rstrip("\n")
    assert json.loads(report.to_json(indent=2)) == json.loads(cli.stdout)
    assert report.to_json(indent=2).count("\n") > 100
    md = _cli("explain", "--format", "markdown", str(EXAMPLE), cwd=tmp_path)
    assert report.to_markdown() == md.stdout.rstrip("\n")
    text = report.to_text()
    assert text.startswith("FAILED  memory_pressure") and "\x1b[" not in text


def test_report_attributes() -> None:
    report = logdoctor.diagnose(EXAMPLE)
    assert isinstance(report, logdoctor.Report) and isinstance(report, RankedReport)
    assert report.verdict == "failed"
    assert isinstance(report.primary, Diagnosis)
    assert report.primary.rule.id == "MEM003" and report.primary.position == 299
    assert report.diagnoses[0] is report.primary and all(isinstance(d, Diagnosis) for d in report.diagnoses)
    assert isinstance(report.run, Run) and report.run.tp_size == 8
    assert isinstance(report.memory, dict)
    assert report.memory == report.to_dict()["memory"] and report.memory["budget_line"].startswith("weights 72.3")
    assert repr(report) == f"<logdoctor.Report failed MEM003 oom-during-graph-capture at line 299 of {EXAMPLE}>"
    healthy = logdoctor.diagnose(LOGS / "v0.4-tp8.log")
    assert healthy.verdict == "healthy" and healthy.primary is None
    assert repr(healthy).startswith("<logdoctor.Report healthy of ")


def test_every_source_type_reads_as_the_file_does() -> None:
    data = EXAMPLE.read_bytes()
    reference = logdoctor.diagnose(str(EXAMPLE)).to_dict()
    with open(EXAMPLE, "rb") as binary, open(EXAMPLE, encoding="utf-8") as text_mode:
        sources: list[Any] = [
            EXAMPLE, EXAMPLE_GZ, str(EXAMPLE_GZ), data, bytearray(data), memoryview(data), gzip.compress(data),
            data.decode("utf-8"),                     # a str with line breaks is the log itself
            binary, text_mode,                        # text mode: read by its bytes (bare CRs kept)
            io.BytesIO(gzip.compress(data)), io.StringIO(data.decode("utf-8"), newline=""),
        ]
        for source in sources:
            got = logdoctor.diagnose(source).to_dict()
            assert _unnamed(got) == _unnamed(reference), type(source)
    # a log that interleaves two pods is split the same way from bytes as from its file
    assert logdoctor.diagnose(MULTI_NODE.read_bytes(), name=str(MULTI_NODE)).to_dict() == \
        logdoctor.diagnose(MULTI_NODE).to_dict()


def test_how_a_source_is_named() -> None:
    data = EXAMPLE.read_bytes()
    assert logdoctor.diagnose(data).source == "<bytes>"
    assert logdoctor.diagnose(data.decode("utf-8")).source == "<text>"
    assert logdoctor.diagnose(io.BytesIO(data)).source == "<stream>"
    with open(EXAMPLE, "rb") as f:
        assert logdoctor.diagnose(f).source == str(EXAMPLE)
    named = logdoctor.diagnose(data, name="node-3.log")
    assert named.source == named.run.source == "node-3.log"
    two = logdoctor.diagnose(MULTI_NODE.read_bytes()).to_dict()
    assert two["source"] == "<bytes>" and {n["file"] for n in two["nodes"]} == {"<bytes>"}
    assert "logdoctor-memory" not in json.dumps(two)   # the temporary copy is never named


def test_a_str_is_a_path_unless_it_holds_a_line_break(tmp_path: Path) -> None:
    line = "[2026-03-03 09:41:27 TP0] Load weight begin. avail mem=94.02 GB"
    with pytest.raises(logdoctor.InputError, match="no such file"):
        logdoctor.diagnose(line)                      # no newline: a path
    assert logdoctor.diagnose(line + "\n").run.line_count == 1
    assert logdoctor.diagnose(line.encode()).run.line_count == 1   # bytes are always content
    path = tmp_path / "one.log"
    path.write_text(line + "\n", encoding="utf-8")
    assert logdoctor.diagnose(str(path)).source == str(path)


UNREADABLE: dict[str, tuple[Any, str]] = {
    "missing": (str(ROOT / "no-such.log"), r"no-such\.log: no such file$"),
    "directory": (str(ROOT / "fixtures"), r"fixtures: is a directory$"),
    "binary-file": (RANDOM, r"random-bytes\.log: binary file \(not a text log\)$"),
    "binary-bytes": (RANDOM.read_bytes(), r"^<bytes>: binary file \(not a text log\)$"),
    "empty-bytes": (b"", r"^<bytes>: empty input, nothing to analyse$"),
    "empty-stream": (io.StringIO(""), r"^<stream>: empty input, nothing to analyse$"),
    "binary-in-gzip": (gzip.compress(b"\x00" * 9000, mtime=0), r"^<bytes>: binary file \(not a text log\) inside gzip data$"),
    "corrupt-gzip": (b"\x1f\x8b\x08\x00garbage", r"^<bytes>: read failed"),
}


@pytest.mark.parametrize("case", list(UNREADABLE))
def test_unreadable_sources_raise_one_line_input_errors(case: str) -> None:
    source, message = UNREADABLE[case]
    with pytest.raises(logdoctor.InputError) as e:
        logdoctor.diagnose(source)
    assert re.search(message, str(e.value)), str(e.value)
    assert "\n" not in str(e.value) and "logdoctor-memory" not in str(e.value)


def test_a_closed_file_and_other_types() -> None:
    with open(EXAMPLE, "rb") as f:
        pass
    with pytest.raises(logdoctor.InputError, match=r"^" + re.escape(str(EXAMPLE)) + ": read failed"):
        logdoctor.diagnose(f)
    with pytest.raises(TypeError, match="not int"):
        logdoctor.diagnose(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown envelope"):
        logdoctor.diagnose(EXAMPLE, envelope="nope")


def test_rules_are_directories_or_loaded_rules(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    text = (ROOT / "rules/memory_pressure/oom-during-graph-capture.yaml").read_text(encoding="utf-8")
    (rules / "oom-during-graph-capture.yaml").write_text(
        re.sub(r"(?m)^title: .*$", "title: Our own title for MEM003", text), encoding="utf-8")
    assert logdoctor.diagnose(EXAMPLE, rules=[rules]).primary.rule.title == "Our own title for MEM003"
    assert logdoctor.diagnose(EXAMPLE, rules=str(rules)).primary.rule.title == "Our own title for MEM003"
    builtin = load_ruleset(())
    assert logdoctor.diagnose(EXAMPLE, rules=builtin).to_dict() == logdoctor.diagnose(EXAMPLE).to_dict()
    without = [r for r in builtin if r.id != "MEM003"]
    assert logdoctor.diagnose(EXAMPLE, rules=without).primary.rule.id != "MEM003"
    with pytest.raises(logdoctor.RuleError, match="no-such-dir"):
        logdoctor.diagnose(EXAMPLE, rules=[tmp_path / "no-such-dir"])
    with pytest.raises(TypeError, match="not a mix"):
        logdoctor.diagnose(EXAMPLE, rules=[builtin[0], str(rules)])  # type: ignore[list-item]


def test_html_shows_the_story_and_escapes_the_log() -> None:
    lines = EXAMPLE.read_bytes().split(b"\n")
    assert lines[298].startswith(b"torch.OutOfMemoryError: CUDA out of memory.")
    lines[298] = lines[298].replace(b"GPU 3 has", b'GPU 3 <script>alert("x")</script> <img src=x onerror=alert(1)> has')
    report = logdoctor.diagnose(b"\n".join(lines))
    assert report.primary.rule.id == "MEM003"
    evidence = [e.text for e in report.primary.evidence]
    assert any("<script>" in t for t in evidence)      # the log's text, as given, in the model
    html = report._repr_html_()
    assert "<script" not in html and "<img" not in html and "onerror=alert(1)>" not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    assert "&lt;bytes&gt;" in html                      # the source name is escaped too
    assert "FAILED" in html and "MEM003" in html and "line 299" in html
    for remedy in report.primary.remedies:
        assert remedy.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;") \
            .replace("'", "&#x27;") in html
    assert html.startswith('<div class="logdoctor-report"') and html.endswith("</div>")
    healthy = logdoctor.diagnose(LOGS / "v0.4-tp8.log")._repr_html_()
    assert "HEALTHY" in healthy and "reached ready" in healthy


# ------------------------------------------------------------------------------------------------
# events


def test_events_are_what_parse_prints_with_typed_columns(tmp_path: Path) -> None:
    df = logdoctor.events(EXAMPLE)
    assert df.schema == pl.Schema({
        "line": pl.Int64, "end_line": pl.Int64, "kind": pl.String, "rank": pl.Int64, "ranks": pl.String,
        "ts": pl.String, "time": pl.Datetime("us"), "secs": pl.Float64, "node": pl.String,
        "template": pl.String, "text": pl.String, "fields": pl.String})
    cli = _cli("parse", "--format", "jsonl", str(EXAMPLE), cwd=tmp_path)
    printed = [json.loads(ln) for ln in cli.stdout.splitlines()]
    assert len(printed) == df.height
    for row, ev in zip(df.iter_rows(named=True), printed):
        assert (row["line"], row["kind"], row["rank"], row["ts"], row["text"]) == \
            (ev["line"], ev["kind"], ev["rank"], ev["ts"], ev["text"])
        assert row["end_line"] == ev.get("end_line", ev["line"])
        assert json.loads(row["fields"]) == ev["fields"]
    oom = df.filter(pl.col("kind") == "torch_oom").row(0, named=True)
    assert oom["line"] == 299 and oom["rank"] == 3
    assert str(oom["time"]) == oom["ts"] == "2026-03-03 09:42:48"
    assert df.filter(pl.col("ts").is_not_null())["time"].null_count() == 0


def test_a_time_without_a_date_is_seconds_since_midnight() -> None:
    df = logdoctor.events(NO_DATE).filter(pl.col("ts").is_not_null())
    assert df.height > 10 and df["time"].null_count() == df.height
    first = df.row(0, named=True)
    hh, mm, ss = (int(x) for x in first["ts"][:8].split(":"))
    assert first["secs"] == pytest.approx(hh * 3600 + mm * 60 + ss, abs=1)


def test_events_of_one_kind_have_its_fields_as_typed_columns() -> None:
    kv = logdoctor.events(EXAMPLE, kind="kv_cache_allocated")
    assert kv.height == 8 and set(kv["kind"]) == {"kv_cache_allocated"}
    assert sorted(kv["rank"]) == list(range(8))
    assert kv.schema["tokens"] == pl.Int64 and kv.schema["kv_gib"] == pl.Float64
    assert set(kv["tokens"]) == {159190} and "fields" not in kv.columns
    tb = logdoctor.events(EXAMPLE, kind="traceback")
    assert tb.schema["frames"].base_type() == pl.List  # nested fields keep their shape
    none = logdoctor.events(EXAMPLE, kind="server_ready")
    assert none.height == 0 and none.columns == kv.columns[:len(none.columns)]
    with pytest.raises(ValueError, match="did you mean kv_cache_allocated"):
        logdoctor.events(EXAMPLE, kind="kv_cache_alloc")


def test_events_of_every_source_type() -> None:
    data = EXAMPLE.read_bytes()
    reference = logdoctor.events(EXAMPLE)
    for source in (data, gzip.compress(data), data.decode("utf-8"), io.BytesIO(data), EXAMPLE_GZ):
        assert logdoctor.events(source).equals(reference)
    with pytest.raises(logdoctor.InputError, match="empty input"):
        logdoctor.events(b"")
    with pytest.raises(logdoctor.InputError, match="binary file"):
        logdoctor.events(RANDOM)


# ------------------------------------------------------------------------------------------------
# runs


def _logs_dir(tmp_path: Path) -> Path:
    for name in ("v0.4-kv-not-enough-tp8.log", "v0.4-tp8.log", "v0.5-port-in-use.log"):
        (tmp_path / name).write_bytes((LOGS / name).read_bytes())
    (tmp_path / "broken.log").write_bytes(b"\x00" * 4096)   # binary: not a log
    return tmp_path


def test_runs_are_the_rows_of_logdoctor_runs_plus_the_unreadable_files(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    logs = _logs_dir(tmp_path / "logs")
    df = logdoctor.runs([logs])
    assert [Path(p).name for p in df["path"]] == [
        "broken.log", "v0.4-kv-not-enough-tp8.log", "v0.4-tp8.log", "v0.5-port-in-use.log"]
    assert df["error"].to_list() == ["binary file (not a text log)", None, None, None]
    broken = df.row(0, named=True)
    assert all(v is None for k, v in broken.items() if k not in ("path", "error"))
    by_name = {Path(r["path"]).name: r for r in df.to_dicts()}
    kv = by_name["v0.4-kv-not-enough-tp8.log"]
    assert (kv["verdict"], kv["category"], kv["tp"]) == ("failed", "memory_pressure", 8)
    assert df.schema["tp"] == pl.Int64 and df.schema["kv_tokens"] == pl.Int64
    cli = _cli("runs", "--format", "json", "--no-progress", str(logs), cwd=tmp_path)
    printed = json.loads(cli.stdout)
    readable = df.filter(pl.col("error").is_null()).drop("error")
    assert readable.columns == list(printed[0])
    assert readable.to_dicts() == printed
    assert logdoctor.runs(str(logs), jobs=2).equals(df)
    assert logdoctor.runs(logs / "v0.4-tp8.log").schema["error"] == pl.String   # text, even with no error


def test_runs_columns_and_errors(tmp_path: Path) -> None:
    logs = _logs_dir(tmp_path)
    one = logdoctor.runs(logs / "v0.4-tp8.log", columns=["verdict", "path"])
    assert one.columns == ["verdict", "path"] and one.row(0) == ("healthy", str(logs / "v0.4-tp8.log"))
    with pytest.raises(ValueError, match="unknown column 'verdikt' \\(did you mean verdict\\?\\)"):
        logdoctor.runs([logs], columns=["verdikt"])
    with pytest.raises(logdoctor.InputError, match=r"broken\.log: binary file \(not a text log\)$"):
        logdoctor.runs([logs / "broken.log"])
    with pytest.raises(logdoctor.InputError, match=r"no such file \(and 1 more\)$"):
        logdoctor.runs([logs / "a.log", logs / "b.log"])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(logdoctor.InputError, match="no logs found"):
        logdoctor.runs([empty])


# ------------------------------------------------------------------------------------------------
# the README


def _readme_examples() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"(?ms)^## Python API\n(.*?)(?=^## |\Z)", text)
    assert m is not None, "README.md has no '## Python API' section (the API's examples go there)"
    blocks = re.findall(r"(?ms)^```python\n(.*?)^```", m.group(1))
    assert blocks, "README.md's '## Python API' section has no ```python example"
    return blocks


def test_the_readme_examples_run(tmp_path: Path) -> None:
    for i, block in enumerate(_readme_examples()):
        script = tmp_path / f"example_{i}.py"
        script.write_text(block, encoding="utf-8")
        r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                           check=False, cwd=ROOT)
        assert r.returncode == 0, f"README example {i + 1} failed:\n{block}\n{r.stderr}"

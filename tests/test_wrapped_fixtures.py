"""Every fixture log, wrapped the way each log collector hands it over, is diagnosed as the plain log is.

The wrappers (tools/wrap_log.py) are written from the collectors' real output formats, not from
logdoctor's envelope peeler, so this checks the peeler against the tools. For each fixture and envelope:
same verdict, same diagnoses in the same order (rule, fatal, confidence, ranks, evidence text), the same
run summary and memory analysis, and every line number in them (evidence, diagnosis position, stage first
lines, failures) points, through the wrapper's line map, at the plain line the plain diagnosis cites. For
a newest-first export (gcp, loki) the citation is the line of the reversed file as given; its run-summary
line fields are left out (they order events, which is the reading order there).

Coverage: all of fixtures/logs and fixtures/example (every verdict, and the categories memory_pressure,
communication, unsupported, graph_incompatibility, ipc_bar, configuration), plus rule fixtures for the two
categories no such log leads with (environment, unknown), in each of the 14 envelopes the issue names;
and a subset of 15 of those logs (every category and verdict) in 19 more configurations: each journald /
syslog variant, Ray's verl and coloured prefixes, srun, quote, docker's attrs, fluent-bit's docker parser,
a GCP export with millisecond times, four stacks, CRI with a small split size (so `P` records are joined
and a UTF-8 character is cut between two records) and docker json-file partial records.
"""
from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections import Counter
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import wrap_log

from logdoctor.cli import cli
from logdoctor.diagnosis.ranking import Report, diagnose_source
from logdoctor.diagnosis.rules import load_ruleset
from logdoctor.read.ingest import read_lines

FIXTURES = ROOT / "fixtures"
LOGS = sorted((FIXTURES / "logs").iterdir()) + sorted((FIXTURES / "example").iterdir()) + [
    FIXTURES / "rules" / "ENV001" / "fires-driver-too-old.log",    # environment
    FIXTURES / "rules" / "ENV003" / "fires-no-module.log",         # environment
    FIXTURES / "rules" / "UNK003" / "fires-x13-exit-7.log",        # unknown
    FIXTURES / "rules" / "UNK005" / "fires-stalled-weights.log",   # unknown, a stall
]
EXAMPLE = FIXTURES / "example" / "tp8-mem-fraction.log"

# (id, envelope, split bytes). The envelopes the issue names run on every log; their variants, the
# stacks and the small split sizes run on SUBSET (a log per rule category and verdict, the old and the new
# prefix eras, tracebacks, a stall), which keeps the whole file well under a minute on 2 cores.
# Split 600 cuts a tqdm line's `█` between two CRI records; 2048 cuts none (docker's json-file would turn
# a cut character into U+FFFD twice: real loss that no peeler can undo).
CORE = ["rfc3339", "kubectl-prefix", "stern", "cri", "json", "vector", "fluentbit", "loki", "compose",
        "journald", "syslog", "ray", "gcp", "cloudwatch"]
VARIANTS = ["journald:short-iso", "journald:short-precise", "journald:short-iso-precise", "syslog:iso",
            "syslog:5424", "ray:verl", "ray:color", "srun", "quote", "json:attrs", "fluentbit:docker",
            "gcp:ms", "cri+compose", "json+rfc3339", "kubectl-prefix+rfc3339", "cri+ray",
            # beyond the list: Ray's coloured prefix pasted into a GitHub issue (ESC lost)
            "ray:pasted"]
ENVELOPES: list[tuple[str, str, int]] = [(name, name, wrap_log.SPLIT_BYTES) for name in CORE + VARIANTS] + [
    ("cri-split600", "cri", 600), ("json-split2048", "json", 2048)]
SUBSET = {"host-oom-killed.log", "torchrun-child-failed.txt", "v0.1-router-tp1.log", "v0.3-tp2.log",
          "v0.5-arch-unsupported.log", "v0.5-capture-not-capturable.log", "v0.5-capture-oom-tp4.log",
          "v0.5-incomplete-after-nccl.log", "v0.5-port-in-use.log", "v0.5-segfault-nccl.log",
          "v0.5early-tp2.log", "tp8-mem-fraction.log", "fires-no-module.log", "fires-x13-exit-7.log",
          "fires-stalled-weights.log"}
CASES = [(eid, env, split, log) for eid, env, split in ENVELOPES for log in LOGS
         if env in CORE and split == wrap_log.SPLIT_BYTES or log.name in SUBSET]

LINE_KEYS = frozenset({"line", "first_line", "end_line", "last_line", "last_serving_line"})


@lru_cache(maxsize=1)
def rules() -> list[Any]:
    return load_ruleset()


@cache
def plain_report(log: Path) -> Report:
    return diagnose_source(str(log), rules())


def _mapped(value: Any, to_plain: Any, drop_lines: bool) -> Any:
    """`value` with every line-number field mapped to the plain log's line (or dropped) and `source` gone."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k == "source":
                continue
            if k in LINE_KEYS and isinstance(v, int) and not isinstance(v, bool):
                if not drop_lines:
                    out[k] = to_plain(v)
                continue
            out[k] = _mapped(v, to_plain, drop_lines)
        return out
    if isinstance(value, list):
        return [_mapped(v, to_plain, drop_lines) for v in value]
    return value


def digest(report: Report, to_plain: Any = lambda n: n, reversed_file: bool = False,
           added_lines: bool = False, split_lines: bool = False) -> dict[str, Any]:
    """What must not change when the log arrives in an envelope, line numbers seen through `to_plain`.

    `counts.lines` counts the lines of the file as given, so it is left out when the collector split
    lines into records (CRI `P`, docker partials) or added lines of its own; the collector's own lines
    (Ray's `(raylet)`) also count as events and unparsed lines, so those counts go too.
    """
    diagnoses = [{"rule": d["rule"], "fatal": d["fatal"], "confidence": d["confidence"],
                  "line": to_plain(d["line"]),
                  "evidence": [(to_plain(e["line"]), e["rank"], e["text"]) for e in d["evidence"]]}
                 for d in report.to_dict()["diagnoses"]]
    run = _mapped(report.run.to_dict(), to_plain, drop_lines=reversed_file)
    counts = run["counts"]
    if split_lines or added_lines:
        del counts["lines"]
    if added_lines:
        del counts["events"], counts["unparsed"]
        counts["kinds"].pop("unparsed", None)
    return {"verdict": report.verdict, "primary": report.primary.rule.id if report.primary else None,
            "diagnoses": diagnoses, "run": run,
            "memory": _mapped(report.memory, to_plain, drop_lines=reversed_file)}


def wrap_to(tmp_path: Path, log: Path, envelope: str, split: int) -> tuple[Path, list[int | None]]:
    lines = wrap_log.split_log(log.read_bytes())
    out, origins = wrap_log.wrap_with_origins(lines, envelope, wrap_log.Options(split=split))
    path = tmp_path / f"{log.stem}.{envelope.replace(':', '_').replace('+', '_')}.log"
    path.write_bytes(wrap_log.join_log(out))
    return path, origins


def line_mapper(origins: list[int | None]) -> Any:
    def to_plain(n: int) -> int | str:
        got = wrap_log.source_line_of(origins, n)
        return got if got is not None else f"wrapped line {n} is the collector's own"
    return to_plain


@pytest.mark.parametrize("logs", [LOGS, [log for log in LOGS if log.name in SUBSET]], ids=["all", "subset"])
def test_plain_fixtures_cover_every_verdict_and_rule_category(logs: list[Path]) -> None:
    reports = [plain_report(log) for log in logs]
    assert {r.verdict for r in reports} == {"failed", "healthy", "incomplete"}
    categories = {r.primary.category for r in reports if r.primary}
    assert categories == {"memory_pressure", "communication", "unsupported", "graph_incompatibility",
                          "ipc_bar", "configuration", "environment", "unknown"}


@pytest.mark.parametrize(("envelope", "split", "log"), [c[1:] for c in CASES], ids=[f"{c[0]}-{c[3].name}" for c in CASES])
def test_wrapped_log_is_diagnosed_as_the_plain_log(tmp_path: Path, log: Path, envelope: str, split: int) -> None:
    path, origins = wrap_to(tmp_path, log, envelope, split)
    name = envelope.split(":")[0]
    reversed_file = wrap_log.is_reversed(envelope)
    added = any(spec.split(":")[0] in wrap_log.ADDS_LINES for spec in envelope.split("+"))
    split = len(origins) != len(set(origins))
    want = digest(plain_report(log), reversed_file=reversed_file, added_lines=added, split_lines=split)
    got = digest(diagnose_source(str(path), rules()), line_mapper(origins), reversed_file, added, split)
    assert got["verdict"] == want["verdict"], f"{name}: verdict"
    assert got["primary"] == want["primary"], f"{name}: primary rule"
    assert got["diagnoses"] == want["diagnoses"], f"{name}: diagnoses (rule, evidence lines through the map, texts)"
    assert got["run"] == want["run"], f"{name}: run summary"
    assert got["memory"] == want["memory"], f"{name}: memory analysis"


def test_citations_point_at_the_same_text_in_the_wrapped_file(tmp_path: Path) -> None:
    """Directly, without the digest: the wrapped file's cited line holds the text the plain line holds."""
    plain_lines = wrap_log.split_log(EXAMPLE.read_bytes())
    for envelope in ("cri+compose", "gcp", "json+rfc3339", "ray"):
        path, origins = wrap_to(tmp_path, EXAMPLE, envelope, wrap_log.SPLIT_BYTES)
        wrapped_lines = wrap_log.split_log(path.read_bytes())
        cited = [e["line"] for d in diagnose_source(str(path), rules()).to_dict()["diagnoses"]
                 for e in d["evidence"]]
        assert cited, envelope
        for n in cited:
            plain = plain_lines[origins[n - 1] - 1]
            assert plain in wrapped_lines[n - 1] or plain in json.loads(wrapped_lines[n - 1])["log"], (envelope, n)


EXPECTED_LAYERS = {
    "rfc3339": "rfc3339", "kubectl-prefix": "kubectl-prefix", "stern": "stern", "cri": "cri", "json": "json",
    "vector": "json", "fluentbit": "json", "loki": "json", "compose": "compose", "journald": "journald",
    "journald:short-iso": "journald", "journald:short-precise": "journald",
    "journald:short-iso-precise": "journald", "syslog": "syslog", "syslog:iso": "syslog",
    "syslog:5424": "syslog", "ray": "ray", "ray:verl": "ray", "gcp": "severity", "cloudwatch": "rfc3339",
    "srun": "srun", "quote": "quote", "gcp:ms": "severity", "ray:color": "ray", "ray:pasted": "ray", "json:attrs": "json", "fluentbit:docker": "json",
    "cri+compose": "cri+compose", "json+rfc3339": "json+rfc3339",
    "kubectl-prefix+rfc3339": "kubectl-prefix+rfc3339", "cri+ray": "cri+ray",
}


@pytest.mark.parametrize("envelope", sorted(EXPECTED_LAYERS))
def test_the_envelope_is_recognised_by_its_shape(tmp_path: Path, envelope: str) -> None:
    """Lines carry the layers peeled (contract names, outermost first), found without any flag."""
    path, _ = wrap_to(tmp_path, EXAMPLE, envelope, wrap_log.SPLIT_BYTES)
    layers = Counter((ln.attrs or {}).get("envelope") for ln in read_lines(str(path)))
    want = EXPECTED_LAYERS[envelope]
    # journalctl's short formats and rsyslog's files are the same shape (`Mar 23 …` / RFC 3339 µs + host +
    # ident[pid]:), so either name is right for either
    same_shape = {"journald", "syslog"} if want in ("journald", "syslog") else {want}
    assert layers.most_common(1)[0][0] in same_shape, layers


@pytest.mark.parametrize("envelope", ["kubectl-prefix+rfc3339", "cri", "gcp", "journald"])
def test_explain_json_on_a_wrapped_log_matches_the_plain_log(tmp_path: Path, envelope: str) -> None:
    """What a user runs: `logdoctor explain --format json` (in-process), on the plain and the wrapped file."""
    path, origins = wrap_to(tmp_path, EXAMPLE, envelope, wrap_log.SPLIT_BYTES)
    runner = CliRunner()
    plain = runner.invoke(cli, ["explain", "--format", "json", str(EXAMPLE)], standalone_mode=False)
    wrapped = runner.invoke(cli, ["explain", "--format", "json", str(path)], standalone_mode=False)
    assert plain.exception is None and wrapped.exception is None, (plain.exception, wrapped.exception)
    assert wrapped.return_value == plain.return_value == 1
    p, w = json.loads(plain.stdout), json.loads(wrapped.stdout)
    assert (w["verdict"], w["primary"]["rule"]) == (p["verdict"], p["primary"]["rule"])
    assert [e["text"] for e in w["primary"]["evidence"]] == [e["text"] for e in p["primary"]["evidence"]]
    # a single pod's log is one node: its citations are plain line numbers of the file as given
    assert [origins[e["line"] - 1] for e in w["primary"]["evidence"]] == [e["line"] for e in p["primary"]["evidence"]]


# ------------------------------------------------------------------------------------------------
# the oracle itself: its lines are the tools' documented formats


def _one(envelope: str, text: str, ns: int, stream: str = "stdout", split: int = wrap_log.SPLIT_BYTES) -> list[str]:
    layer = wrap_log.LAYERS[envelope.split(":")[0]]
    recs = layer([wrap_log.Record(text, 0, ns, stream)], wrap_log.Options(split=split), envelope.partition(":")[2])
    return [r.text for r in recs]


NS = 1475713029_669794202   # 2016-10-06T00:17:09.669794202Z, the CRI logging proposal's example time


def test_oracle_lines_match_the_tools_documented_formats() -> None:
    assert _one("cri", "The content of the log entry 1", NS) == [
        "2016-10-06T00:17:09.669794202Z stdout F The content of the log entry 1"]
    assert _one("cri", "First line of log entry 2", NS, split=10) == [
        "2016-10-06T00:17:09.669794202Z stdout P First line",
        "2016-10-06T00:17:09.669795202Z stdout P  of log en",
        "2016-10-06T00:17:09.669796202Z stdout F try 2"]
    assert _one("json", "Log line is here", NS) == [
        '{"log":"Log line is here\\n","stream":"stdout","time":"2016-10-06T00:17:09.669794202Z"}']
    assert _one("json", 'a<b> & "q"\t\x1b[0m', NS - 669794202) == [
        '{"log":"a\\u003cb\\u003e \\u0026 \\"q\\"\\t\\u001b[0m\\n","stream":"stdout","time":"2016-10-06T00:17:09Z"}']
    assert _one("rfc3339", "x", NS - 794202) == ["2016-10-06T00:17:09.669000000Z x"]
    assert _one("kubectl-prefix", "x", NS) == [f"[pod/{wrap_log.POD}/sglang] x"]
    assert _one("stern", "x", NS) == [f"{wrap_log.POD} sglang x"]
    assert _one("compose", "x", NS) == ["sglang-1         | x"]   # padded to `sglang-router-1` + 1
    assert _one("journald", "x", NS) == ["Oct 06 00:17:09 gpu-node-1 python3[1234]: x"]
    assert _one("journald:short-precise", "x", NS) == ["Oct 06 00:17:09.669794 gpu-node-1 python3[1234]: x"]
    assert _one("journald:short-iso", "x", NS) == ["2016-10-06T00:17:09+00:00 gpu-node-1 python3[1234]: x"]
    assert _one("syslog", "x", NS) == ["Oct  6 00:17:09 gpu-node-1 python3[1234]: x"]
    assert _one("syslog:5424", "x", NS) == ["<30>1 2016-10-06T00:17:09.669794+00:00 gpu-node-1 python3 1234 - - x"]
    assert _one("cloudwatch", "x", NS) == [f"2016-10-06T00:17:09.669000+00:00 {wrap_log.CLOUDWATCH_STREAM} x"]
    assert _one("cloudwatch", "x", NS - 669794202) == [f"2016-10-06T00:17:09+00:00 {wrap_log.CLOUDWATCH_STREAM} x"]
    assert _one("gcp", "x", NS, "stderr") == ["ERROR 2016-10-06T00:17:09.669794202Z x"]
    assert json.loads(_one("vector", "é<", NS - 794202)[0])["timestamp"] == "2016-10-06T00:17:09.669Z"
    assert '"message":"é<"' in _one("vector", "é<", NS)[0] and '"log":"\\u00e9<"' in _one("fluentbit", "é<", NS)[0]


def test_the_line_map_follows_splits_reversal_and_added_lines() -> None:
    lines = ["[2026-03-03 09:41:27] a", "b" * 50, "[2026-03-03 09:41:28 TP0] c"]
    out, origins = wrap_log.wrap_with_origins(lines, "cri", wrap_log.Options(split=30))
    assert origins == [1, 2, 2, 3] and out[1].endswith(" P " + "b" * 30) and out[2].endswith(" F " + "b" * 20)
    out, origins = wrap_log.wrap_with_origins(lines, "gcp")
    assert origins == [3, 2, 1] and out[2].endswith(" [2026-03-03 09:41:27] a")
    out, origins = wrap_log.wrap_with_origins(lines * 2, "cri+ray")
    assert origins.count(None) == 2 and [o for o in origins if o] == [1, 2, 3, 4, 5, 6]
    assert out[0].endswith(" [2026-03-03 09:41:27] a") and "(SGLangEngine pid=4100) [2026-03-03 09:41:28 TP0] c" in out[-1]
    times = wrap_log.collector_times(lines * 50)
    assert all(a < b for a, b in itertools.pairwise(times))
    assert wrap_log.rfc3339_fixed(times[0]).startswith("2026-03-03T09:41:27.")


@pytest.mark.parametrize("envelope", ["gcp", "kubectl-prefix+rfc3339"])
def test_a_wrapped_log_on_stdin_is_diagnosed_as_the_plain_log(tmp_path: Path, envelope: str) -> None:
    """`kubectl logs … | logdoctor explain -`: a pipe, so the shape is seen (and a newest-first export
    reordered) without seeking; citations still point into the stream as given."""
    path, origins = wrap_to(tmp_path, EXAMPLE, envelope, wrap_log.SPLIT_BYTES)
    with path.open("rb") as f:
        p = subprocess.run([str(Path(sys.executable).parent / "logdoctor"), "explain", "--format", "json", "-"],
                           stdin=f, capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    got, want = json.loads(p.stdout), plain_report(EXAMPLE).to_dict()
    assert (got["verdict"], got["primary"]["rule"]) == (want["verdict"], want["primary"]["rule"])
    assert [(origins[e["line"] - 1], e["text"]) for e in got["primary"]["evidence"]] == \
        [(e["line"], e["text"]) for e in want["primary"]["evidence"]]


@pytest.mark.parametrize("envelope", ["rfc3339", "kubectl-prefix", "stern", "cri", "json", "vector", "compose",
                                      "journald", "syslog:5424", "ray:verl"])
def test_naming_the_envelope_peels_what_detection_peels(tmp_path: Path, envelope: str) -> None:
    """`--envelope LAYER` gives the lines detection gives; `--envelope none` leaves the file as it is."""
    path, _ = wrap_to(tmp_path, EXAMPLE, envelope, wrap_log.SPLIT_BYTES)
    detected = [(ln.number, ln.text) for ln in read_lines(str(path))]
    named = [(ln.number, ln.text) for ln in read_lines(str(path), envelope=EXPECTED_LAYERS[envelope])]
    assert named == detected
    untouched = [ln.text for ln in read_lines(str(path), envelope="none")]
    assert untouched[:50] == wrap_log.split_log(path.read_bytes())[:50]


@pytest.mark.parametrize("envelope", CORE)
def test_a_one_line_log_is_peeled_too(tmp_path: Path, envelope: str) -> None:
    """A launch that dies in argument parsing leaves one line; it arrives in the same envelopes."""
    one = tmp_path / "one.log"
    one.write_bytes((FIXTURES / "rules" / "CFG001" / "fires-invalid-choice.log").read_bytes().splitlines()[-1] + b"\n")
    path, origins = wrap_to(tmp_path, one, envelope, wrap_log.SPLIT_BYTES)
    want, got = plain_report(one).to_dict(), diagnose_source(str(path), rules()).to_dict()
    assert want["primary"]["rule"] == "CFG001"
    assert (got["verdict"], got["primary"] and got["primary"]["rule"]) == ("failed", "CFG001"), got["primary"]
    assert [(origins[e["line"] - 1], e["text"]) for e in got["primary"]["evidence"]] == \
        [(e["line"], e["text"]) for e in want["primary"]["evidence"]]

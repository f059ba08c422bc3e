"""Several logs of one launch, node split of an interleaved collector file, and citations.

fixtures/launch/ is a two-node SGLang launch (`--tp 16 --nnodes 2 --node-rank 0|1`, texts of the real
v0.5 log fixtures/logs/v0.5-capture-oom-tp4.log): node 1 (TP8..TP15) runs out of memory capturing CUDA
graphs at 10:00:05 (TP9, GPU 1); node 0 (TP0..TP7) waits in the all-reduce and only its c10d watchdog
reports it, ten minutes later. lws-prefix.log is `kubectl logs -l ... --prefix` of the two pods of a
LeaderWorkerSet (pod after pod); node1-gcp-newest-first.log is node 1 as a cloud logging export
(severity and time before every line, newest entry first).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from logdoctor.diagnosis.ranking import diagnose
from logdoctor.diagnosis.rules import load_ruleset
from logdoctor.events import Event
from logdoctor.many.launch import diagnose_logs, glog_secs, natural_key
from logdoctor.parse.parse import parse_lines
from logdoctor.read.citations import Citations, MergedPositions
from logdoctor.read.ingest import read_lines
from logdoctor.report.report import explain_markdown, explain_text
from logdoctor.run.fold import RunBuilder

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = ROOT / "fixtures" / "launch"
LOGS = ROOT / "fixtures" / "logs"
NODE0, NODE1 = LAUNCH / "node0.log", LAUNCH / "node1.log"
PREFIXED = LAUNCH / "lws-prefix.log"
NEWEST_FIRST = LAUNCH / "node1-gcp-newest-first.log"
SCHEMA = json.loads((ROOT / "logdoctor" / "diagnosis.schema.json").read_text())
OOM_TEXT = "Capture cuda graph failed: CUDA out of memory"
_PEEL = re.compile(r"^(?:\[pod/[^/\]]{1,253}/[^\]]{1,253}\] |(?:INFO|ERROR) \S{1,40}Z )")


@pytest.fixture(scope="module")
def rules() -> list:
    return load_ruleset([])


def run(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "logdoctor.cli", *args], check=False, capture_output=True, input=stdin,
                          cwd=ROOT, timeout=120)


def explain_json(*args: str, stdin: bytes | None = None) -> dict:
    p = run("explain", "--format", "json", *args, stdin=stdin)
    assert p.returncode == 1, p.stderr.decode()
    return json.loads(p.stdout)


def line_of(path: Path, n: int) -> str:
    """Line n of a file as given (1-based), its collector envelope removed."""
    text = path.read_bytes().decode().split("\n")[n - 1]
    return _PEEL.sub("", text, count=1)


# ------------------------------------------------------------------------------------------------
# the two-node launch


def test_each_node_alone_tells_a_different_story(rules: list) -> None:
    # node 0 alone only shows the consequence: that is what the merge must see through
    alone0 = diagnose_logs([str(NODE0)], rules)
    alone1 = diagnose_logs([str(NODE1)], rules)
    assert alone0.primary is not None and alone0.primary.rule.name == "nccl-watchdog-timeout"
    assert alone1.primary is not None and alone1.primary.rule.name == "oom-during-graph-capture"


def test_root_cause_is_on_the_node_that_failed_first() -> None:
    d = explain_json(str(NODE0), str(NODE1))
    p = d["primary"]
    assert p["name"] == "oom-during-graph-capture" and p["category"] == "memory_pressure"
    assert p["node"] == "node1.log"
    assert all(e["node"] == "node1.log" for e in p["evidence"])
    for e in p["evidence"]:
        assert e["text"][:60] in line_of(NODE1, e["line"])  # node:line points at that text in that file
    assert any(OOM_TEXT in line_of(NODE1, e["line"]) for e in p["evidence"])
    # the consequence on node 0 is still reported, cited on node 0
    watchdog = next(x for x in d["diagnoses"] if x["name"] == "nccl-watchdog-timeout")
    assert watchdog["node"] == "node0.log" and "Watchdog caught" in line_of(NODE0, watchdog["line"])


def test_argument_order_does_not_matter() -> None:
    a = explain_json(str(NODE0), str(NODE1))
    b = explain_json(str(NODE1), str(NODE0))
    assert a["primary"] == b["primary"]
    assert [(x["rule"], x["node"], x["line"]) for x in a["diagnoses"]] == \
        [(x["rule"], x["node"], x["line"]) for x in b["diagnoses"]]


def test_text_and_markdown_cite_node_and_line() -> None:
    oom_line = next(i for i, ln in enumerate(NODE1.read_text().split("\n"), 1) if OOM_TEXT in ln)
    text = run("explain", str(NODE0), str(NODE1))
    assert text.returncode == 1
    out = text.stdout.decode()
    assert f"node1.log:{oom_line} TP9: {OOM_TEXT}" in out
    assert "2 nodes: node0.log (ranks 0-7), node1.log (ranks 8-15)" in out
    assert "node0.log:" in out.split("Also seen", 1)[1]  # the watchdog, on node 0
    md = run("explain", "--format", "markdown", str(NODE1), str(NODE0)).stdout.decode()
    assert f"node1.log:{oom_line} TP9: {OOM_TEXT}" in md


def test_json_shape_of_a_launch() -> None:
    d = explain_json(str(NODE0), str(NODE1))
    jsonschema.validate(d, SCHEMA)
    assert d["verdict"] == "failed"
    assert [n["node"] for n in d["nodes"]] == ["node0.log", "node1.log"]
    assert [n["ranks"] for n in d["nodes"]] == ["0-7", "8-15"]
    assert [n["lines"] for n in d["nodes"]] == [len(NODE0.read_text().splitlines()),
                                               len(NODE1.read_text().splitlines())]
    assert d["run"]["counts"]["lines"] == sum(n["lines"] for n in d["nodes"])
    for name, st in d["run"]["stages"].items():  # every stage line cites its node and a line in it
        path = LAUNCH / st["node"]
        assert st["first_line"] <= len(path.read_text().splitlines()), name
    for f in d["run"]["failures"]:
        assert f["node"] in ("node0.log", "node1.log")
        assert f["text"][:40] in line_of(LAUNCH / f["node"], f["line"])
    # per-rank memory keeps the global ranks of both nodes
    assert {m["rank"] for m in d["run"]["memory"]} == {f"TP{r}" for r in range(16)}


def test_a_directory_is_one_launch_only_when_asked(tmp_path: Path) -> None:
    for f in (NODE0, NODE1):
        shutil.copy(f, tmp_path / f.name)
    refused = run("explain", str(tmp_path))
    assert refused.returncode == 2
    msg = refused.stderr.decode().strip()
    assert len(msg.splitlines()) == 1 and "--one-launch" in msg and "batch" in msg and str(tmp_path) in msg
    d = explain_json("--one-launch", str(tmp_path))
    assert d["primary"]["node"] == "node1.log" and d["primary"] == explain_json(str(NODE0), str(NODE1))["primary"]


def test_bad_input_among_several_names_the_file() -> None:
    p = run("explain", str(NODE0), "fixtures/launch/no-such-node.log")
    assert p.returncode == 2
    msg = p.stderr.decode().strip()
    assert len(msg.splitlines()) == 1 and "no-such-node.log" in msg and "Traceback" not in msg
    twice = run("explain", "-", "-", stdin=b"x\n")
    assert twice.returncode == 2 and "once" in twice.stderr.decode()


# ------------------------------------------------------------------------------------------------
# one file holding several pods


def _expected_prefixed_line(node1_line: int) -> int:
    return len(NODE0.read_text().splitlines()) + node1_line


def test_an_interleaved_kubectl_prefix_file_is_split_into_its_pods() -> None:
    pair = explain_json(str(NODE0), str(NODE1))["primary"]
    d = explain_json(str(PREFIXED))
    p = d["primary"]
    assert p["rule"] == pair["rule"]
    assert p["node"] == "sglang-0-1"  # the pod of node rank 1, as kubectl names it
    assert [n["node"] for n in d["nodes"]] == ["sglang-0", "sglang-0-1"]
    assert p["line"] == _expected_prefixed_line(pair["line"])
    for e in p["evidence"]:
        assert e["node"] == "sglang-0-1"
        assert e["text"][:60] in line_of(PREFIXED, e["line"])
    assert d["run"]["counts"]["lines"] == len(PREFIXED.read_text().splitlines())


def test_an_interleaved_file_on_stdin_is_split_the_same_way() -> None:
    from_file = explain_json(str(PREFIXED))
    from_stdin = explain_json("-", stdin=PREFIXED.read_bytes())
    assert from_stdin["primary"] == from_file["primary"]
    assert from_stdin["source"] == "<stdin>"


def test_a_file_split_by_pod_keeps_each_pods_blocks_whole(tmp_path: Path) -> None:
    # stern-like interleaving, line by line: the traceback of one pod is cut by the other pod's lines
    a = [f"[pod/sglang-0/sglang] {ln}" for ln in NODE0.read_text().splitlines()]
    b = [f"[pod/sglang-0-1/sglang] {ln}" for ln in NODE1.read_text().splitlines()]
    mixed: list[str] = []
    for i in range(max(len(a), len(b))):
        mixed += ([a[i]] if i < len(a) else []) + ([b[i]] if i < len(b) else [])
    path = tmp_path / "mixed.log"
    path.write_text("\n".join(mixed) + "\n")
    d = explain_json(str(path))
    p = d["primary"]
    assert p["name"] == "oom-during-graph-capture" and p["node"] == "sglang-0-1"
    for e in p["evidence"]:
        assert e["text"][:60] in line_of(path, e["line"])


# ------------------------------------------------------------------------------------------------
# one node: exactly the ordinary path


def _plain(path: Path, rules: list):
    """The diagnosis as `explain LOG` made it before launches existed."""
    label = str(path)
    builder = RunBuilder(label)
    events = parse_lines(read_lines(str(path), builder.add_batch_lines), label)
    return diagnose(events, rules, label, builder)


@pytest.mark.parametrize("path", sorted(LOGS.iterdir()), ids=lambda p: p.name)
def test_one_log_gives_exactly_the_ordinary_report(path: Path, rules: list) -> None:
    old = _plain(path, rules)
    new = diagnose_logs([str(path)], rules, [str(path)])
    assert new.to_dict() == old.to_dict()
    assert explain_text(new) == explain_text(old)
    assert explain_markdown(new) == explain_markdown(old)
    primary = new.to_dict()["primary"] or {"evidence": []}
    assert not new.nodes and "node" not in primary and all("node" not in e for e in primary["evidence"])


def test_one_log_on_the_command_line_is_unchanged() -> None:
    log = LOGS / "v0.5-capture-oom-tp4.log"
    p = run("explain", str(log))
    assert p.returncode == 1
    assert "line " in p.stdout.decode() and ".log:" not in p.stdout.decode().split("Evidence", 1)[1]


# ------------------------------------------------------------------------------------------------
# newest-first exports: positions read oldest-first, citations as given


def test_a_newest_first_export_cites_the_lines_as_given() -> None:
    plain = explain_json(str(NODE1))["primary"]
    d = explain_json(str(NEWEST_FIRST))
    p = d["primary"]
    assert p["rule"] == plain["rule"]
    assert len(p["evidence"]) == len(plain["evidence"])
    n = len(NEWEST_FIRST.read_text().splitlines())
    for e, e0 in zip(p["evidence"], plain["evidence"]):
        assert e["text"] == e0["text"]
        assert e["line"] == n + 1 - e0["line"]  # the file is node1.log upside down
        assert e["text"][:60] in line_of(NEWEST_FIRST, e["line"])
    assert p["line"] == n + 1 - plain["line"]


def test_parse_cites_a_newest_first_export_as_given() -> None:
    p = run("parse", "--no-unparsed", str(NEWEST_FIRST))
    assert p.returncode == 0
    events = [json.loads(x) for x in p.stdout.decode().splitlines()]
    failed = next(e for e in events if e["kind"] == "graph_capture_failed")
    assert OOM_TEXT in line_of(NEWEST_FIRST, failed["line"])
    ready = [e for e in events if e["kind"] == "server_args"]
    assert ready and "server_args=ServerArgs(" in line_of(NEWEST_FIRST, ready[0]["line"])


def test_summary_of_a_newest_first_export_cites_stage_lines_as_given() -> None:
    p = run("summary", "--format", "json", str(NEWEST_FIRST))
    assert p.returncode == 0, p.stderr.decode()
    st = json.loads(p.stdout)["stages"]["graph_capture"]
    assert "Capture cuda graph begin" in line_of(NEWEST_FIRST, st["first_line"])


# ------------------------------------------------------------------------------------------------
# --envelope on every command


def test_envelope_option_overrides_detection() -> None:
    # with nothing peeled, the pod prefix hides SGLang's own prefix: no split, no node citations
    p = run("explain", "--format", "json", "--envelope", "none", str(PREFIXED))
    assert p.returncode in (0, 1), p.stderr.decode()
    assert "nodes" not in json.loads(p.stdout)
    named = explain_json("--envelope", "kubectl-prefix", str(PREFIXED))
    assert named["primary"]["node"] == "sglang-0-1"
    bad = run("explain", "--envelope", "bogus", str(NODE0))
    assert bad.returncode == 2 and "bogus" in bad.stderr.decode()
    for cmd in ("summary", "parse", "memory"):
        assert run(cmd, "--envelope", "none", str(NODE1)).returncode == 0, cmd
    batch = run("batch", "--format", "json", "--envelope", "none", "--jobs", "1", "--no-progress", str(NODE1))
    assert batch.returncode == 1 and json.loads(batch.stdout)[0]["rule"] == "MEM003"


# ------------------------------------------------------------------------------------------------
# the pieces


def test_merged_positions_map_back_to_node_and_line() -> None:
    own = [Citations(), Citations()]
    m = MergedPositions(["a", "b"], own)
    e1 = m.place(0, Event("x", 3, {}))                  # a:1..3
    e2 = m.place(1, Event("tb", 2, {"exception_line": 5}, end_line=6))  # b:1..6
    e3 = m.place(0, Event("y", 4, {}))                  # a:4
    derived = m.place(1, Event("oom", 5, {}))           # inside b's block, already placed
    c = m.citations
    assert [c.cite(e.line) for e in (e1, e2, e3, derived)] == [("a", 3), ("b", 2), ("a", 4), ("b", 5)]
    assert c.cite(e2.end_line) == ("b", 6) and c.cite(e2.fields["exception_line"]) == ("b", 5)
    assert e1.line < e2.line < e3.line  # positions follow the merged order
    assert e3.node == "a" and e2.node == "b"


def test_citations_are_the_identity_until_an_origin_is_noted() -> None:
    c = Citations()
    assert not c.active and c.line(7) == 7 and c.node(7) is None
    c.note_origin(3, 40)
    assert c.line(1) == 1 and c.line(3) == 40 and c.line(9) == 9


def test_torch_stamps_join_the_sglang_clock() -> None:
    sglang = 20437 * 86400.0 + 36005  # 2025-12-15 10:00:05
    assert glog_secs("1215 10:10:05.740120", sglang) == pytest.approx(sglang + 600.74012)
    assert glog_secs("1215 10:10:05", 36000.0) == 36605.0  # time-only logs stay time-only
    assert glog_secs("0101 00:00:01", 20453 * 86400.0) == pytest.approx(20454 * 86400.0 + 1)  # new year
    assert glog_secs("not a stamp", sglang) is None


def test_nodes_sort_naturally() -> None:
    assert sorted(["node10.log", "node2.log", "node1.log"], key=natural_key) == ["node1.log", "node2.log", "node10.log"]


def test_many_pods_in_one_file_stay_bounded(tmp_path: Path) -> None:
    # 80 pods (over MAX_NODES): read as one log, with a note; never 80 passes over the file
    lines = [f"[pod/p{i}/c] [2025-12-15 10:00:0{i % 10}] Init torch distributed begin." for i in range(80)]
    path = tmp_path / "many.log"
    path.write_text("\n".join(lines) + "\n")
    p = run("explain", "--format", "json", str(path))
    assert p.returncode in (0, 1), p.stderr.decode()
    assert "nodes" not in json.loads(p.stdout)


def test_spooled_stdin_is_removed(tmp_path: Path) -> None:
    env = dict(os.environ, TMPDIR=str(tmp_path))
    for log in (PREFIXED, NODE1):  # kept to be split / read once as it comes
        p = subprocess.run([sys.executable, "-m", "logdoctor.cli", "explain", "-"], check=False, input=log.read_bytes(),
                           capture_output=True, cwd=ROOT, env=env, timeout=120)
        assert p.returncode == 1, p.stderr.decode()
        assert list(tmp_path.iterdir()) == []


def test_stdin_over_the_spool_limit_is_read_once(monkeypatch: pytest.MonkeyPatch, rules: list) -> None:
    import io

    from logdoctor.many import launch
    monkeypatch.setattr(launch, "SPOOL_MAX", 4096)
    data = PREFIXED.read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    report = diagnose_logs(["-"], rules)
    assert report.run.line_count == len(data.splitlines())  # every line read, none twice
    assert report.verdict == "failed" and not report.nodes


def test_ray_actors_on_other_nodes_are_their_own_nodes(tmp_path: Path) -> None:
    # Ray prints an actor on the driver's node as `(SGLangEngine pid=N) `, one elsewhere with `ip=`;
    # the remote rank's traceback is cut by a local rank's line and must still be assembled whole
    local = "(SGLangEngine pid=4100) "
    remote = "(SGLangEngine pid=4101, ip=10.0.0.2) "
    tb = NODE1.read_text().split("\n")
    start = next(i for i, ln in enumerate(tb) if "Scheduler hit an exception" in ln)
    end = next(i for i, ln in enumerate(tb) if ln.startswith("Open an issue"))
    lines = ["2025-12-15 09:58:40,123\tINFO worker.py:1841 -- Started a local Ray instance.",
             local + "[2025-12-15 09:59:34 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, "
                     "avail mem=70.01 GB, mem usage=8.20 GB.",
             remote + "[2025-12-15 09:59:34 TP9] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, "
                      "avail mem=70.01 GB, mem usage=8.20 GB."]
    block = [remote + ln for ln in tb[start:end + 1]]
    lines += block[:10] + [local + "[2025-12-15 10:00:05 TP0] Capture cuda graph begin. This can take up to "
                                   "several minutes. avail mem=5.43 GB"] + block[10:]
    path = tmp_path / "ray-driver.log"
    path.write_text("\n".join(lines) + "\n")
    d = explain_json(str(path))
    p = d["primary"]
    assert p["node"] == "10.0.0.2" and p["category"] == "memory_pressure"
    assert {n["node"] for n in d["nodes"]} == {"10.0.0.2", "local"}
    for e in p["evidence"]:
        assert e["text"][:60] in line_of(path, e["line"]).split(") ", 1)[1]

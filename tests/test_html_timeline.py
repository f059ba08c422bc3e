"""The per-rank stage timeline of the HTML report: each rank's own stage times (run/stages.py), the run-wide
warm-up, where each rank stopped, and the estimated CUDA-graph segment of the memory chart.

The fold is tested on synthetic event sequences; the drawing once in headless Chromium (one browser load of
both fixtures of fixtures/html/timeline/, side by side on one page).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from browser import open_page

from logdoctor.diagnosis.ranking import Report, diagnose_source
from logdoctor.diagnosis.rules import load_ruleset
from logdoctor.events import Event
from logdoctor.report.html_report import _graph_estimate, explain_html_page
from logdoctor.report.html_timeline import rank_rows, stamp_secs, timeline
from logdoctor.run.fold import summarize
from logdoctor.run.model import STAGES, Run

ROOT = Path(__file__).resolve().parent.parent
TIMELINE = ROOT / "fixtures" / "html" / "timeline"
CAPTURE_OOM = TIMELINE / "tp4-weights-skew-capture-oom.log"
HEALTHY = TIMELINE / "tp2-healthy-warmup.log"
T0 = 1_740_823_200.0   # 2025-03-01 10:00:00 UTC, as the prefix reader counts it


def _ev(kind: str, line: int, rank: int | None, secs: float | None, **fields: Any) -> Event:
    ts = None if secs is None else f"2025-03-01 10:{int(secs - T0) // 60:02d}:{int(secs - T0) % 60:02d}"
    return Event(kind, line, dict(fields), rank, None if rank is None else f"TP{rank}", ts, secs, kind)


def _launch(ranks: dict[int, float], start: float = T0, timed: bool = True) -> list[Event]:
    """Init, weights (ending `ranks[r]` seconds in) and the pools of each rank; then graph capture of both."""
    evs: list[Event] = []
    line = 1

    def add(kind: str, rank: int | None, at: float, **fields: Any) -> None:
        nonlocal line
        evs.append(_ev(kind, line, rank, start + at if timed else None, **fields))
        line += 1
    for r in ranks:
        add("dist_init_begin", r, 0)
    for r in ranks:
        add("dist_init_end", r, 1, mem_usage_gib=0.4)
        add("weight_load_begin", r, 1, avail_gib=78.5)
    for r, end in sorted(ranks.items(), key=lambda kv: kv[1]):
        add("weight_load_end", r, end, avail_gib=63.1, weight_gib=15.1)
    last = max(ranks.values())
    for r in ranks:
        add("kv_cache_allocated", r, last, tokens=1000, kv_gib=50.0)
        add("memory_pool_end", r, last, avail_gib=9.0)
        add("graph_capture_begin", r, last + 1, avail_gib=8.9)
    return evs


def _row(run: Run, rank: str) -> Any:
    return next(r for r in rank_rows(run) if r.rank == rank)


def _span(row: Any, stage: str) -> tuple[float, float]:
    seg = next(s for s in row.segments if s.stage == stage)
    return seg.start - T0, seg.end - T0


# ---------------------------------------------------------------------------------------------- the fold

def test_each_rank_keeps_its_own_stage_times() -> None:
    run = summarize(_launch({0: 10.0, 1: 25.0}))
    assert set(run.rank_stages) == {"TP0", "TP1"} == set(run.ranks)   # the labels of the memory figures
    assert run.rank_stages["TP0"].spans["weights"] == (T0 + 1, T0 + 10)
    assert run.rank_stages["TP1"].spans["weights"] == (T0 + 1, T0 + 25)
    # the run-wide stage is unchanged: first line and last end of any rank
    assert run.stages["weights"].start_secs == T0 + 1
    assert _span(_row(run, "TP0"), "weights") == (1, 10) and _span(_row(run, "TP1"), "weights") == (1, 25)
    assert all(not s.runwide for r in rank_rows(run) for s in r.segments)


def test_a_rank_that_stopped_early_ends_at_its_own_last_line() -> None:
    evs = _launch({0: 10.0, 1: 12.0})
    # TP2 begins loading and goes quiet after one more line of its own (no stage line)
    evs += [_ev("dist_init_begin", 90, 2, T0), _ev("weight_load_begin", 91, 2, T0 + 1, avail_gib=78.5),
            _ev("nccl_version", 92, None, T0 + 2, version="2.21.5"),
            _ev("python_warning", 93, 2, T0 + 6, message="slow disk")]
    run = summarize(evs)
    row = _row(run, "TP2")
    assert row.reached == "weights" and not row.failed
    assert _span(row, "weights") == (1, 6)          # to its last line, not the others' end of loading
    assert _row(run, "TP0").reached == "graph_capture"
    svg = "".join(timeline(run, str))
    tp2 = re.search(r'<g class="rank-row" data-rank="TP2".*?</g>', svg)
    assert tp2 and "■ stopped in weights" in tp2.group(0)


def test_warmup_is_run_wide_from_uvicorn_to_ready_and_stays_out_of_the_json() -> None:
    evs = _launch({0: 10.0, 1: 12.0})
    evs += [_ev("graph_capture_end", 80, r, T0 + 20, mem_usage_gib=0.6, avail_gib=8.3) for r in (0, 1)]
    evs += [_ev("uvicorn_started", 81, None, T0 + 21, pid=1),
            _ev("uvicorn_running", 82, None, T0 + 22, host="127.0.0.1", port=30000),
            _ev("http_access", 83, None, T0 + 23, method="GET", path="/get_model_info", status=200),
            _ev("http_access", 84, None, T0 + 26, method="POST", path="/generate", status=200),
            _ev("server_ready", 85, None, T0 + 27),
            _ev("python_warning", 86, 0, T0 + 500, message="after ready")]
    run = summarize(evs)
    assert run.warmup is not None and run.warmup.first_line == 82
    assert (run.warmup.start_secs, run.warmup.end_secs) == (T0 + 22, T0 + 27)
    assert "warmup" not in run.stages and run.last_stage == "ready"
    assert run.rank_stages["TP0"].last_secs == T0 + 20   # lines after ready are not the launch's
    for rank in ("TP0", "TP1"):
        row = _row(run, rank)
        assert row.reached == "ready"
        assert _span(row, "warmup") == (22, 27) and _span(row, "ready") == (27, 27)
    d = run.to_dict()
    assert set(d["stages"]) == set(STAGES)
    assert not {"warmup", "rank_stages", "last_secs"} & set(d)


def test_warmup_needs_a_launch_and_ends_at_its_failure() -> None:
    # a serving fragment: requests but no launch stage, so no warm-up
    frag = summarize([_ev("http_access", 1, None, T0, method="POST", path="/generate", status=200)])
    assert frag.warmup is None
    evs = _launch({0: 10.0})
    evs += [_ev("graph_capture_end", 80, 0, T0 + 20, mem_usage_gib=0.6, avail_gib=8.3),
            _ev("warmup", 81, None, T0 + 22, name="voice_chat"),
            _ev("warmup_failed", 82, None, T0 + 30)]
    run = summarize(evs)
    assert run.warmup is not None and (run.warmup.start_secs, run.warmup.end_secs) == (T0 + 22, T0 + 30)
    row = _row(run, "TP0")
    assert row.reached == "warmup" and not row.failed   # the main process failed, not the rank
    svg = "".join(timeline(run, str))
    assert 'class="main-failure"' in svg and "✗ warmup_failed" in svg


def test_a_rank_failure_is_marked_at_its_own_time() -> None:
    evs = _launch({0: 10.0, 1: 12.0})
    evs.append(_ev("torch_oom", 90, 1, T0 + 40, tried_gib=2.0))
    run = summarize(evs)
    row = _row(run, "TP1")
    assert row.failed and row.failed_at == T0 + 40
    assert _span(row, "graph_capture") == (13, 40)      # its row runs on to the failure
    assert not _row(run, "TP0").failed
    assert stamp_secs("2025-03-01 10:00:40") == T0 + 40 and stamp_secs("10:00:40.500") == 36040.5


def test_a_log_that_names_no_rank_is_one_rank_drawn_from_its_own_lines() -> None:
    evs = _launch({0: 10.0})
    for ev in evs:   # TP1 from v0.4.6.post2 prints no prefix
        ev.rank = ev.ranks = None
    run = summarize(evs)
    assert run.rank_stages == {} and list(run.ranks) == ["TP0"]
    row = _row(run, "TP0")
    assert row.reached == "graph_capture" and row.segments and not any(s.runwide for s in row.segments)
    assert _span(row, "weights") == (1, 10)


def test_logs_without_time_stamps_name_where_each_rank_got_to() -> None:
    run = summarize(_launch({0: 10.0, 1: 12.0}, timed=False))
    assert run.rank_stages["TP1"].reached == "graph_capture" and not run.rank_stages["TP1"].spans
    page = "".join(timeline(run, str))
    assert "<svg" not in page and "carry no time stamps" in page and "graph_capture: TP0, TP1" in page


def test_time_only_stamps_across_midnight() -> None:
    evs = _launch({0: 30.0}, start=86400.0 - 20)   # `[23:59:40 TP0]` … `[00:00:10 TP0]`
    for ev in evs:
        ev.secs = ev.secs % 86400.0 if ev.secs is not None else None
    run = summarize(evs)
    row = rank_rows(run)[0]
    svg = "".join(timeline(run, str))
    assert row.reached == "graph_capture" and "stage-weights" in svg
    widths = [float(w) for w in re.findall(r'class="stage stage-weights" x="[\d.]+" y="\d+" width="([\d.]+)"', svg)]
    assert widths and widths[0] > 100   # 29 s of 31 drawn, not a 2 px sliver or a negative span


def test_the_fold_stays_bounded_by_ranks_and_stages() -> None:
    evs = []
    for i in range(4_000):
        evs.append(_ev("graph_capture_progress" if i % 2 else "graph_capture_begin", i + 1, i % 4, T0 + i,
                       avail_gib=9.0))
    run = summarize(evs)
    assert len(run.rank_stages) == 4
    assert all(list(rs.spans) == ["graph_capture"] for rs in run.rank_stages.values())


def test_graph_memory_estimate_only_where_the_numbers_give_one() -> None:
    died = {"graphs": {"rank": "TP0", "total_gib": 1.52, "total_source": "begin avail − last progress",
                       "finished": False, "failed_at_bs": 256}}
    assert _graph_estimate({"rank": "TP0", "graph_gib": None}, died) == (
        1.52, "begin avail − last progress, the capture died at bs 256")
    assert _graph_estimate({"rank": "TP1", "graph_gib": None}, died) is None  # another rank's died capture
    done = {"graphs": {"rank": "TP0", "total_gib": 0.62, "total_source": "capture end mem usage",
                       "finished": True, "failed_at_bs": None}}
    est = _graph_estimate({"rank": "TP1", "graph_gib": None}, done)
    assert est is not None and est[0] == 0.62
    assert _graph_estimate({"rank": "TP1", "graph_gib": 0.6}, done) is None      # printed: no estimate
    assert _graph_estimate({"rank": "TP1", "graph_gib": None}, {"graphs": None}) is None


# ---------------------------------------------------------------------------------------------- in Chromium

@dataclass
class _Row:
    reached: str
    rects: list[tuple[str, float, float]] = field(default_factory=list)   # (stage, x, width)
    failed: list[str] = field(default_factory=list)                        # failure marker texts
    stopped: list[str] = field(default_factory=list)


class _Page(HTMLParser):
    """Per log section: the timeline's rows and the memory chart's graph segments."""

    def __init__(self) -> None:
        super().__init__()
        self.logs: dict[str, dict[str, _Row]] = {}
        self.graph_segments: dict[str, list[tuple[str, list[str], str]]] = {}   # log → (rank, classes, title)
        self._log = ""
        self._row: _Row | None = None
        self._bar = ""
        self._text: list[str] | None = None
        self._seg: tuple[str, list[str]] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        cls = a.get("class", "").split()
        if tag == "section":
            self._log = a["data-log"]
            self.logs[self._log], self.graph_segments[self._log] = {}, []
        elif tag == "g" and "rank-row" in cls:
            self._row = self.logs[self._log][a["data-rank"]] = _Row(a["data-reached"])
        elif tag == "g" and "rank-bar" in cls:
            self._bar = a["data-rank"]
        elif tag == "rect" and "stage" in cls and self._row is not None:
            self._row.rects.append((cls[1].removeprefix("stage-"), float(a["x"]), float(a["width"])))
        elif tag == "rect" and "seg-cuda_graphs" in cls:
            self._seg = (self._bar, cls)
        elif tag == "text" and "stopped" in cls and self._row is not None:
            self._text = self._row.failed if "failed" in cls else self._row.stopped

    def handle_data(self, data: str) -> None:
        if self._text is not None:
            self._text.append(data)
            self._text = None
        elif self._seg is not None:
            self.graph_segments[self._log].append((*self._seg, data))
            self._seg = None

    def handle_endtag(self, tag: str) -> None:
        if tag == "g":
            self._row = None


def _report(path: Path) -> Report:
    return diagnose_source(str(path), load_ruleset(()))


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[_Page, Any]:
    """Both fixtures' reports on one page, loaded once: one browser launch for the module."""
    tmp = tmp_path_factory.mktemp("timeline")
    bodies = []
    for log in (CAPTURE_OOM, HEALTHY):
        html = explain_html_page(_report(log))
        head, body = html.split("<body>", 1)
        bodies.append(f'<section data-log="{log.stem}">{body.rsplit("</body>", 1)[0]}</section>')
    combined = tmp / "timelines.html"
    combined.write_text(head + "<body>" + "\n".join(bodies) + "</body></html>", encoding="utf-8")
    opened = open_page(combined, tmp)
    assert opened.returncode == 0, opened.stderr[-2000:]
    dom = _Page()
    dom.feed(opened.dom)
    return dom, opened


def test_timeline_and_memory_chart_in_chromium(page: tuple[_Page, Any]) -> None:
    """One test on the page (pytest-xdist would give each worker that runs a test of it its own browser)."""
    dom, opened = page
    assert opened.console == [] and opened.requests == []
    _check_failed_launch(dom)
    _check_healthy_launch(dom)
    _check_estimated_graphs(dom, opened.dom)


def _check_failed_launch(dom: _Page) -> None:
    oom = dom.logs[CAPTURE_OOM.stem]
    assert list(oom) == ["TP0", "TP1", "TP2", "TP3"]
    assert {r.reached for r in oom.values()} == {"graph_capture"}
    # weight loading ends at 35, 48, 66 and 40 s (TP0, TP1, TP2, TP3): four different bar ends
    ends = {rank: next(x + w for s, x, w in row.rects if s == "weights") for rank, row in oom.items()}
    assert ends["TP0"] < ends["TP3"] < ends["TP1"] < ends["TP2"]
    starts = {next(x for s, x, _ in row.rects if s == "weights") for row in oom.values()}
    assert len(starts) == 1                                    # they began together
    # TP2 died in graph capture: the failure marker is on its row only, the others stopped quietly
    assert oom["TP2"].failed == ["✗ failed in graph_capture"]
    assert all(not oom[r].failed and oom[r].stopped == ["■ stopped in graph_capture"] for r in ("TP0", "TP1", "TP3"))
    capture = {rank: next((x, w) for s, x, w in row.rects if s == "graph_capture") for rank, row in oom.items()}
    assert capture["TP2"][1] > 10 * capture["TP0"][1]          # its capture ran on to its failure line
    assert all(s != "warmup" for row in oom.values() for s, _, _ in row.rects)


def _check_healthy_launch(dom: _Page) -> None:
    ok = dom.logs[HEALTHY.stem]
    assert list(ok) == ["TP0", "TP1"] and {r.reached for r in ok.values()} == {"ready"}
    for row in ok.values():
        stages = [s for s, _, _ in row.rects]
        assert stages == ["init", "weights", "kv_pool", "graph_capture", "warmup", "ready"]
        warm = next((x, w) for s, x, w in row.rects if s == "warmup")
        ready_x = next(x for s, x, _ in row.rects if s == "ready")
        assert warm[1] > 20 and abs(warm[0] + warm[1] - ready_x) < 0.2   # warm-up runs up to the ready line
        assert not row.failed and not row.stopped
    weights = {rank: next(w for s, _, w in row.rects if s == "weights") for rank, row in ok.items()}
    assert weights["TP1"] > 1.5 * weights["TP0"]               # TP1 loaded for 13 s, TP0 for 7 s
    assert ok["TP0"].rects[-2] == ok["TP1"].rects[-2]          # the warm-up is the main process's: one span


def _check_estimated_graphs(dom: _Page, rendered: str) -> None:
    oom = dom.graph_segments[CAPTURE_OOM.stem]
    estimated = [(rank, title) for rank, cls, title in oom if "estimated" in cls]
    assert [r for r, _ in estimated] == ["TP0"]                # the rank whose capture progress gave it
    assert "estimated" in estimated[0][1] and "≈1.52 GiB" in estimated[0][1]
    assert "The CUDA graphs of TP0 are an estimate" in rendered
    ok = dom.graph_segments[HEALTHY.stem]
    assert [cls for _, cls, _ in ok] == [["seg", "seg-cuda_graphs"]] * 2   # both ranks print their graphs

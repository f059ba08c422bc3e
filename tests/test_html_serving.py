"""The serving charts: `ServingSeries` (run/serving_series.py), folded only for the HTML report, and its
section of the page (report/html_serving.py), opened once in headless Chromium.

The series must be the same whichever way the batch lines came (parsed events, or raw lines in bulk),
bounded whatever the log's length, honest about DP ranks and about lines without a time stamp, and
absent from every JSON output.
"""
from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from browser import Opened, open_page

from logdoctor.parse.parse import parse_source, parse_text
from logdoctor.run.batches import BatchStats
from logdoctor.run.fold import Folding, RunBuilder, fold_source
from logdoctor.run.serving_series import ServingSeries, collecting_series, series_of

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "fixtures" / "html" / "serving" / "dp2-serving.log"

# real batch-line forms (catalog c.1 / c.2), each with a full date prefix
FORMS = [
    "[2025-06-12 08:33:{s:02d} TP0] Decode batch. #running-req: 3, #token: 7675, token usage: 0.01, cuda graph: True, "
    "gen throughput (token/s): 137.41, #queue-req: 0",                                          # v0.4.6.post4+
    "[2025-06-12 08:33:{s:02d} TP0] Decode batch. #running-req: 6, #token: 15614, token usage: 0.03, "
    "gen throughput (token/s): 267.13, largest-len: 0, #queue-req: 2, ",                         # v0.4.3.post3
    "[2025-06-12 08:33:{s:02d}.512 DP1 TP0 EP0] Decode batch, #running-req: 15, #token: 23096, token usage: 0.01, "
    "cuda graph: True, gen throughput (token/s): 919.76, #queue-req: 4",                         # v0.5.x, DP, ms
    "[2025-06-12 08:33:{s:02d} TP0] Decode batch [12], #running-req: 9, #token: 12970, token usage: 0.02, "
    "cuda graph: False, gen throughput (token/s): 554.34, #queue-req: 1",                        # v0.5.4 tag
    "[2025-06-12 08:33:{s:02d} TP0] Decode batch, #running-req: 7, #full token: 100, full token usage: 0.40, "
    "#swa token: 9, swa token usage: 0.90, cuda graph: True, gen throughput (token/s): 88.00, #queue-req: 0",  # hybrid
    "[2025-06-12 08:33:{s:02d} TP0] Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.05, "
    "#running-req: 11, #queue-req: 3, ",                                                          # v0.4.9.post3+
    "[2025-06-12 08:33:{s:02d} TP0] Prefill batch(mixed #running-req: 40). #new-seq: 1, #new-token: 7, "
    "#cached-token: 0, cache hit rate: 0.00%, token usage: 0.07, #running-req: 12, #queue-req: 5",  # v0.2.14 mixed
    "[2025-06-12 08:33:{s:02d} DP0 TP0 EP0] Prefill batch, #new-seq: 15, #new-token: 22496, #cached-token: 0, "
    "token usage: 0.00, #running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False, "
    "input throughput (token/s): 24995.56",                                                       # v0.5.9+
]


def _lines(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(FORMS).format(s=i % 60).replace("08:33:", f"08:{33 + i // 60:02d}:") for i in range(n)]


def _from_events(lines: list[str], max_points: int = 400) -> ServingSeries:
    s = ServingSeries(max_points)
    for ev in parse_text("\n".join(lines)):
        assert ev.kind in ("decode_batch", "prefill_batch"), ev
        s.add(ev)
    return s


def _from_bulk(lines: list[str], max_points: int = 400, chunk: int = 37) -> ServingSeries:
    s = ServingSeries(max_points)
    for i in range(0, len(lines), chunk):  # as ingest hands them over: blobs of some lines each
        s.add_batch_lines("\n".join(lines[i:i + chunk]).encode())
    return s


def test_the_bulk_path_gives_the_series_the_events_give() -> None:
    lines = _lines(900)
    events, bulk = _from_events(lines), _from_bulk(lines)
    assert bulk.key() == events.key()
    assert bulk.untimed == 0 and bulk.dated and bulk.dp_ranks == {0, 1}
    assert bulk.line_count == 900 and bulk.width == 4.0 and len(bulk.buckets) == 225  # 900 s; 2 s would need 450
    # the same series whatever the order the lines came in (the grid and the merges do not depend on it)
    shuffled = lines[:]
    random.Random(1).shuffle(shuffled)
    assert _from_bulk(shuffled, 40).key() == _from_events(lines, 40).key()


def test_hybrid_and_mixed_lines_read_as_the_parser_reads_them() -> None:
    # `full token usage` is another key than `token usage`; `(mixed #running-req: 40)` is not #running-req
    hybrid, mixed = FORMS[4].format(s=1), FORMS[6].format(s=2)
    s = _from_bulk([hybrid, mixed])
    first, second = s.points()
    assert (first.usage, first.running, first.throughput) == (None, 7, 88.0)
    assert (second.usage, second.running, second.queue) == (0.07, 12, 5)
    assert s.key() == _from_events([hybrid, mixed]).key()


def test_merging_keeps_the_whole_span_within_the_bound() -> None:
    lines = _lines(3000, seed=2)  # 50 minutes, one line a second
    s = _from_bulk(lines, max_points=20)
    assert len(s.buckets) <= 20 and s.width == 256.0  # 3000 s / 256 = 11.7 → 12 buckets; 128 would need 24
    start, end = s.span or (0, 0)
    first = _from_events(lines[:1]).span
    assert first is not None and start <= first[0] and end >= first[0] + 3000  # the first and the last second
    assert s.line_count == 3000 and sum(p.lines for p in s.points()) == 3000
    # a series merged down equals one built at that width from the start
    assert s.key() == _from_events(lines, 20).key()


def test_dp_throughput_is_the_sum_of_each_ranks_mean() -> None:
    line = ("[2026-05-01 10:00:{s:02d}.{ms:03d} DP{dp} TP0 EP0] Decode batch, #running-req: {r}, #token: 100, "
            "token usage: {u:.2f}, cuda graph: True, gen throughput (token/s): {t:.2f}, #queue-req: {q}")
    lines = [line.format(s=0, ms=100, dp=0, r=10, u=0.10, t=100.0, q=1),
             line.format(s=0, ms=400, dp=0, r=12, u=0.20, t=300.0, q=0),
             line.format(s=0, ms=700, dp=1, r=30, u=0.50, t=50.0, q=7)]
    for s in (_from_bulk(lines), _from_events(lines)):
        (p,) = s.points()
        assert p.throughput == pytest.approx(200.0 + 50.0)  # mean of DP0 (100, 300) + DP1's 50
        assert (p.usage, p.queue, p.running, p.lines, p.decode_lines) == (0.50, 7, 30, 3, 3)
        assert s.dp_ranks == {0, 1}


def test_dp_charts_widen_until_each_rank_has_lines_in_its_buckets() -> None:
    # each rank prints every 2 s, the ranks 1 s apart: 1 s buckets hold one rank's line, never both
    line = "[2026-05-01 10:{m:02d}:{s:02d} DP{dp} TP0] Decode batch, #running-req: 5, #token: 9, token usage: 0.01, " \
           "cuda graph: True, gen throughput (token/s): 100.00, #queue-req: 0"
    lines = [line.format(m=k // 60, s=k % 60, dp=k % 2) for k in range(120)]
    series = _from_bulk(lines)
    assert series.width == 1.0 and {p.throughput for p in series.points()} == {100.0}  # one rank's rate, not the sum
    chart = series.for_chart()
    assert chart.width == 4.0  # two lines of each rank per bucket
    assert {p.throughput for p in chart.points()} == {200.0}
    assert series.width == 1.0  # the folded series is left as it was


def test_lines_without_a_time_are_counted_not_charted() -> None:
    old = ["[gpu_id=0] Decode batch. #running-req: 3, #token: 9, token usage: 0.01, gen throughput (token/s): 5.00, "
           "#queue-req: 0",                                                   # v0.1.17–v0.2.13: no time
           "Decode batch. #running-req: 3, #token: 9, token usage: 0.01, gen throughput (token/s): 5.00, #queue-req: 0"]
    for s in (_from_bulk(old), _from_events(old)):
        assert s.untimed == 2 and not s.buckets and s.span is None
    from logdoctor.report.html_serving import serving_section
    run = Folding(parse_text("\n".join(old)), RunBuilder(series=True)).drain()
    html = "".join(serving_section(run, str))
    assert "carry no time stamps" in html and "<svg" not in html


def test_a_400_digit_figure_is_ignored() -> None:
    huge = "9" * 400
    lines = [f"[2025-06-12 08:33:00 TP0] Decode batch. #running-req: {huge}, #token: 1, token usage: {huge}.5, "
             f"gen throughput (token/s): {huge}, #queue-req: {huge}",
             FORMS[0].format(s=1)]
    for s in (_from_bulk(lines), _from_events(lines)):
        first, second = s.points()
        assert (first.lines, first.throughput, first.usage, first.queue, first.running) == (1, None, None, None, None)
        assert second.throughput == 137.41
    assert _from_bulk(lines).key() == _from_events(lines).key()


def test_hostile_batch_lines_end() -> None:
    """Long items, thousands of items, brackets: the one regex stays linear (a hang guard, not a timing)."""
    head = "[2025-06-12 08:33:00 TP0] Decode batch, "
    blob = "\n".join([head + "a" * 300_000, head + ", " * 100_000, head + "#queue-req: 1" * 50_000,
                      "[" * 200_000, *[head + "x: 1, "] * 20_000]).encode()
    code = ("import sys; from logdoctor.run.serving_series import ServingSeries; s = ServingSeries(); "
            "s.add_batch_lines(sys.stdin.buffer.read()); print(s.line_count)")
    out = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True, timeout=20, check=True)
    assert int(out.stdout) == 3 + 20_000


def test_off_unless_asked_and_never_in_the_json(tmp_path: Path) -> None:
    assert BatchStats().series is None and RunBuilder().batch_stats.series is None
    plain = fold_source(FIXTURE).drain()
    assert series_of(plain) is None
    with collecting_series(True):
        assert RunBuilder().batch_stats.series is not None
        charted = fold_source(FIXTURE).drain()
    assert RunBuilder().batch_stats.series is None  # the block ended
    assert series_of(charted) is not None
    assert json.dumps(charted.to_dict(), default=str) == json.dumps(plain.to_dict(), default=str)


def test_the_pipeline_gives_the_same_series_by_both_paths(tmp_path: Path) -> None:
    """A log long enough that ingest hands most batch lines over in bulk, against every line parsed."""
    log = tmp_path / "long.log"
    launch = FIXTURE.read_text(encoding="utf-8").splitlines()[:111]
    log.write_text("\n".join(launch + _lines(4000, seed=3)) + "\n", encoding="utf-8")
    bulk = fold_source(log, series=True).drain()
    assert bulk.kinds.get("decode_batch", 0) + bulk.kinds.get("prefill_batch", 0) < 2500  # the bulk path ran
    every = Folding(iter(parse_source(str(log))), RunBuilder(series=True)).drain()
    in_launch = sum(" batch, " in ln for ln in launch)  # the warm-up prefills
    assert every.kinds.get("decode_batch", 0) + every.kinds.get("prefill_batch", 0) == 4000 + in_launch
    b, e = series_of(bulk), series_of(every)
    assert b is not None and e is not None and b.key() == e.key() and b.line_count == 4000 + in_launch


# ---------------------------------------------------------------------------------------------- in a browser

class _Charts(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.svgs: list[str] = []
        self.paths: dict[tuple[str, str], int] = {}   # (chart, series) → data-points
        self._svg = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "svg":
            self._svg = a.get("id", "")
            self.svgs.append(self._svg)
        if tag == "path" and "series" in a.get("class", "").split():
            self.paths[(self._svg, a["class"].split()[1].removeprefix("series-"))] = int(a["data-points"])


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Opened]:
    tmp = tmp_path_factory.mktemp("serving")
    out = tmp / "serving.html"
    run = subprocess.run([sys.executable, "-m", "logdoctor", "explain", str(FIXTURE), "-o", str(out)], check=False,
                         capture_output=True, text=True, timeout=60, env={**os.environ, "NO_COLOR": "1"})
    assert run.returncode == 0, run.stderr  # healthy
    return out.read_text(encoding="utf-8"), open_page(out, tmp)


def test_the_serving_charts_render_in_chromium(page: tuple[str, Opened]) -> None:
    html, opened = page
    assert "<script" not in html and not re.search(r"""(?:src|href)\s*=\s*(?!["']?#)""", html)
    assert opened.returncode == 0, opened.stderr[-2000:]
    assert opened.console == [], opened.console
    assert opened.requests == [], opened.requests
    charts = _Charts()
    charts.feed(opened.dom)
    assert {"throughput-chart", "token-usage-chart", "queue-chart"} <= set(charts.svgs)
    # what the fixture holds, counted from its text: DP0 and DP1 print a Decode line every 1.8 s, 0.9 s apart,
    # so the charts are widened to 4 s buckets (two lines of each rank in each); 30 s without a line
    text = FIXTURE.read_text(encoding="utf-8")
    stamp = r"\[2026-05-01 (\d\d):(\d\d):(\d\d)\.\d{3} DP\d TP0 EP0\] "
    secs = lambda m: int(m[0]) * 3600 + int(m[1]) * 60 + int(m[2])
    decode = {secs(m) // 4 for m in re.findall(stamp + "Decode batch", text)}
    batch = {secs(m) // 4 for m in re.findall(stamp + "(?:Decode|Prefill) batch", text)}
    assert charts.paths == {("throughput-chart", "throughput"): len(decode),
                            ("token-usage-chart", "token-usage"): len(batch),
                            ("queue-chart", "queue"): len(batch), ("queue-chart", "running"): len(batch)}
    assert 40 < len(decode) < len(batch) < 70
    assert "summed over the 2 DP ranks" in opened.dom and "buckets of 4 s" in opened.dom


def test_no_serving_section_without_batch_lines() -> None:
    from logdoctor.report.html_serving import serving_section
    run = Folding(parse_text("[2025-06-12 08:33:00 TP0] Load weight begin. avail mem=78.46 GB"),
                  RunBuilder(series=True)).drain()
    assert serving_section(run, str) == []

"""`logdoctor report LOG|DIR...`: one HTML page for one log (explain's) or for a fleet of them.

The fleet is a directory of fixture logs copied at test time that vary mem_fraction_static,
cuda_graph_max_bs and tp, plus one file that cannot be read. The page is checked against batch's rows for the
same directory, and loaded once in headless Chromium (tests/browser.py: the system's browser, nothing
downloaded).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from browser import Opened, open_page

ROOT = Path(__file__).resolve().parent.parent
FX = ROOT / "fixtures"
# copied name → (fixture, tp, mem_fraction_static, cuda_graph_max_bs) as the log's server args give them
FLEET: dict[str, tuple[Path, int | None, float | None, int | None]] = {
    **{p.name: (p, 1, float(p.name.split("mfs")[1][:4]), 256) for p in sorted((FX / "runs").glob("*.log"))},
    "tp8-mem-fraction.log": (FX / "example" / "tp8-mem-fraction.log", 8, 0.88, 512),
    "capture-oom-tp4.log": (FX / "logs" / "v0.5-capture-oom-tp4.log", 4, 0.93, 512),
    "incomplete-after-nccl.log": (FX / "logs" / "v0.5-incomplete-after-nccl.log", 4, 0.848, 512),
    "socket-refused-tp16.log": (FX / "rules" / "COM006" / "fires-socket-refused.log", 16, 0.85, 160),
    "leaky-weight-load-oom-tp2.log": (FX / "redact" / "leaky-weight-load-oom-tp2.log", 2, 0.834, 256),
}
UNREADABLE = "random-bytes.log"   # binary: a row with an error
ONE = FX / "example" / "tp8-mem-fraction.log"


def _logdoctor(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "logdoctor", *map(str, args)], check=False, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"})


@dataclass
class _Page(HTMLParser):
    """What the assertions count in a page (as written, or as the browser's DOM after layout)."""
    svgs: list[str] = field(default_factory=list)
    bars: dict[str, list[tuple[str, int]]] = field(default_factory=dict)    # svg id → (value, count) per bar
    stacks: dict[tuple[str, str], Counter[str]] = field(default_factory=dict)  # (svg, value) → verdict counts
    rows: list[str] = field(default_factory=list)                           # data-verdict of the runs table rows
    links: list[str] = field(default_factory=list)
    anchors: set[str] = field(default_factory=set)
    headline: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__()
        self._svg = self._value = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.links += [a[k] for k in ("src", "href", "xlink:href") if k in a]
        if "id" in a:
            self.anchors.add(a["id"])
        cls = a.get("class", "").split()
        if tag == "svg":
            self._svg = a.get("id", "")
            self.svgs.append(self._svg)
        elif tag == "g" and {"category-bar", "value-bar"} & set(cls):
            self._value = a.get("data-category", a.get("data-value", ""))
            self.bars.setdefault(self._svg, []).append((self._value, int(a["data-count"])))
        elif tag == "rect" and "verdict" in cls:
            self.stacks.setdefault((self._svg, self._value), Counter())[cls[1].removeprefix("verdict-")] += \
                int(a["data-count"])
        elif tag == "tr" and "data-verdict" in a:
            self.rows.append(a["data-verdict"])
        elif tag == "span" and any(c.startswith("count-") for c in cls):
            self.headline[cls[0].removeprefix("count-")] = int(a["data-count"])


def _parsed(html: str) -> _Page:
    page = _Page()
    page.feed(html)
    return page


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The fleet directory, its page, the redacted page, and batch's rows for it: each made once."""
    tmp = tmp_path_factory.mktemp("fleet")
    logs = tmp / "logs"
    logs.mkdir()
    for name, (src, *_) in FLEET.items():
        shutil.copyfile(src, logs / name)
    shutil.copyfile(FX / "compressed" / "random-bytes.log", logs / UNREADABLE)
    page = tmp / "fleet.html"
    run = _logdoctor("report", logs, "-o", page, "--no-progress")
    batch = _logdoctor("batch", logs, "--format", "json", "--no-progress")
    redacted = _logdoctor("report", *sorted(p for p in logs.iterdir() if p.name != UNREADABLE), "--redact", "-o",
                          tmp / "redacted.html", "--no-progress")
    return {"tmp": tmp, "logs": logs, "page": page, "run": run, "rows": json.loads(batch.stdout),
            "redacted": redacted, "redacted_page": tmp / "redacted.html"}


def test_exit_code_page_and_unreadable_file_as_batch_has_them(fleet: dict[str, Any]) -> None:
    run = fleet["run"]
    assert run.returncode == 2, run.stderr  # as batch: a log that could not be read, and the page is still written
    assert run.stdout == "" and f"{UNREADABLE}: binary file (not a text log)" in run.stderr
    html = fleet["page"].read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and html.endswith("</html>\n") and "<script" not in html
    assert not re.search(r"""(?:src|href)\s*=\s*(?!["']?#)""", html) and "url(" not in html
    page = _parsed(html)
    rows = fleet["rows"]
    assert len(rows) == len(FLEET) + 1 == len(page.rows)  # one table row per log
    verdicts = Counter("unreadable" if r["error"] else r["verdict"] for r in rows)
    assert page.headline == {v: verdicts[v] for v in ("failed", "incomplete", "healthy", "unreadable")}
    assert f'data-logs="{len(rows)}"' in html
    # failures first, then incomplete, unreadable, healthy
    order = ["failed", "incomplete", "unreadable", "healthy"]
    assert page.rows == sorted(page.rows, key=order.index)
    assert "binary file (not a text log)" in html
    assert fleet["redacted"].returncode == 1, fleet["redacted"].stderr  # every log read, failures diagnosed


def test_category_bars_count_batch_rows(fleet: dict[str, Any]) -> None:
    page = _parsed(fleet["page"].read_text(encoding="utf-8"))
    expected: dict[str, Counter[str]] = {}
    for r in fleet["rows"]:
        category = "unreadable" if r["error"] else (r["category"] or "none")
        expected.setdefault(category, Counter())["unreadable" if r["error"] else r["verdict"]] += 1
    assert dict(page.bars["category-chart"]) == {c: sum(v.values()) for c, v in expected.items()}
    assert {c: page.stacks[("category-chart", c)] for c in expected} == expected
    assert {"memory_pressure", "communication", "none", "unreadable"} <= set(expected)


def test_a_chart_per_varied_flag_with_a_bar_per_value(fleet: dict[str, Any]) -> None:
    html = fleet["page"].read_text(encoding="utf-8")
    page = _parsed(html)
    verdict = {Path(r["path"]).name: r["verdict"] for r in fleet["rows"] if not r["error"]}
    for flag, i in (("tp", 1), ("mem_fraction_static", 2), ("cuda_graph_max_bs", 3)):
        values = Counter(f"{spec[i]:g}" for spec in FLEET.values())
        bars = page.bars[f"flag-{flag}"]
        assert dict(bars) == dict(values), flag
        assert [float(v) for v, _ in bars] == sorted(float(v) for v in values)  # numeric order
        failed = Counter(f"{spec[i]:g}" for name, spec in FLEET.items() if verdict[name] == "failed")
        assert {v: page.stacks[(f"flag-{flag}", v)]["failed"] for v in values} == {v: failed[v] for v in values}
    assert "Same in every run:" in html and "<code>pp</code>: 1" in html  # a flag with one value is listed
    assert "flag-pp" not in page.svgs


def test_every_link_has_its_anchor_and_failures_their_section(fleet: dict[str, Any]) -> None:
    page = _parsed(fleet["page"].read_text(encoding="utf-8"))
    assert page.links and all(link.startswith("#") and link[1:] in page.anchors for link in page.links)
    diagnosed = sum(1 for r in fleet["rows"] if r["rule"])
    assert {f"run-{n}" for n in range(1, diagnosed + 1)} <= page.anchors and f"run-{diagnosed + 1}" not in page.anchors
    html = fleet["page"].read_text(encoding="utf-8")
    # the root cause of the example, its evidence and remedy, as explain tells them
    assert "CUDA ran out of memory while capturing CUDA graphs" in html and "<h4>What to do</h4>" in html
    assert "line 299" in html


def test_redact_leaves_no_ip_of_any_log(fleet: dict[str, Any]) -> None:
    plain, html = fleet["page"].read_text(encoding="utf-8"), fleet["redacted_page"].read_text(encoding="utf-8")
    ips = set()
    for name, (src, *_) in FLEET.items():
        ips |= set(re.findall(r"\b(?:\d{1,3}\.){3}\d{1,3}\b", src.read_text(encoding="utf-8"))) - {"0.0.0.0", "127.0.0.1"}
    assert any(ip in plain for ip in ips)  # the unredacted page shows one (in a cited line), so the check bites
    assert not any(ip in html for ip in ips)
    assert re.search(r"&lt;ip-\d+&gt;", html) and "<ip-" not in html  # placeholders shown as text, not tags
    assert "alice" in plain and "alice" not in html


def test_one_log_is_explains_page_on_stdout() -> None:
    run = _logdoctor("report", ONE)
    explained = _logdoctor("explain", ONE, "--format", "html")
    assert run.returncode == explained.returncode == 1, run.stderr
    assert run.stdout == explained.stdout and 'id="memory-chart"' in run.stdout


def test_no_logs_found_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("not a log\n", encoding="utf-8")
    run = _logdoctor("report", tmp_path, "-o", tmp_path / "r.html")
    assert run.returncode == 2 and "no logs found" in run.stderr and not (tmp_path / "r.html").exists()


@pytest.fixture(scope="module")
def in_chromium(fleet: dict[str, Any]) -> tuple[Opened, Path]:
    shot = fleet["tmp"] / "fleet.png"
    return open_page(fleet["page"], fleet["tmp"], f"--screenshot={shot}", "--window-size=1100,3000"), shot


def test_fleet_page_in_headless_chromium(fleet: dict[str, Any], in_chromium: tuple[Opened, Path]) -> None:
    opened, shot = in_chromium
    assert opened.returncode == 0, opened.stderr[-2000:]
    assert opened.console == [], opened.console
    assert opened.requests == [], opened.requests  # the page fetched nothing
    dom = _parsed(opened.dom)
    categories = {"unreadable" if r["error"] else (r["category"] or "none") for r in fleet["rows"]}
    assert len(dom.bars["category-chart"]) == len(categories)
    for flag, i in (("tp", 1), ("mem_fraction_static", 2), ("cuda_graph_max_bs", 3)):
        assert len(dom.bars[f"flag-{flag}"]) == len({spec[i] for spec in FLEET.values()})
    assert len(dom.rows) == len(FLEET) + 1
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")


def test_a_fleet_of_many_logs_makes_a_bounded_page() -> None:
    """Tens of thousands of rows: the table, the sections and the bars are capped, and the page says so."""
    from logdoctor.many.batch import BatchRow
    from logdoctor.many.html_fleet import CATEGORY_BARS, DETAILED_RUNS, FLAG_VALUES, TABLE_ROWS, Detail, fleet_html_page
    n = 20_000
    rows = [BatchRow(f"/fleet/{i:05d}.log", verdict="failed" if i % 2 else "healthy", category=f"c{i % 97}" if i % 2 else None,
                     rule="MEM003" if i % 2 else None, title="t", evidence_line=7 if i % 2 else None) for i in range(n)]
    runs = [{"path": r.path, "verdict": r.verdict, "mem_fraction_static": 0.5 + (i % 300) / 1000, "model": f"m{i % 400}"}
            for i, r in enumerate(rows)]
    details = {r.path: Detail("x" * 300, "", [("line 7", "e" * 300)] * 8, "w" * 4000, ["r" * 1000] * 8, True)
               for r in rows if r.rule}
    html = fleet_html_page(rows, runs, details)
    page = _parsed(html)
    assert len(page.rows) == TABLE_ROWS and html.count('<section class="run"') == DETAILED_RUNS
    assert len(page.bars["category-chart"]) == CATEGORY_BARS and len(page.bars["flag-model"]) == FLAG_VALUES
    assert sum(c for _, c in page.bars["category-chart"]) == n  # the capped bars still count every log
    assert f"first {TABLE_ROWS:,} of {n:,} logs" in html and f"{n // 2 - DETAILED_RUNS:,} are not" in html
    assert len(html) < 8_000_000

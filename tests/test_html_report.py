"""`explain --format html` / `-o report.html`: one self-contained page, opened in a real headless Chromium.

Chromium comes from the system's packages (`.ci/run` installs it): a machine without it fails here, loudly.
The browser is driven from the command line (tests/browser.py), so nothing is downloaded.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

from browser import open_page

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "fixtures" / "example" / "tp8-mem-fraction.log"
SOCKET = ROOT / "fixtures" / "rules" / "COM006" / "fires-socket-refused.log"
SEGMENTS = 5  # weights, KV cache, CUDA graphs, reserve, free
def _explain(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "logdoctor", "explain", *map(str, args)], check=False,
                          capture_output=True, text=True, timeout=60, env={**os.environ, "NO_COLOR": "1"})


class _Dom(HTMLParser):
    """The elements of the rendered DOM that the assertions count."""

    def __init__(self) -> None:
        super().__init__()
        self.svgs: list[str] = []
        self.segments: list[tuple[str, str]] = []   # (rank, segment) of the memory chart
        self.rows: list[tuple[str, str]] = []       # (rank, stage reached) of the timeline
        self.links: list[str] = []                  # every src / href
        self.anchors: set[str] = set()
        self._rank = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.links += [a[k] for k in ("src", "href", "xlink:href") if k in a]
        if "id" in a:
            self.anchors.add(a["id"])
        if tag == "svg":
            self.svgs.append(a.get("id", ""))
        cls = a.get("class", "").split()
        if tag == "g" and "rank-bar" in cls:
            self._rank = a["data-rank"]
        if tag == "g" and "rank-row" in cls:
            self.rows.append((a["data-rank"], a["data-reached"]))
        if tag == "rect" and "seg" in cls:
            self.segments.append((self._rank, cls[1].removeprefix("seg-")))


def test_example_report_in_headless_chromium(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    run = _explain(EXAMPLE, "-o", page)  # the suffix picks the format
    assert run.returncode == 1, run.stderr  # a failure diagnosed
    html = page.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and "<script" not in html
    # self-contained: no URL that a browser would fetch, no external font or stylesheet
    assert not re.search(r"""(?:src|href)\s*=\s*(?!["']?#)""", html) and "@import" not in html and "url(" not in html

    dom_run = open_page(page, tmp_path)
    assert dom_run.returncode == 0, dom_run.stderr[-2000:]
    assert dom_run.console == [], dom_run.console
    assert dom_run.requests == [], dom_run.requests  # the page fetched nothing
    dom = _Dom()
    dom.feed(dom_run.dom)
    assert {"memory-chart", "timeline-chart"} <= set(dom.svgs)
    ranks = [f"TP{i}" for i in range(8)]
    # one stacked bar per rank, every bar of the five segments
    assert dom.segments == [(r, s) for r in ranks for s in ("weights", "kv_cache", "cuda_graphs", "reserve", "free")]
    assert len(dom.segments) == len(ranks) * SEGMENTS
    # one timeline row per rank, each stopped in graph capture (TP3 died there)
    assert dom.rows == [(r, "graph_capture") for r in ranks]
    assert "✗ failed in graph_capture" in dom_run.dom and dom_run.dom.count("failed in") == 1
    assert all(link.startswith("#") and link[1:] in dom.anchors for link in dom.links)  # evidence → excerpt
    assert {"L299", "L326"} <= dom.anchors
    assert "mfs-configured" in dom_run.dom and "mfs-effective" in dom_run.dom
    assert "KV budget = A − reserve = 21.70 − 11.28 = 10.42 GiB" in dom_run.dom

    shot = tmp_path / "report.png"
    shot_run = open_page(page, tmp_path, f"--screenshot={shot}", "--window-size=1100,2400", dump_dom=False)
    assert shot_run.returncode == 0, shot_run.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")


def test_redacted_placeholders_are_escaped(tmp_path: Path) -> None:
    """`--redact` placeholders (`<ip-1>`) look like tags: the page shows them as text, never as markup, and
    the raw address is nowhere (not in the evidence, not in the log excerpt)."""
    page = tmp_path / "r.html"
    run = _explain(SOCKET, "--redact", "--format", "html", "-o", page)
    assert run.returncode == 1, run.stderr
    html = page.read_text(encoding="utf-8")
    assert "&lt;ip-1&gt;" in html and "<ip-" not in html
    raw = SOCKET.read_text(encoding="utf-8")
    for ip in set(re.findall(r"\b(?:\d{1,3}\.){3}\d{1,3}\b", raw)) - {"127.0.0.1", "0.0.0.0"}:
        assert ip not in html
    assert "&lt;36141&gt;" in html  # the log's own `<port>` text is escaped too
    assert 'id="L8"' in html and 'href="#L8"' in html


def test_text_and_json_do_not_load_the_html_renderer() -> None:
    # `_run`, the command without `main`'s process exit, so the check after it runs
    code = ("import sys; from logdoctor.cli.main import _run\n"
            "sys.argv = ['logdoctor', 'explain', '--format', 'json', sys.argv[1]]\n"
            "assert _run() in (0, 1)\n"  # no failure / a failure diagnosed
            "assert 'logdoctor.report.html_report' not in sys.modules")
    run = subprocess.run([sys.executable, "-c", code, str(EXAMPLE)], check=False, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr

"""Headless Chromium for the HTML report tests: the system's browser, driven from the command line.

Chromium comes from the system's packages (`.ci/run` installs it): a machine without it fails, loudly, never
skips. Nothing is downloaded: `--dump-dom` prints the DOM after layout, `--screenshot` writes a PNG, and
`--log-net-log` records every request the browser made, which is how "the page fetched nothing" is checked.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# the browser's own traffic (updates, time, accounts) is not the page's: these switch most of it off, and
# the rest is told apart by its network isolation key (a page opened from file:// has `file://`)
_QUIET = ("--disable-background-networking", "--disable-component-update", "--disable-sync",
          "--disable-default-apps", "--disable-domain-reliability", "--disable-client-side-phishing-detection",
          "--disable-features=Translate,OptimizationHints,MediaRouter,SpellCheck")


ROOT = Path(__file__).resolve().parent.parent
PENDING = ROOT / ".ci-chromium.pending"   # .ci/run installs Chromium in the background while pip runs
PENDING_WAIT_S = 300


def browser() -> str:
    waited = 0.0
    while PENDING.exists() and waited < PENDING_WAIT_S:
        time.sleep(1.0)
        waited += 1.0
    found = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if found is None:
        pytest.fail("no Chromium on PATH (looked for " + ", ".join(BROWSERS) + "): install it with "
                    "`apt-get install -y chromium` (.ci/run does); this test does not skip")
    return found


@dataclass
class Opened:
    """What one headless load of a page gave."""
    dom: str                  # the DOM after layout (`--dump-dom`), or "" for a screenshot run
    console: list[str]        # console messages, uncaught errors and net:: errors from the browser's log
    requests: list[str]       # URLs the page itself asked for (file:// excluded: the page)
    returncode: int
    stderr: str


def page_requests(netlog: Path) -> list[str]:
    """The URLs a page opened from file:// requested, from a NetLog file (`--log-net-log`)."""
    log = json.loads(netlog.read_text(encoding="utf-8"))
    kinds = {v: k for k, v in log["constants"]["logEventTypes"].items()}
    urls = []
    for ev in log["events"]:
        p = ev.get("params") or {}
        if kinds.get(ev["type"]) == "URL_REQUEST_START_JOB" and p.get("url") \
                and "file://" in str(p.get("network_isolation_key", "")) and not p["url"].startswith("file:"):
            urls.append(p["url"])
    return urls


def open_page(page: Path, tmp: Path, *args: str, dump_dom: bool = True) -> Opened:
    """Load `page` once in headless Chromium with every host name failing to resolve."""
    netlog = tmp / f"netlog-{page.stem}.json"
    cmd = [browser(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
           f"--user-data-dir={tmp / 'chromium-profile'}", "--enable-logging=stderr", "--v=0",
           "--host-resolver-rules=MAP * ~NOTFOUND", *_QUIET, f"--log-net-log={netlog}",
           *(["--dump-dom", "--virtual-time-budget=3000"] if dump_dom else []), *args, page.as_uri()]
    run = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=60, cwd=tmp)
    console = [ln for ln in run.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln or "net::ERR" in ln]
    requests = page_requests(netlog) if netlog.exists() else ["<no net log written>"]
    return Opened(run.stdout if dump_dom else "", console, requests, run.returncode, run.stderr)

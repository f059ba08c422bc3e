"""Big and moving inputs: the bulk path agrees with the line-by-line path, over-long lines are cut in
both, a growing file or a .gz still being written is read to its current end."""
from __future__ import annotations

import gzip
import threading
import time
from pathlib import Path

from logdoctor.parse.parse import parse_source
from logdoctor.read.ingest import TRUNCATION_MARK, read_lines
from logdoctor.run.fold import summarize, summarize_source

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = (ROOT / "fixtures" / "logs" / "v0.5early-tp2.log").read_text()


def serving_log(path: Path, n: int, long_line_at: int | None = None) -> None:
    lines = [LAUNCH.rstrip("\n")]
    for i in range(n):
        if long_line_at is not None and i == long_line_at:
            lines.append("[2025-12-02 11:00:00 TP0] " + "z" * (3 << 20))
        if i % 9 == 0:
            lines.append(f"[2025-12-02 11:{i // 600 % 60:02d}:{i // 10 % 60:02d} TP0] Prefill batch, #new-seq: 1, "
                         f"#new-token: {7 + i % 50}, #cached-token: 0, token usage: 0.{i % 97:02d}, #running-req: {i % 13}, "
                         f"#queue-req: {i % 17}, ")
        elif i % 11 == 0:
            lines.append(f'[2025-12-02 11:00:00] INFO:     127.0.0.1:{40000 + i % 999} - "POST /generate HTTP/1.1" 200 OK')
        else:
            lines.append(f"[2025-12-02 11:{i // 600 % 60:02d}:{i // 10 % 60:02d} TP0] Decode batch, #running-req: {i % 40}, "
                         f"#token: {1000 + i}, token usage: 0.{(i * 7) % 89:02d}, cuda graph: True, "
                         f"gen throughput (token/s): {1000 + (i * 37) % 2000:.2f}, #queue-req: {i % 23}, ")
        if i == n // 2:
            lines.append("[2025-12-02 11:30:00 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1, "
                         "#new_tokens_gained: 512, #new_token_ratio: 0.4000 -> 0.7000")
    path.write_text("\n".join(lines) + "\n")


def test_bulk_path_equals_line_by_line(tmp_path: Path) -> None:
    p = tmp_path / "serve.log"
    serving_log(p, 20_000)
    fast = summarize_source(str(p))
    slow = summarize(parse_source(p), str(p))
    assert fast.batches == slow.batches
    assert fast.batches["count"] > 15_000
    assert fast.line_count == slow.line_count == p.read_text().count("\n")
    assert fast.stages.keys() == slow.stages.keys() and fast.kinds.get("kv_retract") == 1


def test_overlong_line_inside_the_bulk_region_keeps_numbering(tmp_path: Path) -> None:
    p = tmp_path / "long.log"
    serving_log(p, 6_000, long_line_at=4_000)
    numbers = {}
    for ln in read_lines(p, lambda blob, last: None):
        if ln.truncated:
            numbers["long"] = ln.number
            assert ln.text.endswith(TRUNCATION_MARK) and len(ln.text) < (1 << 20) + 100
        elif "KV cache pool is full" in ln.text:
            numbers["retract"] = ln.number
    text = p.read_bytes().split(b"\n")
    assert text[numbers["long"] - 1].endswith(b"z" * 100)
    assert b"KV cache pool is full" in text[numbers["retract"] - 1]


def test_growing_file_is_read_to_its_current_end(tmp_path: Path) -> None:
    p = tmp_path / "growing.log"
    serving_log(p, 3_000)
    stop = threading.Event()

    def writer() -> None:
        with open(p, "a") as f:
            while not stop.is_set():
                f.write("[2025-12-02 12:00:00 TP0] Decode batch, #running-req: 1, #token: 1, token usage: 0.01, "
                        "cuda graph: True, gen throughput (token/s): 10.00, #queue-req: 0, \n")
                f.flush()
                time.sleep(0.0005)

    t = threading.Thread(target=writer)
    t.start()
    try:
        run = summarize_source(str(p))
    finally:
        stop.set()
        t.join()
    assert run.batches["count"] >= 2_700 and run.ready


def test_gzip_still_being_written_yields_what_is_there(tmp_path: Path) -> None:
    full = gzip.compress((LAUNCH * 3).encode())
    p = tmp_path / "partial.log.gz"
    p.write_bytes(full[: len(full) * 2 // 3])
    lines = list(read_lines(p))
    assert 10 < len(lines) < (LAUNCH * 3).count("\n")

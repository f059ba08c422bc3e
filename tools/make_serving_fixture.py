"""Write fixtures/html/serving/dp2-serving.log: a DP2 launch that reaches ready, then four minutes of serving.

The launch is the first 111 lines of fixtures/logs/v0.5new-dp2-tp4-ep4.log (a real v0.5 DP2 TP4 EP4
launch, through `The server is fired up and ready to roll!`); after it, each DP rank prints a `Decode
batch` line about every 1.8 s and a `Prefill batch` line when requests arrive, in that log's exact
forms (catalog c.1/c.2, v0.5.9+: no trailing comma), with uvicorn access lines between. Load ramps up,
overloads (the queue builds, `cuda graph: False` above bs 256), pauses for 30 s (no line at all: a gap
in the charts) and ramps down. Deterministic: run it again and the file is the same.

usage: python tools/make_serving_fixture.py
"""
from __future__ import annotations

import math
import random
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = ROOT / "fixtures" / "logs" / "v0.5new-dp2-tp4-ep4.log"
OUT = ROOT / "fixtures" / "html" / "serving" / "dp2-serving.log"
READY_LINE = 111
MAX_TOKENS = {0: 2185739, 1: 2185652}     # max_total_num_tokens of DP0 / DP1 (from the launch)
START = datetime(2026, 5, 1, 10, 0, 54)
SECONDS = 240
PAUSE = (130, 160)                        # seconds after START with no line at all


def stamp(t: datetime, dp: int | None) -> str:
    ms = f"{t.microsecond // 1000:03d}"
    base = t.strftime("%Y-%m-%d %H:%M:%S")
    return f"[{base}.{ms} DP{dp} TP0 EP0]" if dp is not None else f"[{base}]"


def load(s: float) -> float:
    """Requests wanted per DP rank at s seconds: a ramp to overload and back."""
    return 20 + 300 * math.sin(math.pi * min(s, SECONDS) / SECONDS) ** 2


def main() -> None:
    rng = random.Random(15)
    lines = LAUNCH.read_text(encoding="utf-8").splitlines()[:READY_LINE]
    assert lines[-1].endswith("The server is fired up and ready to roll!"), lines[-1]
    events: list[tuple[datetime, str]] = []
    for dp in (0, 1):
        s = 0.9 * dp
        running, tokens = 0, 0
        while s < SECONDS:
            if PAUSE[0] <= s < PAUSE[1]:
                s = PAUSE[1] + 0.9 * dp
                continue
            t = START + timedelta(seconds=s)
            wanted = int(load(s) * (0.9 + 0.2 * rng.random()))
            queue = max(0, wanted - 280)
            target = min(wanted, 280)
            if target > running:  # new requests: a prefill batch
                new = target - running
                new_tok = new * rng.randint(900, 1500)
                cached = rng.choice((0, 0, 8192, new_tok // 2))
                usage = (tokens + new_tok) / MAX_TOKENS[dp]
                events.append((t, f"{stamp(t, dp)} Prefill batch, #new-seq: {new}, #new-token: {new_tok}, "
                                  f"#cached-token: {cached}, token usage: {usage:.2f}, #running-req: {running}, "
                                  f"#queue-req: {queue}, #pending-token: 0, cuda graph: False, "
                                  f"input throughput (token/s): {new_tok / 0.9:.2f}"))
                events.append((t, f"{stamp(t, None)} INFO:     10.4.0.19:{41000 + rng.randint(0, 999)} - "
                                  f'"POST /v1/chat/completions HTTP/1.1" 200 OK'))
                running, tokens = target, tokens + new_tok
                t += timedelta(milliseconds=300)
            running = max(1, min(running, target + 2))
            tokens = max(running * 600, int(tokens * 0.97) + running * 200)
            per_req = 70 - 40 * running / 256
            tput = running * per_req * (0.95 + 0.1 * rng.random())
            events.append((t, f"{stamp(t, dp)} Decode batch, #running-req: {running}, #token: {tokens}, "
                              f"token usage: {tokens / MAX_TOKENS[dp]:.2f}, cuda graph: {running <= 256}, "
                              f"gen throughput (token/s): {tput:.2f}, #queue-req: {queue}"))
            s += 1.8
    events.sort(key=lambda e: e[0])
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines + [text for _, text in events]) + "\n", encoding="utf-8")
    print(f"{OUT.relative_to(ROOT)}: {len(lines) + len(events)} lines, {OUT.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()

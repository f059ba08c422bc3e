"""Graph memory from the capture lines (run/graph_memory.py, fed by run/rank_memory.py).

The expected figures are those the fixtures were written with (fixtures/memory/graphs/README.md); the
tolerances come from the fixtures' 2-decimal `avail_mem=` values, see each test.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from logdoctor.run.fold import summarize_source
from logdoctor.run.graph_memory import GraphMemory, graph_memory
from logdoctor.run.model import MAX_CAPTURE_SAMPLES

ROOT = Path(__file__).resolve().parent.parent
GRAPHS = ROOT / "fixtures" / "memory" / "graphs"
OOM = GRAPHS / "v0.5-capture-oom-tp4-graph11.log"
HEALTHY = GRAPHS / "v0.5-healthy-tp2-bar-lines.log"
OLD = GRAPHS / "v0.4.6-healthy-tp8-no-bs.log"
SPEC = GRAPHS / "v0.5.16-spec-tp2-capture-fragment.log"
V053_52 = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16)) + [512]


def _graphs(path: Path) -> GraphMemory:
    g = graph_memory(summarize_source(str(path)))
    assert g is not None
    return g


def test_capture_oom_with_cr_frames_names_where_it_died() -> None:
    raw = OOM.read_bytes()
    assert raw.count(b"\rCapturing batches (bs=") == 23   # the bar as tqdm wrote it: 23 redraws, one line
    g = _graphs(OOM)
    assert (g.failed_at_bs, g.graphs_done, g.graphs_total, g.finished) == (336, 11, 52, False)
    assert g.captured_bs == V053_52 and g.bs_source == "log" and g.rank == "TP0"
    # ingest keeps every frame of a capture bar (read/ingest._pieces): each redraw is a sample, as if the
    # collector had turned each CR into a line end
    assert len(g.samples) == 23 and g.sample_graphs[0] == 0 and g.sample_graphs[-1] == 11
    assert g.fit == "least squares over 11 samples after the first graph"
    assert g.per_graph_gib == pytest.approx(0.525, abs=0.002)
    assert (g.total_gib, g.total_source) == (6.27, "begin avail − last progress")
    assert g.estimate_gib(512) == g.full_capture_gib
    assert g.estimate_gib(0) == 0.0


def test_capture_oom_frames_one_per_line_fit_the_slope_apart_from_the_first_graph(tmp_path: Path) -> None:
    # the same log as a collector that turns each CR into a line end saves it: every frame is a sample
    lf = tmp_path / "oom-lf.log"
    lf.write_bytes(OOM.read_bytes().replace(b"\r", b"\n"))
    g = _graphs(lf)
    assert len(g.samples) == 23 and g.sample_graphs[0] == 0 and g.sample_graphs[-1] == 11
    # written with 0.55 … 0.50 GiB for graphs 2–11 (mean 0.525); 2-decimal rounding moves an 11-point
    # slope by at most 0.005·Σ|x−x̄|/Σ(x−x̄)² = 0.005·30/110 ≈ 0.0014
    assert g.per_graph_gib == pytest.approx(0.525, abs=0.002)
    assert g.fit == "least squares over 11 samples after the first graph"
    # the first graph cost 1.02 GiB (it allocates the pool); the line through a slowly falling cost
    # puts it within 0.05 of that
    assert g.first_graph_gib == pytest.approx(1.02, abs=0.05)
    assert 0.45 < g.pool_gib < 0.6
    assert (g.failed_at_bs, g.graphs_done, g.graphs_total) == (336, 11, 52)
    assert g.total_gib == 6.27


def test_healthy_capture_total_from_the_end_line() -> None:
    g = _graphs(HEALTHY)
    assert g.finished and g.failed_at_bs is None and (g.graphs_done, g.graphs_total) == (36, 36)
    assert g.captured_bs == [1, 2, 4, 8, 12] + list(range(16, 257, 8)) and g.bs_source == "log"
    assert (g.total_gib, g.total_source) == (0.82, "capture end mem usage")
    assert g.ranks_total_gib == {"TP0": 0.82, "TP1": 0.82}
    assert len(g.samples) == 72   # 73 frames, the first bare bar (no description) is not a sample
    # written as 12.20 − 0.0154·(i − 1): 35 points to 2 decimals move the slope by < 0.0002; the
    # reported slope has 4 decimals
    assert g.per_graph_gib == pytest.approx(0.0154, abs=0.0003)
    assert g.first_graph_gib == pytest.approx(0.28, abs=0.01)
    assert g.estimate_gib(256) == 0.82
    assert g.estimate_gib(128) == pytest.approx(0.82 - 0.0154 * 16, abs=0.01)
    # above the largest captured size the era's list adds 272 … 496 step 16 and 512: 16 graphs
    assert g.estimate_gib(512) == pytest.approx(0.82 + 0.0154 * 16, abs=0.01)
    # any number a what-if names is answered from a bounded list (no list past logdoctor's MAX_BS)
    assert g.estimate_gib(10**15) == g.estimate_gib(9000) and g.estimate_gib(-5) == 0.0


def test_older_bar_without_bs_uses_the_era_list() -> None:
    g = _graphs(OLD)
    assert g.bs_source == "era default (v0.4.3-v0.5.8)"
    assert g.captured_bs == [1, 2, 4, 8] + list(range(16, 161, 8))   # 23 sizes, as the bar counts
    assert len(g.samples) > 20 and g.samples[-1] == (None, 11.62)   # every redraw kept, the last one 11.62
    assert g.fit is not None and g.fit.startswith("least squares")
    assert (g.total_gib, g.total_source, g.finished) == (1.21, "capture end mem usage", True)
    assert (g.failed_at_bs, g.graphs_done, g.graphs_total) == (None, 23, 23)
    # 13 of 23 sizes ≤ 80: the total less 10 graphs at the slope, never below 13 graphs at the slope
    slope = g.per_graph_gib
    assert g.estimate_gib(80) == pytest.approx(max(1.21 - slope * 10, slope * 13), abs=0.005)


def test_a_bar_redrawn_with_cr_gives_what_one_frame_per_line_gives(tmp_path: Path) -> None:
    for log in (OOM, OLD):
        lf = tmp_path / log.name
        lf.write_bytes(log.read_bytes().replace(b"\r", b"\n"))
        a, b = _graphs(log).to_dict(), _graphs(lf).to_dict()
        assert a == b, log.name

def test_decode_graphs_apart_from_prefill_and_draft_graphs() -> None:
    g = _graphs(SPEC)
    assert g.captured_bs == list(range(1, 9)) and g.bs_source == "log"
    # target verify graphs only: the draft model's bar (18.68 → 18.34) is not sampled
    assert len(g.samples) == 16 and min(a for _, a in g.samples) == 19.14
    assert g.per_graph_gib == pytest.approx(0.06, abs=0.001)
    assert g.first_graph_gib == pytest.approx(0.48, abs=0.01)
    assert (g.total_gib, g.finished) == (0.92, True)
    assert g.prefill_gib == 0.36 and g.prefill_sizes == [256, 512, 1024, 2048]
    assert g.to_dict()["prefill_gib"] == 0.36


@pytest.mark.parametrize("name", ["logs/v0.4-kv-not-enough-tp8.log", "memory/fragment-no-args.log"])
def test_no_capture_no_graph_memory(name: str) -> None:
    assert graph_memory(summarize_source(str(ROOT / "fixtures" / name))) is None


def test_samples_are_bounded_and_keep_the_last_frame(tmp_path: Path) -> None:
    n = 3 * MAX_CAPTURE_SAMPLES
    frames = [f"Capturing batches (bs={n - i} avail_mem={80 - i * 0.02:.2f} GB): {100 * i // n:3d}%|"
              f"          | {i}/{n} [00:00<00:10,  4.88it/s]" for i in range(n)]
    log = tmp_path / "long.log"
    log.write_text("[2025-12-09 16:20:40 TP0] Capture cuda graph begin. This can take up to several minutes. "
                   "avail mem=80.00 GB\n" + "\n".join(frames) + "\n")
    run = summarize_source(str(log))
    gc = run.ranks["TP0"].graph_capture
    assert gc is not None and len(gc.samples) == MAX_CAPTURE_SAMPLES
    assert gc.samples_dropped == n - MAX_CAPTURE_SAMPLES and gc.samples[-1][0] == 1
    g = graph_memory(run)
    assert g is not None and (g.failed_at_bs, g.graphs_done, g.graphs_total) == (1, n - 1, n)


def test_to_dict_is_plain_json() -> None:
    import json
    d = _graphs(OOM).to_dict()
    assert json.loads(json.dumps(d)) == d
    assert set(d) >= {"captured_bs", "bs_source", "samples", "per_graph_gib", "total_gib", "failed_at_bs",
                      "graphs_done", "graphs_total"}


def test_capture_that_hangs_names_the_size_from_the_list() -> None:
    # v0.4.6.post2 bar without `bs=` stopping at 1/23 (an all-reduce hangs): the list says bs 152 was next
    g = _graphs(ROOT / "fixtures" / "logs" / "v0.4-nccl-watchdog-tp2.log")
    assert (g.failed_at_bs, g.graphs_done, g.graphs_total, g.finished) == (152, 1, 23, False)


def test_no_progress_shares_the_end_mem_usage_over_the_sizes(tmp_path: Path) -> None:
    # the older fixture without its bar (a log that kept stdout only): the end line alone
    text = OLD.read_bytes().decode("utf-8")
    bare = tmp_path / "no-bar.log"
    bare.write_text("\n".join(ln for ln in text.split("\n") if "Capturing batches" not in ln))
    g = _graphs(bare)
    assert g.samples == [] and g.total_gib == 1.21 and len(g.captured_bs) == 23
    assert g.per_graph_gib == pytest.approx(1.21 / 23, abs=1e-4) and g.fit is not None and "no progress" in g.fit
    assert g.estimate_gib(80) == pytest.approx(1.21 * 13 / 23, abs=0.01)

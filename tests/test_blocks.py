"""Multi-line blocks become single events with their fields (fixtures/blocks/, exact real formats)."""
from __future__ import annotations

from pathlib import Path

from logdoctor.parse.parse import parse_source, parse_text

B = Path(__file__).resolve().parent.parent / "fixtures" / "blocks"


def kinds(name: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for ev in parse_source(B / name):
        out.setdefault(ev.kind, []).append(ev)
    return out


def test_traceback_chain_is_one_event_with_its_chain() -> None:
    k = kinds("traceback-chain.txt")
    tb = k["traceback"][0]
    assert tb.fields["chain"] and tb.fields["frames"] and tb.end_line > tb.line
    assert tb.fields["exception"] == "RuntimeError"
    assert k["nccl_error"][0].fields["error"].startswith("unhandled system error")


def test_torch_oom_new_and_old_wording() -> None:
    new = kinds("torch-oom-new.txt")["torch_oom"][0].fields
    assert new["tried_gib"] == 1.25 and new["total_gib"] == 23.52 and new["gpu"] == 0
    assert {"free_gib", "allocated_gib", "reserved_gib"} <= set(new)
    old = kinds("torch-oom-old.txt")["torch_oom"][0].fields
    assert old["tried_gib"] == round(20 / 1024, 4) and old["total_gib"] == 23.65 and old["reserved_gib"] == 23.12


def test_cuda_error_gets_its_name() -> None:
    ce = kinds("cuda-error.txt")["cuda_error"][0].fields
    assert ce["message"] == "an illegal memory access was encountered"
    assert ce["cuda_error_name"] == "cudaErrorIllegalAddress"


def test_nccl_lines_and_c10d_watchdog() -> None:
    k = kinds("nccl-warn.txt")
    assert any(e.fields["level"] == "WARN" for e in k["nccl_log"]) and k["nccl_version"]
    wd = kinds("c10d-watchdog.txt")["nccl_watchdog_timeout"][0].fields
    assert wd["op_type"] == "ALLREDUCE" and wd["timeout_ms"] == 600000 and wd["elapsed_ms"] >= wd["timeout_ms"]


def test_faulthandler_killed_and_possible_solutions() -> None:
    sig = kinds("faulthandler-segv.txt")["fatal_signal"][0]
    assert sig.fields["signal"] == "Segmentation fault" and sig.fields["frames"] and sig.end_line > sig.line
    assert kinds("killed.txt")["killed"]
    ps = kinds("possible-solutions.txt")["possible_solutions"][0]
    assert ps.fields["items"][0].startswith("set --mem-fraction-static to a smaller value")
    assert len(ps.fields["items"]) == 4


def test_torchrun_summary_names_the_root_cause_rank() -> None:
    text = (B.parent / "logs" / "torchrun-child-failed.txt").read_text()
    ev = [e for e in parse_text(text) if e.kind == "child_failed_error"][0]
    assert ev.fields["root_cause_rank"] is not None and ev.fields["exit_code"] is not None


# ------------------------------------------------------------------------------------------------
# NCCL_DEBUG=INFO chatter takes a short path (parse.EventParser.nccl_chatter, its head matched once and
# memoised): it must give exactly the event the whole path gives, and leave every other line to it

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from logdoctor.parse.parse import EventParser  # noqa: E402
from logdoctor.read.ingest import Line  # noqa: E402

CHATTER_LINES = [
    "gpu-node-07:2214:2214 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
    "gpu-node-07:2214:2214 [0] NCCL INFO  two spaces before the message",
    "gpu-node-07:2214:2214 [0] NCCL INFO ",
    "h:1:2 [7]   init.cc:973 NCCL INFO comm 0x55 rank 7 nRanks 8 - Init COMPLETE",
    "h:1:2 [7] a b c d NCCL INFO four location tokens",
    "h:1:2 [7] a b c d e NCCL INFO five: more than the prefix takes",
    "h:1:2 [7] NCCL WARN earlier NCCL INFO later",           # the first level is WARN: not chatter
    "h:1:2 [7] x NVSHMEM INFO y NCCL INFO z",                 # NVSHMEM first
    "h:1:2 [3] NCCL INFO NCCL version 2.27.3+cuda12.9",      # a message the grammar takes
    "h:1:2 [3] NCCL INFO [Service thread] Watchdog caught collective operation timeout",
    "not a head NCCL INFO at all",
    "h:1:2 [99999999] NCCL INFO rank too long",
    "h.example-1:1:2 [3]\t NCCL INFO a tab and a space before the library",
    "h:1:2 [3] NCCL INFO " + "x" * 9000,                      # over the text limit
]


def _same_as_the_whole_path(text: str) -> None:
    ln = Line(41, text)
    quick = EventParser("s").nccl_chatter(ln)
    whole = EventParser("s").dispatch(ln)
    if quick is not None:
        assert [quick] == whole, text


def test_nccl_chatter_is_the_whole_paths_event() -> None:
    taken = 0
    parser = EventParser("s")
    for text in CHATTER_LINES * 2:  # twice: the memoised heads answer the same
        _same_as_the_whole_path(text)
        taken += parser.nccl_chatter(Line(1, text)) is not None
    assert taken == 2 * 6  # the plain ones: not five location tokens, WARN first, grammar lines, watchdogs...


_head_word = st.text(alphabet="ab.-_1[]:\t ", min_size=0, max_size=8)


@settings(max_examples=300, deadline=None)
@given(host=st.text(alphabet="gh.-1", min_size=0, max_size=6), rank=st.integers(0, 10**7),
       loc=st.lists(_head_word, max_size=6), level=st.sampled_from(["INFO", "WARN", "TRACE"]),
       lib=st.sampled_from(["NCCL", "NVSHMEM"]), body=st.text(max_size=40))
def test_nccl_chatter_agrees_with_the_whole_path_on_any_head(host: str, rank: int, loc: list[str], level: str,
                                                               lib: str, body: str) -> None:
    text = f"{host}:12:34 [{rank}] {' '.join(loc)} {lib} {level} {body} NCCL INFO {body}"
    _same_as_the_whole_path(text.replace("\n", " "))

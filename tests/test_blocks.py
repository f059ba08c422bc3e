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

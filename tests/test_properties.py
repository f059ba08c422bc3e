"""Parse, summary and explain never raise, whatever the bytes."""
from __future__ import annotations

import io

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logdoctor.diagnosis.ranking import diagnose
from logdoctor.diagnosis.rules import builtin_rules
from logdoctor.parse.parse import parse_lines
from logdoctor.read.ingest import clean_lines
from logdoctor.run.fold import summarize

FRAGMENTS = [
    "[2025-03-01 10:00:00 TP0] ", "[14:03:22 TP1] ", "[2026-01-01 00:00:00.123 DP0 TP3 EP3] ", "Traceback (most recent call last):\n",
    '  File "x.py", line 3, in f\n', "RuntimeError: CUDA error: out of memory\n", "Load weight end. ", "avail mem=",
    "KV Cache is allocated. #tokens: ", "Decode batch, #running-req: ", "gen throughput (token/s): ", "\r", "\x1b[31m",
    "\x00", "During handling of the above exception, another exception occurred:\n", "Capture cuda graph failed: ",
    "Possible solutions:\n1. x\n", "host:1:2 [0] NCCL WARN x\n", "[rank0]:[E1130 01:45:25.1 P.cpp:1] ", "sglang-1  | ",
    "> ", "Fatal Python error: Segmentation fault\n", "server_args=ServerArgs(model_path='a', tp_size=", "=", ",", "\n",
    "The server is fired up and ready to roll!\n", "Not enough memory. Please try to increase --mem-fraction-static.",
]

log_text = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=40)), max_size=60).map("".join)


def run_all(data: bytes) -> None:
    events = list(parse_lines(clean_lines(io.BytesIO(data)), "<fuzz>"))
    run = summarize(iter(events), "<fuzz>")
    run.to_dict()
    report = diagnose(iter(events), list(builtin_rules()), "<fuzz>")
    report.to_dict()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log_text)
def test_never_raises_on_text(text: str) -> None:
    run_all(text.encode("utf-8", "surrogatepass"))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2000))
def test_never_raises_on_bytes(data: bytes) -> None:
    run_all(data)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=40))
def test_line_numbers_are_in_range_and_ordered(parts: list[str]) -> None:
    text = "".join(parts)
    n_lines = text.count("\n") + 1
    events = list(parse_lines(clean_lines(io.BytesIO(text.encode())), "<fuzz>"))
    for ev in events:
        assert 1 <= ev.line <= n_lines
        assert ev.end_line is None or ev.line <= ev.end_line <= n_lines


@settings(max_examples=400, deadline=None)
@given(st.lists(st.text(alphabet=st.sampled_from("ΣσςΑαΟοΔδİIiı\u0301\u00adaA '.-\t") | st.characters(), max_size=12),
                max_size=8))
def test_texts_joined_by_newlines_lower_as_each_text_does(texts: list[str]) -> None:
    # engine.EventIndex folds a kind's texts once, joined: each must fold as it does alone (final sigma too)
    from logdoctor.diagnosis.literals import fold_case
    texts = [t.replace("\n", " ") for t in texts]
    assert "\n".join(texts).lower() == "\n".join(t.lower() for t in texts)
    assert fold_case("\n".join(texts)) == "\n".join(fold_case(t) for t in texts)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400) | st.lists(st.sampled_from([b"a", b" ", b"\n", b"\t", b"\x1b", b"\r", b"\x00", b"\x07",
                                                          b"\x1f", b"\xff", b"\xe2\x82", "é✓".encode()]),
                                          max_size=80).map(b"".join))
def test_the_non_text_share_counts_each_character_as_the_definition_does(head: bytes) -> None:
    """sniff counts the characters a log does not carry with one str.count each: the share is the one a test
    of each character gives (the replacement character, and controls other than \\n \\r \\t ESC)."""
    from logdoctor.read.sniff import non_text_ratio
    text = head.decode("utf-8", errors="replace")
    bad = sum(1 for c in text if c == "\ufffd" or (ord(c) < 32 and c not in "\n\r\t\x1b"))
    assert non_text_ratio(head) == (bad / max(len(text), 1) if head else 0.0)

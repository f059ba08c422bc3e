"""The grammar's tolerance: fields that drift between versions never break a line's parsing."""
from __future__ import annotations

from pathlib import Path

from logdoctor.parse.grammar import parse_batch, parse_message

ROOT = Path(__file__).resolve().parent.parent


def test_unknown_new_fields_in_memory_lines_are_kept_not_fatal() -> None:
    kind, f = parse_message("Load weight end. elapsed=3.10 s, type=LlamaForCausalLM, future_knob=42, "
                            "avail mem=70.98 GB, mem usage=7.63 GB, shiny new thing=yes.")
    assert kind == "weight_load_end"
    assert f["avail_gib"] == 70.98 and f["weight_gib"] == 7.63 and f["future_knob"] == 42
    kind, f = parse_message("KV Cache is allocated. dtype: torch.float8_e4m3fn, #tokens: 1000, K size: 1.00 GB, "
                            "V size: 1.00 GB, page size: 64")
    assert kind == "kv_cache_allocated" and f["kv_gib"] == 2.0 and f["tokens"] == 1000 and f["page_size"] == 64


def test_batch_lines_of_every_shape_and_unknown_keys() -> None:
    shapes = [
        "Decode batch. #running-req: 2, #token: 4078, token usage: 0.00, gen throughput (token/s): 447.31, #queue-req: 0",
        "Decode batch [123], #running-req: 28, #token: 22920, token usage: 0.13, cuda graph: True, "
        "gen throughput (token/s): 1086.59, #queue-req: 0, ",
        "Decode batch, #running-req: 3, #full token: 10, full token usage: 0.10, #swa token: 5, swa token usage: 0.20, "
        "accept len: 2.10, accept rate: 0.70, npu graph: False, gen throughput (token/s): 55.00, #queue-req: 1, "
        "est. decode TFLOPS/s (per GPU): 1.20, fwd occupancy: 97.50%",
        "#running-req: 1, #token: 10, token usage: 0.01, #queue-req: 0",
    ]
    for line in shapes:
        kind, f = parse_batch(line)
        assert kind == "decode_batch" and f["running_req"] >= 1 and "queue_req" in f
    kind, f = parse_batch("Prefill batch(mixed #running-req: 4). #new-seq: 1, #new-token: 9, #cached-token: 0, "
                          "cache hit rate: 0.00%, #queue-req: 0")
    assert kind == "prefill_batch" and f["mixed_running_req"] == 4 and f["new_token"] == 9
    assert parse_batch("Decode batches are nice") is None


def test_lines_that_are_not_ours_are_not_forced_into_a_kind() -> None:
    for line in ("Load the weights now", "KV cache warmup done", "Memory pool stats follow", "Killed by signal 9"):
        assert parse_message(line) is None, line


def test_anchor_prefilter_by_first_character_agrees_with_one_alternation() -> None:
    """The anchors grouped by first character accept exactly the bodies one alternation of them all accepts."""
    import re as std_re

    from hypothesis import given, settings
    from hypothesis import strategies as st

    from logdoctor.parse.grammar import _prefilter
    from logdoctor.read.prefix import split_prefix
    _, anchors = _prefilter()
    whole = std_re.compile("|".join(f"(?:{p})" for p in anchors.patterns))
    bodies = 0
    for path in sorted((ROOT / "fixtures").rglob("*.log")):
        for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
            body = split_prefix(raw).body
            for b in (raw, body, body[1:]):
                assert anchors.match(b) == bool(whole.match(b)), b
                bodies += 1
    assert bodies > 20_000
    starts = sorted(anchors.named) + ["", " ", "x", "é"]
    words = ["Capture cuda graph bs", "NCCL version 2.21", "Load weight end.", " leak detected!", " watchdog timeout (",
             "KV Cache is allocated.", " at 3 is not available in", "Waiting for application startup.", "[Rank 0]",
             "TorchSymmMemCommunicator:", "Scheduler hit an exception", "(", "\\", "[", "?"]

    @settings(max_examples=400, deadline=None)
    @given(st.sampled_from(starts), st.lists(st.sampled_from(words) | st.text(max_size=6), max_size=4))
    def agree(start: str, parts: list[str]) -> None:
        b = start + "".join(parts)
        assert anchors.match(b) == bool(whole.match(b)), b
    agree()


def test_the_anchor_prefilter_answers_as_one_alternation_of_every_anchor() -> None:
    """AnchorPatterns groups the anchors by first character and skips an anchor whose needed literal a body
    lacks: on every line of every fixture log (and bodies made to reach the lookahead anchors) it answers as
    trying all of them would."""
    import re
    from pathlib import Path

    from logdoctor.parse.grammar import _prefilter
    from logdoctor.read.prefix import split_prefix
    _, anchors = _prefilter()
    every = re.compile("|".join(f"(?:{p})" for p in anchors.patterns))
    root = Path(__file__).resolve().parent.parent / "fixtures"
    bodies = {split_prefix(line).body for path in root.rglob("*.log")
              for line in path.read_text(encoding="utf-8", errors="replace").splitlines()}
    bodies |= {"Memory leak detected!", "Scheduler watchdog timeout (300 s)", "TP0 KV Cache is allocated.",
               "foo at 3 is not available in bar", "Channel 00/24 : 0 1 2 3", "hit an exception: x",
               "MyWorker hit an exception: boom", "TorchSymmMemCommunicator: off", "", "C", " at  leak detected!"}
    assert len(bodies) > 1000
    differing = [b for b in bodies if anchors.match(b) != (every.match(b) is not None)]
    assert differing == []
    assert sum(anchors.match(b) for b in bodies) > 100


def test_required_literal_finds_only_what_every_match_holds() -> None:
    from logdoctor.parse.grammar import required_literal
    assert required_literal(r"[\w ]{1,128}(?= leak detected!)") == " leak detected!"
    assert required_literal(r"\w{1,128}(?= at \d+ is not available in)") == " at "
    assert required_literal(r"(Torch)?SymmMemCommunicator:") == "SymmMemCommunicator:"
    assert required_literal(r"x{2,3}yzw") == "yzw"
    assert required_literal(r"abcd?e") == "abc"         # `d` may be absent
    assert required_literal(r"abd?e") is None            # ... and `ab` is too short to be worth a test
    for pattern in (r"a|bcdef", r"x(?=abc|def)", r"(?i)abcdef", r"(?i:abcdef)", r"[abc]{3}"):
        assert required_literal(pattern) is None, pattern


def test_may_parse_is_false_only_for_bodies_the_grammar_does_not_take() -> None:
    """The NCCL chatter path asks may_parse before parse_message: a body it turns away must be one
    parse_message returns None for, on every fixture line, and it must turn most chatter away."""
    from logdoctor.parse.grammar import may_parse
    from logdoctor.read.prefix import split_prefix
    bodies = {split_prefix(line).body for path in (ROOT / "fixtures").rglob("*.log")
              for line in path.read_text(encoding="utf-8", errors="replace").splitlines()}
    bodies |= {"NCCL version 2.21.5+cuda12.4", "Channel 00/24 : 0 1 2 3", "Using network IB", ""}
    taken = [b for b in bodies if parse_message(b) is not None]
    assert len(taken) > 100
    assert all(may_parse(b) for b in taken)
    assert not may_parse("Channel 00/24 : 0 1 2 3") and may_parse("NCCL version 2.21.5+cuda12.4")

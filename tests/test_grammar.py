"""The grammar's tolerance: fields that drift between versions never break a line's parsing."""
from __future__ import annotations

from logdoctor.parse.grammar import parse_batch, parse_message


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

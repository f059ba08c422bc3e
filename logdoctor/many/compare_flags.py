"""Which server args differ between two runs, those that matter for memory and the launch first.

A flag that matters has a line in `_FLAGS` (what it is, the launch stages it acts on, why); the flags that
act on the stage where the runs part come first, then the table's order (its relevance). Per-launch values
(ports, seeds) are not compared; args that only one side prints are counted in one line, not listed as
hundreds of rows.
"""
from __future__ import annotations

from typing import Any

from logdoctor.records import dataclass
from logdoctor.run.model import STAGES

# per-launch values that differ between any two launches and say nothing about the outcome
_IGNORED_ARGS = {"random_seed", "port", "host", "nccl_port", "dist_init_addr", "served_model_name", "file_storage_path",
                 "download_dir", "log_level", "log_level_http", "api_key", "crash_dump_folder", "tokenizer_path"}
_ALL = frozenset(STAGES) | {"runtime"}
# (arg, what it is, the stages it acts on, why it matters for memory or the launch); the order is relevance
_FLAGS: list[tuple[str, str, frozenset[str], str]] = [
    ("disable_custom_all_reduce", "custom all-reduce", frozenset({"init", "graph_capture", "runtime"}),
     "allocates its buffers at distributed init and runs inside the captured graphs"),
    ("cuda_graph_max_bs", "CUDA graph sizes", frozenset({"graph_capture"}), "the largest captured batch sets the graph memory"),
    ("cuda_graph_bs", "CUDA graph sizes", frozenset({"graph_capture"}), "the captured batch sizes set the graph memory"),
    ("disable_cuda_graph", "CUDA graphs", frozenset({"graph_capture"}), "without graphs no graph memory is taken"),
    ("mem_fraction_static", "static memory fraction", frozenset({"kv_pool", "graph_capture", "runtime"}),
     "splits the free memory between the KV cache and the reserve for graphs and activations"),
    ("attention_backend", "attention backend", frozenset({"kv_pool", "graph_capture", "runtime"}),
     "backends differ in workspace and graph buffers"),
    ("decode_attention_backend", "attention backend", frozenset({"graph_capture", "runtime"}), "decode workspace and graph buffers"),
    ("prefill_attention_backend", "attention backend", frozenset({"runtime"}), "prefill workspace"),
    ("chunked_prefill_size", "prefill chunk", frozenset({"runtime", "graph_capture"}), "sets the prefill activations"),
    ("tp_size", "parallelism", _ALL, "weights and KV per rank scale with it"),
    ("dp_size", "parallelism", _ALL, "replicas and their memory per rank"),
    ("ep_size", "parallelism", _ALL, "experts per rank"),
    ("pp_size", "parallelism", _ALL, "layers per rank"),
    ("enable_dp_attention", "parallelism", _ALL, "attention replicated per DP rank; larger graph and activation terms"),
    ("quantization", "quantization", frozenset({"weights", "kv_pool"}), "the weights' size per rank"),
    ("kv_cache_dtype", "KV cache dtype", frozenset({"kv_pool"}), "bytes per KV token"),
    ("dtype", "dtype", frozenset({"weights", "kv_pool"}), "weights and KV bytes"),
    ("model_path", "model", _ALL, "a different model"),
    ("max_running_requests", "request limit", frozenset({"graph_capture", "runtime"}), "request slots and the graph batch cap"),
    ("max_total_tokens", "KV cap", frozenset({"kv_pool"}), "caps the KV pool"),
    ("max_prefill_tokens", "prefill cap", frozenset({"runtime"}), "prefill batch size"),
    ("context_length", "context length", frozenset({"kv_pool", "runtime"}), "the request-to-token pool"),
    ("enable_torch_compile", "torch.compile", frozenset({"graph_capture"}), "compiled graphs capture differently"),
    ("torch_compile_max_bs", "torch.compile", frozenset({"graph_capture"}), "compiled batch sizes"),
    ("enable_piecewise_cuda_graph", "piecewise graphs", frozenset({"graph_capture"}), "prefill graphs take memory too"),
    ("piecewise_cuda_graph_max_tokens", "piecewise graphs", frozenset({"graph_capture"}), "prefill graph sizes"),
    ("enable_symm_mem", "symmetric memory", frozenset({"init"}), "a pre-allocated pool at distributed init"),
    ("enable_torch_symm_mem", "symmetric memory", frozenset({"init"}), "symmetric-memory all-reduce buffers"),
    ("enable_mscclpp", "mscclpp", frozenset({"init", "graph_capture"}), "its buffers at distributed init"),
    ("enable_nccl_nvls", "NCCL NVLS", frozenset({"init"}), "NCCL buffers"),
    ("speculative_algorithm", "speculative decoding", _ALL, "a draft model, its KV and its graphs"),
    ("speculative_num_draft_tokens", "speculative decoding", frozenset({"graph_capture", "runtime"}), "tokens per graph batch"),
    ("moe_a2a_backend", "MoE all-to-all", frozenset({"init", "runtime"}), "DeepEP buffers"),
    ("deepep_mode", "MoE all-to-all", frozenset({"init", "runtime"}), "DeepEP buffers"),
    ("enable_two_batch_overlap", "two-batch overlap", frozenset({"graph_capture", "runtime"}), "two batches' activations"),
    ("cpu_offload_gb", "CPU offload", frozenset({"weights"}), "weights kept on the host"),
    ("page_size", "KV page size", frozenset({"kv_pool"}), "KV pool rounding"),
    ("enable_hierarchical_cache", "hierarchical cache", frozenset({"kv_pool"}), "host KV memory"),
    ("disable_overlap_schedule", "overlap scheduler", frozenset({"runtime"}), "a second batch in flight"),
]
_FLAG_INDEX = {name: i for i, (name, *_rest) in enumerate(_FLAGS)}


@dataclass
class FlagDiff:
    arg: str
    a: Any
    b: Any
    area: str | None = None     # what the flag is, for the flags that matter for memory / the launch
    why: str | None = None
    acts_where_they_part: bool = False


def diff_args(sa: dict[str, Any], sb: dict[str, Any], stage: str | None
              ) -> tuple[list[FlagDiff], list[FlagDiff], dict[str, Any], list[str]]:
    """(flags that matter, by relevance; other differing args; args on one side only; per-launch args not
    compared) of two runs' server args. `stage`: where the runs part (its flags come first)."""
    flags: list[FlagDiff] = []
    others: list[FlagDiff] = []
    not_compared: list[str] = []
    for k in sorted(set(sa) & set(sb)):
        if sa[k] == sb[k]:
            continue
        if k in _IGNORED_ARGS:
            not_compared.append(k)
        elif k in _FLAG_INDEX:
            _, area, stages, why = _FLAGS[_FLAG_INDEX[k]]
            flags.append(FlagDiff(k, sa[k], sb[k], area, why, stage in stages if stage else False))
        else:
            others.append(FlagDiff(k, sa[k], sb[k]))
    flags.sort(key=lambda f: (not f.acts_where_they_part, _FLAG_INDEX[f.arg]))
    only_a, only_b = sorted(set(sa) - set(sb)), sorted(set(sb) - set(sa))
    no_line = "B" if sa and not sb else ("A" if sb and not sa else None)
    one_sided = {"only_a": only_a, "only_b": only_b, "summary": _one_sided_text(only_a, only_b, sa, sb),
                 "no_server_args_line": no_line}
    return flags, others, one_sided, not_compared


def _one_sided_text(only_a: list[str], only_b: list[str], sa: dict[str, Any], sb: dict[str, Any]) -> str | None:
    if not only_a and not only_b:
        return None

    def part(names: list[str], side: str, other: str, other_args: dict[str, Any]) -> str:
        why = (f"{other} is a fragment without a server_args line" if not other_args else
               f"{other}'s SGLang prints no such field")
        shown = f": {', '.join(names)}" if len(names) <= 4 else ""
        return f"{len(names)} arg{'s' if len(names) != 1 else ''} only in {side}'s server_args ({why}){shown}"

    parts = []
    if only_a:
        parts.append(part(only_a, "A", "B", sb))
    if only_b:
        parts.append(part(only_b, "B", "A", sa))
    return "; ".join(parts)


__all__ = ["FlagDiff", "diff_args"]

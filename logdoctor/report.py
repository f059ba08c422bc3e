"""Formatters: one model in, text / json / markdown out."""
from __future__ import annotations

from .summary import STAGES, Run


def _gib(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def summary_text(run: Run) -> str:
    out: list[str] = []
    sa = run.server_args
    model = sa.get("model_path") or "?"
    out.append(f"log      {run.source}")
    out.append(f"model    {model}")
    par = ", ".join(f"{n}={v}" for n, v in (("tp", run.tp_size), ("dp", run.dp_size), ("pp", run.pp_size),
                                            ("ep", run.ep_size)) if v)
    out.append(f"sglang   {run.version or '?'} (era {run.era or '?'}){'   ' + par if par else ''}")
    if sa:
        keys = ("mem_fraction_static", "cuda_graph_max_bs", "chunked_prefill_size", "max_running_requests",
                "context_length", "attention_backend", "disable_cuda_graph", "enable_torch_compile",
                "disable_custom_all_reduce", "kv_cache_dtype", "quantization")
        out.append("args     " + ", ".join(f"{k}={sa[k]}" for k in keys if k in sa))
    out.append("")
    out.append("stages")
    for name in STAGES:
        st = run.stages.get(name)
        if st is None:
            out.append(f"  {name:<14} not reached")
        else:
            dur = f"{st.duration_s:.1f} s" if st.duration_s is not None else ""
            out.append(f"  {name:<14} line {st.first_line:<6} {st.first_ts or '':<24} {dur}")
    out.append(f"  last stage reached: {run.last_stage or 'none'}{'  (ready)' if run.ready else ''}")
    ranks = run.rank_list()
    if ranks:
        out.append("")
        out.append("memory per rank (GiB)   free-before  free-after  weights  kv-tokens   kv     pool-end  graphs  ready-free")
        for r in ranks:
            out.append(f"  {r.rank:<20} {_gib(r.free_before_weights_gib):>11} {_gib(r.free_after_weights_gib):>11}"
                       f" {_gib(r.weights_gib):>8} {r.kv_tokens if r.kv_tokens is not None else '-':>10}"
                       f" {_gib(r.kv_gib):>6} {_gib(r.pool_end_free_gib):>9} {_gib(r.graph_gib):>7}"
                       f" {_gib(r.available_gpu_mem_gib):>10}")
    b = run.batches
    if b.get("count"):
        out.append("")
        out.append(f"batches  {b['decode_count']} decode, {b['prefill_count']} prefill; gen throughput p10/median/p90 "
                   f"{b['gen_throughput_p10']}/{b['gen_throughput_median']}/{b['gen_throughput_p90']} tok/s; "
                   f"peak token usage {b['peak_token_usage']}, peak queue {b['peak_queue_req']}")
    if run.failures:
        out.append("")
        out.append(f"failures ({len(run.failures)})")
        for f in run.failures[:30]:
            rank = f.ranks or ("" if f.rank is None else f"rank{f.rank}")
            out.append(f"  line {f.line:<6} {rank:<12} {f.kind:<26} {f.text[:100]}")
    out.append("")
    out.append(f"{run.line_count} lines, {run.event_count} events, {run.unparsed_count} unparsed")
    return "\n".join(out)

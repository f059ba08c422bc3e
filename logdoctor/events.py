"""Typed events: what one meaningful log line (or multi-line block) says.

Every event has the same envelope (`line`, `rank`, `ts`, `kind`, `fields`); the kind decides which
fields exist and their units. `KINDS` documents each kind: the SGLang catalog template ids it covers
(see ../shared/sglang/messages.tsv), its launch phase, and its fields. GiB values are floats named
`*_gib`, token counts ints, durations seconds as `*_s` floats.
"""
from __future__ import annotations

from typing import Any

from logdoctor.records import dataclass, field

# What one event may keep, whatever the input: a log line can be 1 MiB and the engine keeps up to
# 100k events, so text and fields are cut here (with CUT_MARK) rather than trusted to be short.
MAX_TEXT_CHARS = 8192            # Event.text and every string field
MAX_ARGS_CHARS = 65536           # the `rest` of a server_args line (real ones are ~15 KB)
MAX_LIST_ITEMS = 512             # items of a list field (frames, batch sizes, chain links)
MAX_FIELD_KEYS = 256             # keys of a dict field (tolerant bags)
MAX_DEPTH = 6                    # nesting of lists / dicts inside fields
CUT_MARK = " …[cut]"


def clip(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """text, or its first `limit` characters followed by CUT_MARK."""
    return text if len(text) <= limit else text[:limit] + CUT_MARK


def bounded(value: Any, depth: int = 0) -> Any:
    """A field value cut to the limits above; scalars other than str pass through unchanged."""
    if isinstance(value, str):
        return clip(value)
    if isinstance(value, list):
        if depth >= MAX_DEPTH:
            return []
        return [bounded(v, depth + 1) for v in value[:MAX_LIST_ITEMS]]
    if isinstance(value, dict):
        if depth >= MAX_DEPTH:
            return {}
        out: dict[str, Any] = {}
        for k, v in value.items():
            if len(out) >= MAX_FIELD_KEYS:
                break
            out[k] = bounded(v, depth + 1)
        return out
    return value


def bound_event(ev: Event) -> Event:
    """Cut what `ev` keeps to the limits above (in place); returns it."""
    if len(ev.text) > MAX_TEXT_CHARS:
        ev.text = clip(ev.text)
    f = ev.fields
    for k, v in f.items():
        cls = v.__class__
        if cls is int or cls is float or v is None:  # most values: nothing to cut, tested first
            continue
        if isinstance(v, str):
            if len(v) > MAX_TEXT_CHARS:
                f[k] = clip(v, MAX_ARGS_CHARS if (k == "rest" and ev.kind == "server_args") else MAX_TEXT_CHARS)
        elif isinstance(v, (list, dict)):
            f[k] = bounded(v, 1)
    if len(f) > MAX_FIELD_KEYS:
        ev.fields = dict(list(f.items())[:MAX_FIELD_KEYS])
    return ev


@dataclass(slots=True)
class Event:
    kind: str
    line: int                       # 1-based line number in the original input
    fields: dict[str, Any] = field(default_factory=dict)
    rank: int | None = None         # TP rank (SGLang prefix) or global rank (torch / NCCL lines)
    ranks: str | None = None        # the rank label as printed, e.g. "DP0 TP3 EP3"
    ts: str | None = None           # timestamp as printed
    secs: float | None = None       # seconds (epoch when a date is known, else since midnight)
    text: str = ""                  # the message text (first line for blocks), prefix removed
    template: str | None = None     # catalog template id when the line matched one
    end_line: int | None = None     # last line of a multi-line block
    source: str = ""                # file the event came from
    node: str | None = None         # the node (pod / host / file of a multi-node launch) it came from

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind, "line": self.line}
        if self.end_line is not None and self.end_line != self.line:
            d["end_line"] = self.end_line
        d["rank"] = self.rank
        if self.ranks:
            d["ranks"] = self.ranks
        d["ts"] = self.ts
        if self.template:
            d["template"] = self.template
        d["fields"] = self.fields
        d["text"] = self.text
        if self.node is not None:
            d["node"] = self.node
        return d


@dataclass(frozen=True, slots=True)
class KindInfo:
    phase: str
    templates: tuple[str, ...]
    fields: str
    doc: str


def _k(phase: str, templates: str, fields: str, doc: str) -> KindInfo:
    return KindInfo(phase, tuple(templates.split()), fields, doc)


# kind -> documentation. Phases follow the catalog: startup, memory, cuda_graph, comm, watchdog,
# exit, steady; `external` for PyTorch / NCCL / CUDA / OS output, `other` for the rest.
KINDS: dict[str, KindInfo] = {
    # ---- startup -------------------------------------------------------------------------------
    "server_args": _k("startup", "S01", "args: dict (every ServerArgs field, typed)", "resolved ServerArgs dump"),
    "dist_init_begin": _k("startup", "S02 S03", "", "torch.distributed / NCCL init starts"),
    "dist_init_end": _k("startup", "S04 S05", "mem_usage_gib, elapsed_s?", "distributed init done"),
    "nccl_version": _k("startup", "S06 E02", "version", "NCCL communicator created"),
    "nccl_so_path": _k("startup", "S07", "path", "custom libnccl from SGLANG_NCCL_SO_PATH"),
    "nccl_warmup_done": _k("startup", "S08", "elapsed_s, tp_size, pp_size, ep_size", "--pre-warm-nccl done"),
    "p2p_cache": _k("startup", "S09 S10", "path, action (read|generate)", "custom all-reduce P2P cache"),
    "weight_load_begin": _k("startup", "S11 S13 S14", "avail_gib?", "weight loading starts"),
    "weight_load_end": _k("startup", "S12 S15 S16 S17 S18 S19",
                          "avail_gib?, weight_gib?, elapsed_s?, model_class?, dtype?, quant?",
                          "weights loaded"),
    "checkpoint_progress": _k("startup", "S20", "percent, done, total", "safetensors shard progress"),
    "scheduler_summary": _k("startup", "S21 S22 S23 S24 S25",
                            "max_total_num_tokens, max_prefill_tokens, chunked_prefill_size?, "
                            "max_running_requests?, context_len, available_gpu_mem_gib?",
                            "KV pool summary printed by each scheduler"),
    "kv_cache_allocated": _k("startup", "S26 S27 S28 S29 S30 S31 S32 S39",
                             "tokens?, k_gib?, v_gib?, kv_gib (total), dtype?, label?, va_upper_bound",
                             "KV cache pool allocated"),
    "swa_pool_split": _k("startup", "S33 S34 S35", "full_layer_tokens?, swa_layer_tokens", "hybrid SWA split"),
    "swa_pool_usage": _k("startup", "S36", "mem_gib, swa_size, full_size", "SWA pool footprint"),
    "mamba_cache_allocated": _k("startup", "S37", "max_mamba_cache_size, conv_state_gib, ssm_state_gib",
                                "Mamba / linear-attention state pool"),
    "memory_pool_end": _k("startup", "S38", "avail_gib", "KV + req pools done; the reserve left"),
    "post_capture_kv_sizing": _k("startup", "S40", "max_total_num_tokens, avail_gib", "post-capture KV sizing"),
    "attention_backend": _k("startup", "S41 S42 S43 S44 S45",
                            "backend?, decode_backend?, prefill_backend?, model_arch?, mla",
                            "attention backend chosen"),
    "kv_cache_dtype": _k("startup", "S46", "dtype", "KV cache dtype"),
    "chunked_prefix_cache": _k("startup", "S47", "", "MLA chunked prefix cache on"),
    "graph_capture_begin": _k("startup", "S48 S49 S54 S56 S57 S59",
                              "avail_gib?, role?, phase?, backend?, batch_sizes?, piecewise, draft",
                              "CUDA graph capture starts"),
    "graph_capture_end": _k("startup", "S50 S51 S52 S55", "elapsed_s, mem_usage_gib?, avail_gib?, role?, phase?",
                            "CUDA graph capture done"),
    "graph_capture_sizes": _k("startup", "S53 S58", "batch_sizes? | num_tokens?", "captured sizes"),
    "graph_capture_progress": _k("startup", "S60", "bs?, avail_gib, percent, done, total",
                                 "tqdm 'Capturing batches' progress"),
    "graph_compile_shape": _k("startup", "S61", "shape, elapsed_s", "torch.compile of one shape"),
    "graph_addresses_registered": _k("startup", "S62", "count", "custom AR registers graph buffers"),
    "server_ready": _k("startup", "S63", "", "the server is fired up and ready to roll"),
    "warmup": _k("startup", "S66 S67", "name", "warm-up request running"),
    "uvicorn_started": _k("startup", "S68", "pid", "HTTP server process started"),
    "uvicorn_running": _k("startup", "S69", "scheme, host, port", "HTTP server listening"),
    "uvicorn_lifecycle": _k("startup", "", "", "uvicorn startup / shutdown lines"),
    # ---- steady --------------------------------------------------------------------------------
    "decode_batch": _k("steady", "B01 B09 B10 B11 B12 B13 B14",
                       "running_req, token?, token_usage, gen_throughput?, queue_req, cuda_graph?, ... (any key)",
                       "periodic decode statistics (tolerant key-value bag)"),
    "prefill_batch": _k("steady", "B02 B03 B04 B05 B06 B07 B08",
                        "new_seq, new_token, cached_token, token_usage?, running_req?, queue_req, ... (any key)",
                        "prefill statistics (tolerant key-value bag)"),
    "kv_retract": _k("steady", "B15 B16 B17", "retracted_reqs, new_token_ratio_from, new_token_ratio_to",
                     "KV pool full, requests retracted"),
    "request_truncated": _k("steady", "B18", "input_len, max_req_input_len", "request truncated"),
    "kv_leak": _k("steady", "B19", "pool", "KV pool leak detected"),
    "cache_flushed": _k("steady", "B20", "", "radix cache flushed"),
    "http_access": _k("steady", "PFX06", "client, method, path, status", "uvicorn access line"),
    # ---- memory --------------------------------------------------------------------------------
    "kv_not_enough_memory": _k("memory", "M01 M02 M03 M04", "mem_fraction_static?",
                               "KV budget <= 0 after weights (Not enough memory)"),
    "kv_no_memory_after_weights": _k("memory", "M05", "mem_fraction_static, minimum, viable",
                                     "v0.5.14+ explicit KV budget check failed"),
    "max_total_tokens_capped": _k("memory", "M06", "requested, profiled", "--max-total-tokens above profile"),
    "memory_unbalanced": _k("memory", "M07 M08", "min_gib?, local_gib?", "ranks see different free memory"),
    "rank_load_incomplete": _k("memory", "M09", "tp_rank", "other ranks did not finish loading"),
    "batch_out_of_memory": _k("memory", "M10 M11 M12", "phase, tokens?, available?", "token pool exhausted"),
    "req_slots_exhausted": _k("memory", "M13 M14", "available?", "request slots exhausted"),
    "retract_failed": _k("memory", "M15 M16", "", "retraction could not free memory"),
    "hybrid_state_cache_insufficient": _k("memory", "M17 M18", "max_mamba_cache_size?", "mamba cache too small"),
    "host_memory_insufficient": _k("memory", "M19", "requested_gb, free_gb", "host RAM too small for HiCache"),
    "host_cache_allocating": _k("memory", "M20", "gb", "HiCache host allocation"),
    "mem_fraction_reduced": _k("memory", "M21", "mem_fraction_static?, from?, to?", "VLM reduction of --mem-fraction-static"),
    "swa_pool_insufficient": _k("memory", "", "cap_tokens, cap_gib, available_gib",
                                "SWA pool cap leaves no room for the full KV pool (v0.5.14+)"),
    "torch_oom": _k("memory", "E04",
                    "tried_gib, gpu?, total_gib?, free_gib?, in_use_gib?, this_process_gib?, "
                    "other_processes?: [{pid, gib}], allocated_gib?, reserved_gib?, exception",
                    "PyTorch CUDA out of memory"),
    # ---- cuda graph ----------------------------------------------------------------------------
    "graph_capture_failed": _k("cuda_graph", "G01 G02 G03 G04 G05 G06 G07 G08",
                               "inner, piecewise, prefill, draft?, backend?", "SGLang's 'Capture cuda graph failed: <inner>' wrapper"),
    "cuda_graph_disabled": _k("cuda_graph", "G09", "reason", "CUDA graph disabled"),
    "piecewise_graph_disabled": _k("cuda_graph", "G10", "reason", "piecewise CUDA graph disabled"),
    "possible_solutions": _k("cuda_graph", "", "items: list[str]", "SGLang's 'Possible solutions:' list"),
    # ---- comm ----------------------------------------------------------------------------------
    "custom_allreduce_disabled": _k("comm", "C01 C02 C03 C04 C05 E03", "reason", "custom all-reduce disabled (warning)"),
    "custom_allreduce_setup_failed": _k("comm", "C06", "error", "custom all-reduce setup raised; NCCL used"),
    "cudart_error": _k("comm", "C07", "error", "CUDART error from the ctypes wrapper"),
    "p2p_status_disagree": _k("comm", "C08", "src, tgt", "ranks disagree on P2P access"),
    "p2p_test_failed": _k("comm", "C09", "detail", "P2P test subprocess failed"),
    "nvlink_detection_failed": _k("comm", "C10", "", "pynvml NVLink query failed"),
    "p2p_check_skipped": _k("comm", "C11", "", "P2P check skipped"),
    "allreduce_path_nccl": _k("comm", "C12", "", "all-reduce goes through NCCL"),
    "symm_mem_unavailable": _k("comm", "C13", "reason", "symmetric memory communicator unavailable"),
    "symm_mem_prealloc": _k("comm", "C14", "gib", "symmetric memory pool"),
    "mscclpp_disabled": _k("comm", "C15", "world_size", "mscclpp disabled"),
    "deepep_missing": _k("comm", "C16", "", "DeepEP not installed"),
    "deepep_sm_warning": _k("comm", "C17", "sms", "DeepEP SM count warning"),
    "mooncake_init_failed": _k("comm", "C18", "", "Mooncake transfer engine failed"),
    "nccl_library_load_failed": _k("comm", "C19", "path", "libnccl could not be loaded"),
    "nccl_error": _k("comm", "C20", "error", "PyNccl call failed"),
    "deepep_config": _k("comm", "C21", "config", "DeepEP config"),
    # ---- watchdog ------------------------------------------------------------------------------
    "scheduler_watchdog_timeout": _k("watchdog", "N01 N02", "timeout_s, name?, soft?", "SGLang watchdog fired"),
    "health_check_failed": _k("watchdog", "N03", "seconds", "detokenizer heartbeat lost"),
    "nccl_watchdog_timeout": _k("watchdog", "E05", "seq, op_type, timeout_ms, elapsed_ms", "c10d watchdog timeout"),
    # ---- exit ----------------------------------------------------------------------------------
    "process_exception": _k("exit", "X01 X02 X03 X04 X05 X06 X07 X08 X09",
                            "process", "'<Process> hit an exception:' header (traceback follows)"),
    "sigquit_received": _k("exit", "X10 X11 X12", "", "launcher got SIGQUIT from a child (cascade)"),
    "scheduler_dead": _k("exit", "X13 X25", "rank, exit_code? (X25, or the X14 line that follows X13)",
                         "launcher saw a scheduler die"),
    "exit_code": _k("exit", "X14", "exit_code", "exit code of the dead scheduler"),
    "init_failed": _k("exit", "X15 X17 X22", "state?", "launcher gives up"),
    "warmup_failed": _k("exit", "X16", "", "warm-up request failed"),
    "child_terminated": _k("exit", "X18 X19 X20", "pid?, exit_code?, name?", "a child process died"),
    "crash_dump": _k("exit", "X21", "path", "requests dumped before crash"),
    "gpu_arch_unsupported": _k("exit", "X23", "", "GPU older than sm75"),
    "port_unavailable": _k("exit", "X24", "port_name, port", "port not available"),
    # ---- external blocks and lines ---------------------------------------------------------------
    "traceback": _k("external", "",
                    "exception, message, frames: list[str], chain: list[{exception, message}], process?",
                    "a Python traceback (with its chained exceptions)"),
    "cuda_error": _k("external", "", "message, cuda_error_name?, exception?", "CUDA runtime error"),
    "nccl_log": _k("external", "", "level, host, pid, message", "NCCL_DEBUG line (INFO/WARN/ERROR)"),
    "torch_log": _k("external", "", "level, source, message", "glog-style line from PyTorch C++ or torchrun"),
    "vllm_log": _k("external", "", "level, source, message", "vLLM-format log line"),
    "fatal_signal": _k("external", "", "signal, frames: list[str]", "faulthandler dump (Segmentation fault, Aborted)"),
    "child_failed_error": _k("external", "", "root_cause_rank?, exit_code?, signal?", "torchrun ChildFailedError summary"),
    "killed": _k("external", "", "", "the shell's 'Killed' (SIGKILL, often the OOM killer)"),
    "argparse_error": _k("external", "", "program, message", "command-line usage error (argparse)"),
    "python_warning": _k("external", "", "source, category, message", "a Python warnings.warn line"),
    "native_error": _k("external", "", "file, source_line, message",
                       "C/C++ library error with a source location (NVSHMEM, DeepEP, NCCL plugins, ...)"),
    "model_import_failed": _k("startup", "", "module, error", "SGLang skipped a model module whose import failed"),
    "kernel_log": _k("external", "", "message", "dmesg / NVRM line"),
    "progress": _k("other", "", "label, percent?", "other tqdm progress bar"),
    "unparsed": _k("other", "", "", "anything not recognised (kept, never dropped)"),
}

FATAL_EXCEPTION_SUFFIXES = ("Error", "Exception", "Exit", "Interrupt")

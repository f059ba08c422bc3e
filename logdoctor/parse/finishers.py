"""Per-kind tidy-up of what the grammar captured: positional values to named fields in real units.

The lark transformer hands over a bag of `key=value` pairs plus positional NUMBER / WORD / REST
tokens; each finisher turns that into the fields `events.KINDS` documents for its kind.

Every pattern here is bounded (`{1,N}` numerals, a guard before a leading class) so that a hostile
line is read in linear time; numbers go through values.to_int / to_float, which refuse what no log
means (5000 digits, `1e999`).
"""
from __future__ import annotations

import re
from typing import Any

from logdoctor import regexes
from logdoctor.parse.values import (
    LIST,
    convert,
    list_value,
    normalize_key,
    to_float,
    to_int,
)

Fields = dict[str, Any]


def _flt(text: str) -> float | None:
    """A float from a regex capture that may be malformed in a damaged log (`2..5`, `1e999`)."""
    return to_float(text.rstrip(".)"))


_INT = r"(\d{1,18})(?!\d)"              # an int a log can mean; longer runs do not match at all
_SINT = r"(-?\d{1,18})(?!\d)"
_DEC = r"(-?[\d.]{1,32})(?![\d.])"      # a decimal as printed, possibly damaged (`2..5`): _flt decides
_UDEC = r"([\d.]{1,32})(?![\d.])"

def finish(kind: str, f: Fields, body: str) -> Fields:
    nums = f.pop("numbers", [])
    words = f.pop("words", [])
    anchor = f.pop("anchor", "")
    rest = f.get("rest", "")
    fix = _FINISHERS.get(kind)
    if fix is not None:
        fix(f, nums, words, anchor, rest, body)
    return f


def _fx_nccl_version(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    f["version"] = words[0] if words else None


def _fx_kv_dtype(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    f["dtype"] = words[0] if words else None


_QUANT_ITEM = regexes.compile(r"(?<![^\s(,])type=[^,=]{1,256}, ([^=,]{1,256}), avail mem=")


def _fx_weight_end(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    if "mem_usage_gib" in f:
        f["weight_gib"] = f.pop("mem_usage_gib")
    if "type" in f:
        f["model_class"] = f.pop("type")
    m = _QUANT_ITEM.search(body)  # the optional `{quant_str}, ` item of v0.5.10+ has no `=`
    if m:
        f["quant"] = m.group(1).strip()


def _fx_kv_alloc(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    f["va_upper_bound"] = "VA upper bound" in body
    if "kv_label" in f:
        f["label"] = f.pop("kv_label")
    if "kv_gib" not in f and ("k_gib" in f or "v_gib" in f):
        k, v = f.get("k_gib", 0.0), f.get("v_gib", 0.0)
        if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (k, v)):
            f["kv_gib"] = round(float(k) + float(v), 4)
    if "kv_cache_allocated_dtype" in f:
        f["dtype"] = f.pop("kv_cache_allocated_dtype")


def _fx_summary(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    head = body.split(",", 1)[0]
    key, _, value = head.partition("=")
    f.setdefault(normalize_key(key), convert(value))


def _fx_attention(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    if words:
        f["backend"] = words[0]
    f["mla"] = body.startswith("MLA optimization")
    if rest and "as attention backend for" in body:
        f["model_arch"] = rest.rstrip(".")
        f.pop("rest", None)


_GRAPH_ROLE = regexes.compile(r"Capture (target|draft) (decode|verify|prefill) CUDA")


def _fx_graph_begin(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    f["piecewise"] = "piecewise" in body.split(".", 1)[0]
    f["draft"] = body.startswith("Capture draft")
    m = _GRAPH_ROLE.match(body)
    if m:
        f["role"], f["phase"] = m.group(1), m.group(2)
    if "bs" in f and isinstance(f["bs"], list):
        f["batch_sizes"] = f.pop("bs")


def _fx_graph_end(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    _fx_graph_begin(f, nums, words, anchor, rest, body)


def _fx_graph_sizes(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    m = LIST.search(rest)
    values = list_value(m.group(1)) if m else []
    f["num_tokens" if "num tokens" in body else "batch_sizes"] = values
    f.pop("rest", None)


def _fx_graph_progress(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    inner, _, tail = rest.partition(")")
    for part in inner.split():
        k, eq, v = part.partition("=")
        if eq:
            f["avail_gib" if k == "avail_mem" else k] = convert(v)
    _progress_numbers(f, tail)
    f.pop("rest", None)


_PCT = regexes.compile(r"(?<!\d)" + _INT + "%")
_COUNT = regexes.compile(r"(?<!\d)" + _INT + "/" + _INT)


def _progress_numbers(f: Fields, text: str) -> None:
    m = _PCT.search(text)
    if m:
        f["percent"] = to_int(m.group(1))
    m = _COUNT.search(text)
    if m:
        f["done"], f["total"] = to_int(m.group(1)), to_int(m.group(2))


def _fx_checkpoint(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    _progress_numbers(f, rest)
    f.pop("rest", None)


def _fx_registered(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    f["count"] = nums[0] if nums else None


def _fx_uvicorn_started(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    f["pid"] = nums[0] if nums else None


_URL = regexes.compile(r"(\w{1,32})://([^\s:\[]{1,256}|\[[^\]]{1,256}\]):" + _INT)


def _fx_uvicorn_running(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    m = _URL.match(rest)
    if m:
        f["scheme"], f["host"], f["port"] = m.group(1), m.group(2), to_int(m.group(3))
    f.pop("rest", None)


_MFS_FLAG = regexes.compile(r"mem-fraction-static=" + _DEC)
_MFS_ABOVE = regexes.compile(r"above " + _DEC)
_MFS_VIABLE = regexes.compile(r"available/pre = " + _DEC)


def _fx_mfs_message(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    for k in list(f):
        if k.endswith("mem_fraction_static") and k != "mem_fraction_static":
            f["mem_fraction_static"] = f.pop(k)
    if "mem_fraction_static" not in f:
        m = _MFS_FLAG.search(body)
        if m:
            f["mem_fraction_static"] = _flt(m.group(1))
    m = _MFS_ABOVE.search(body)
    if m:
        f["minimum"] = _flt(m.group(1))
    m = _MFS_VIABLE.search(body)
    if m:
        f["viable"] = _flt(m.group(1))


def _fx_capped(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    if len(nums) >= 2:
        f["requested"], f["profiled"] = nums[0], nums[1]


def _fx_unbalanced(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    for k in ("min_per_gpu_memory", "pre_model_load_memory"):
        if k in f:
            f["min_gib"] = f.pop(k)
    if "local_gpu_memory" in f:
        f["local_gib"] = f.pop("local_gpu_memory")


def _fx_rank_load(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    f["tp_rank"] = nums[0] if nums else None


TRY_TOKENS = regexes.compile(r"Try to allocate (\d{1,18}) tokens")
AVAILABLE_TOKENS = regexes.compile(r"Avail?able tokens: " + _INT)


def _fx_batch_oom(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    f["phase"] = body.split(" ", 1)[0].lower()
    m = TRY_TOKENS.search(body)
    if m:
        f["tokens"] = to_int(m.group(1))


_HOST_MEM = regexes.compile(r"Requesting ([\d.]{1,32}) GB but only have ([\d.]{1,32}) GB")


def _fx_host_mem(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    m = _HOST_MEM.search(body)
    if m:
        f["requested_gb"], f["free_gb"] = _flt(m.group(1)), _flt(m.group(2))


def _fx_host_alloc(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    f["gb"] = nums[0] if nums else None


_MFS_FROM_TO = regexes.compile(r"from: ([\d.]{1,32}) to: " + _UDEC)


def _fx_mfs_reduced(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    if nums:
        f["mem_fraction_static"] = nums[0]
    m = _MFS_FROM_TO.search(body)
    if m:
        f["from"], f["to"] = _flt(m.group(1)), _flt(m.group(2))
        f["mem_fraction_static"] = f["to"]


def _fx_capture_failed(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    f["inner"] = f.pop("rest", "")
    f["piecewise"] = "Piecewise" in body[:30] or "piecewise" in body[:30]
    f["prefill"] = body.startswith("Capture prefill")


def _fx_reason(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    f["reason"] = f.pop("rest", "")


def _fx_error(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    f["error"] = f.pop("rest", "")


def _fx_symm_prealloc(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    f["gib"] = nums[0] if nums else None


def _fx_deepep_sm(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    f["sms"] = nums[0] if nums else None


def _fx_sched_watchdog(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    if "watchdog_name" in f:
        f["name"] = f.pop("watchdog_name")


def _fx_nccl_watchdog(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    f.update(nccl_watchdog_fields(body))
    f.pop("rank_tag", None)


# `WorkNCCL(SeqNum=41, OpType=ALLREDUCE, NumelIn=…, NumelOut=…, Timeout(ms)=600000) ran for 600047
# milliseconds`. One regex with `SeqNum=.*?OpType=.*?Timeout` was cubic on a long run of `SeqNum=1, `;
# instead the literal tail is found first and the head is read within the WORK_SPAN characters before it.
_WORK_TAIL = regexes.compile(r"Timeout\(ms\)=" + _INT + r"\) ran for " + _INT + " milliseconds")
_WORK_HEAD = regexes.compile(r"SeqNum=" + _INT + r", OpType=(\w{1,64})")
WORK_SPAN = 512


def nccl_watchdog_fields(text: str) -> Fields:
    tail = _WORK_TAIL.search(text)
    if not tail:
        return {}
    start = text.rfind("SeqNum=", max(0, tail.start() - WORK_SPAN), tail.start())
    head = _WORK_HEAD.match(text, start) if start >= 0 else None
    if not head:
        return {}
    return {"seq": to_int(head.group(1)), "op_type": head.group(2), "timeout_ms": to_int(tail.group(1)),
            "elapsed_ms": to_int(tail.group(2))}


_PROCESS_NAME = regexes.compile(r"(?:Exception in )?(\w{1,128})")


def _fx_process_exception(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    m = _PROCESS_NAME.match(body)
    f["process"] = m.group(1) if m else None


_EXIT_CODE = regexes.compile(r"exit code: " + _SINT)
_EXIT_CODE_LOOSE = regexes.compile(r"exit ?code[ =]" + _SINT)
_PID = regexes.compile(r"pid=" + _INT)


def _fx_scheduler_dead(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    f["rank"] = nums[0] if nums else None
    if "exit_code" not in f:
        m = _EXIT_CODE.search(body)
        if m:
            f["exit_code"] = to_int(m.group(1))


def _fx_exit_code(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    f["exit_code"] = nums[0] if nums else None


def _fx_child(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    if body.startswith("Scheduler or") and len(nums) >= 2:
        f["pid"], f["exit_code"] = nums[0], nums[1]
    elif body.startswith("Subprocess") and len(nums) >= 2:
        f["name"], f["pid"], f["exit_code"] = (words[0] if words else None), nums[0], nums[1]
    else:
        m = _EXIT_CODE_LOOSE.search(body)
        if m:
            f["exit_code"] = to_int(m.group(1))
        m = _PID.search(body)
        if m:
            f["pid"] = to_int(m.group(1))
        f.pop("with_an_exit_code", None)


_PORT = regexes.compile(r"port=" + _INT + r"|'[^']{0,256}', " + _INT + r"\)")


def _fx_port(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    f["port_name"] = f.pop("port_name", None) or "port"
    f["port"] = nums[0] if nums else None
    m = _PORT.search(body)
    if f["port"] is None and m:
        f["port"] = to_int(m.group(1) or m.group(2))


def _fx_init_failed(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    if "init_state" in f:
        f["state"] = f.pop("init_state").rstrip(":") + " " + f.pop("rest", "")


def _fx_p2p_cache(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    f["action"] = "read" if body.startswith("reading") else "generate"
    f["path"] = f.pop("rest", "")


def _fx_model_import(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    f["module"] = words[0].rstrip(".:") if words else None
    f["error"] = f.pop("rest", "")


_LAST_SECONDS = regexes.compile(r"last (\d{1,18}(?:\.\d{1,12})?) seconds")


def _fx_health(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    m = _LAST_SECONDS.search(body)
    if m:
        f["seconds"] = _flt(m.group(1))


def _fx_nccl_lib(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    f["path"] = rest.split(" ", 1)[0] if rest else None


_RATIO = regexes.compile(r"new_token_ratio: ([\d.]{1,32}) -> " + _UDEC)


def _fx_retract(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    m = _RATIO.search(body)
    if m:
        f["new_token_ratio_from"], f["new_token_ratio_to"] = _flt(m.group(1)), _flt(m.group(2))
        f.pop("new_token_ratio", None)


_NUM_REQS = regexes.compile(r"num_reqs=" + _INT)


def _fx_req_slots(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    for k in list(f):
        if k.endswith("available_size"):
            f["available"] = f.pop(k)
    m = _NUM_REQS.search(body)
    if m:
        f["num_reqs"] = to_int(m.group(1))


_HYBRID = (("max_mamba_cache_size", regexes.compile(r"max_mamba_cache_size=" + _INT)),
           ("total_rest_memory_gb", regexes.compile(r"total_rest_memory=" + _UDEC)),
           ("mamba_cache_per_req_mib", regexes.compile(r"mamba_cache_per_req=" + _UDEC)),
           ("max_num_reqs", regexes.compile(r"max_num_reqs=" + _INT)))


def _fx_hybrid(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    f.clear()
    for key, rx in _HYBRID:
        m = rx.search(body)
        if m:
            f[key] = convert(m.group(1))


_SWA_CAP = regexes.compile(r"\(" + _INT + r" tokens, ([\d.]{1,32}) GiB\)")
_SWA_AVAILABLE = regexes.compile(r"available ([\d.]{1,32}) GiB")


def _fx_swa(f: Fields, nums: list[Any], words: list[str], anchor: str, rest: str, body: str) -> None:
    m = _SWA_CAP.search(body)
    avail = _SWA_AVAILABLE.search(body, m.end()) if m else None  # two searches: `.*?` between them was quadratic
    if m and avail:
        f.update({"cap_tokens": to_int(m.group(1)), "cap_gib": _flt(m.group(2)), "available_gib": _flt(avail.group(1))})
    f.pop("rest", None)


_FINISHERS = {
    "kv_retract": _fx_retract,
    "req_slots_exhausted": _fx_req_slots,
    "hybrid_state_cache_insufficient": _fx_hybrid,
    "swa_pool_insufficient": _fx_swa,
    "health_check_failed": _fx_health,
    "nccl_library_load_failed": _fx_nccl_lib,
    "model_import_failed": _fx_model_import,
    "nccl_version": _fx_nccl_version,
    "kv_cache_dtype": _fx_kv_dtype,
    "weight_load_end": _fx_weight_end,
    "kv_cache_allocated": _fx_kv_alloc,
    "scheduler_summary": _fx_summary,
    "attention_backend": _fx_attention,
    "graph_capture_begin": _fx_graph_begin,
    "graph_capture_end": _fx_graph_end,
    "graph_capture_sizes": _fx_graph_sizes,
    "graph_capture_progress": _fx_graph_progress,
    "checkpoint_progress": _fx_checkpoint,
    "graph_addresses_registered": _fx_registered,
    "uvicorn_started": _fx_uvicorn_started,
    "uvicorn_running": _fx_uvicorn_running,
    "kv_not_enough_memory": _fx_mfs_message,
    "kv_no_memory_after_weights": _fx_mfs_message,
    "max_total_tokens_capped": _fx_capped,
    "memory_unbalanced": _fx_unbalanced,
    "rank_load_incomplete": _fx_rank_load,
    "batch_out_of_memory": _fx_batch_oom,
    "host_memory_insufficient": _fx_host_mem,
    "host_cache_allocating": _fx_host_alloc,
    "mem_fraction_reduced": _fx_mfs_reduced,
    "graph_capture_failed": _fx_capture_failed,
    "cuda_graph_disabled": _fx_reason,
    "piecewise_graph_disabled": _fx_reason,
    "custom_allreduce_disabled": _fx_reason,
    "symm_mem_unavailable": _fx_reason,
    "custom_allreduce_setup_failed": _fx_error,
    "cudart_error": _fx_error,
    "nccl_error": _fx_error,
    "symm_mem_prealloc": _fx_symm_prealloc,
    "deepep_sm_warning": _fx_deepep_sm,
    "scheduler_watchdog_timeout": _fx_sched_watchdog,
    "nccl_watchdog_timeout": _fx_nccl_watchdog,
    "process_exception": _fx_process_exception,
    "scheduler_dead": _fx_scheduler_dead,
    "exit_code": _fx_exit_code,
    "child_terminated": _fx_child,
    "port_unavailable": _fx_port,
    "init_failed": _fx_init_failed,
    "p2p_cache": _fx_p2p_cache,
}

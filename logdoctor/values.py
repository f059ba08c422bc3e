"""Values in real units: `70.98 GB` → 70.98 (GiB), `True` → True, `[1, 2]` → [1, 2], and tolerant
key-value bags (`avail mem=9.85 GB, mem usage=0.65 GB` → {"avail_gib": 9.85, "mem_usage_gib": 0.65})."""
from __future__ import annotations

import re
from typing import Any

Fields = dict[str, Any]

# ------------------------------------------------------------------------------------------------
# value conversion and tolerant key-value bags

_NUM = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_UNIT_VALUE = re.compile(r"^(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)\s*(GB|GiB|MB|MiB|KB|s|ms|%)?\.?$")
LIST = re.compile(r"\[([^\[\]]*)\]")
_SPLIT = re.compile(r",\s*|\.\s+(?=[A-Za-z#])|;\s*")
_KEY_CLEAN = re.compile(r"[^0-9a-z]+")
_UNIT_SUFFIX = {"GB": "_gib", "GiB": "_gib", "MB": "_mib", "MiB": "_mib", "KB": "_kib", "s": "_s", "ms": "_ms", "%": "_pct"}
_KEY_ALIASES = {
    "time_elapsed_s": "elapsed_s", "avail_mem_gib": "avail_gib", "k_size_gib": "k_gib", "v_size_gib": "v_gib",
    "kv_size_gib": "kv_gib", "available_gpu_mem_gib": "available_gpu_mem_gib", "free_memory_gib": "avail_gib",
    "max_total_num_token": "max_total_num_tokens", "max_prefill_num_token": "max_prefill_tokens",
    "self_watchdog_timeout": "timeout_s", "self_soft": "soft", "exit_code": "exit_code",
}


def convert(value: str) -> Any:
    v = value.strip().rstrip(",")
    if v in ("True", "true"):
        return True
    if v in ("False", "false"):
        return False
    if v == "None":
        return None
    m = _NUM.fullmatch(v)
    if m:
        return float(v) if ("." in v or "e" in v or "E" in v) else int(v)
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
        return v[1:-1]
    return v


def list_value(inner: str) -> list[Any]:
    return [convert(x) for x in inner.split(",") if x.strip()]


def normalize_key(key: str) -> str:
    k = _KEY_CLEAN.sub("_", key.strip().lower()).strip("_")
    return _KEY_ALIASES.get(k, k)


def extract_pairs(text: str) -> Fields:
    """Every `key=value` / `key: value` in a free-form message, with units folded into the key."""
    out: Fields = {}
    lists: list[list[Any]] = []

    def stash(m: re.Match[str]) -> str:
        lists.append(list_value(m.group(1)))
        return f"\x00{len(lists) - 1}\x00"

    text = LIST.sub(stash, text)
    for part in _SPLIT.split(text):
        if "=" in part:
            key, _, value = part.partition("=")
        elif ": " in part:
            key, _, value = part.partition(": ")
        else:
            continue
        key = key.strip().split(". ")[-1]
        if not key or len(key) > 60:
            continue
        value = value.strip().rstrip(".").strip()
        if value.endswith(")") and value.count("(") < value.count(")"):
            value = value[:-1].rstrip(".")
        if value.startswith("\x00"):
            idx = value.strip("\x00")
            if idx.isdigit():
                out[normalize_key(key)] = lists[int(idx)]
            continue
        m = _UNIT_VALUE.match(value)
        if m:
            num, unit = m.groups()
            k = normalize_key(key) + (_UNIT_SUFFIX.get(unit, "") if unit else "")
            out[_KEY_ALIASES.get(k, k)] = convert(num) if unit != "GB" and unit != "GiB" else float(num)
        else:
            out[normalize_key(key)] = convert(value)
    return out



"""Values in real units: `70.98 GB` → 70.98 (GiB), `True` → True, `[1, 2]` → [1, 2], and tolerant
key-value bags (`avail mem=9.85 GB, mem usage=0.65 GB` → {"avail_gib": 9.85, "mem_usage_gib": 0.65}).

Conversion is total: a number a log line cannot really mean (more than `MAX_NUMBER_CHARS` characters,
beyond ±`NUMBER_LIMIT`, `1e999` → inf, `nan`) stays text, so nothing downstream does arithmetic on it,
formats a 5000-digit integer (Python refuses over 4300 digits) or writes `Infinity` into JSON.
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

from logdoctor import regexes

Fields = dict[str, Any]

NUMBER_LIMIT = 10**18        # |value| at or above this is not a figure a log prints: kept as text
MAX_NUMBER_CHARS = 40        # a numeral longer than this is kept as text (and never handed to int())
MAX_PAIRS = 256              # key-value pairs kept from one message (a hostile line cannot make a huge dict)
MAX_LIST_ITEMS = 512         # items kept from one `[...]` list (CUDA graph batch sizes are a few hundred)

# ------------------------------------------------------------------------------------------------
# value conversion and tolerant key-value bags

_NUM = regexes.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_UNIT_VALUE = regexes.compile(r"^(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)\s*(GB|GiB|MB|MiB|KB|s|ms|%)?\.?$")
LIST = regexes.compile(r"\[([^\[\]]*)\]")
_SPLIT = regexes.compile(r",\s*|\.\s+(?=[A-Za-z#])|;\s*")
_KEY_CLEAN = regexes.compile(r"[^0-9a-z]+")
_UNIT_SUFFIX = {"GB": "_gib", "GiB": "_gib", "MB": "_mib", "MiB": "_mib", "KB": "_kib", "s": "_s", "ms": "_ms", "%": "_pct"}
_KEY_ALIASES = {
    "time_elapsed_s": "elapsed_s", "avail_mem_gib": "avail_gib", "k_size_gib": "k_gib", "v_size_gib": "v_gib",
    "kv_size_gib": "kv_gib", "available_gpu_mem_gib": "available_gpu_mem_gib", "free_memory_gib": "avail_gib",
    "max_total_num_token": "max_total_num_tokens", "max_prefill_num_token": "max_prefill_tokens",
    "self_watchdog_timeout": "timeout_s", "self_soft": "soft", "exit_code": "exit_code",
}


def to_int(text: str) -> int | None:
    """An int from a numeral a regex captured, or None when it is not a figure a log can mean."""
    t = text.strip()
    if not t or len(t) > MAX_NUMBER_CHARS:
        return None
    try:
        v = int(t)
    except ValueError:
        return None
    return v if -NUMBER_LIMIT < v < NUMBER_LIMIT else None


def to_float(text: str) -> float | None:
    """A finite float within ±NUMBER_LIMIT, else None (`1e999`, `nan`, `2..5`, 400 digits)."""
    t = text.strip()
    if not t or len(t) > MAX_NUMBER_CHARS:
        return None
    try:
        v = float(t)
    except ValueError:
        return None
    return v if math.isfinite(v) and -NUMBER_LIMIT < v < NUMBER_LIMIT else None


def convert(value: str) -> Any:
    v = value.strip().rstrip(",")
    if v in ("True", "true"):
        return True
    if v in ("False", "false"):
        return False
    if v == "None":
        return None
    if _NUM.fullmatch(v):
        num = to_float(v) if ("." in v or "e" in v or "E" in v) else to_int(v)
        return v if num is None else num  # a numeral no log means stays text
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
        return v[1:-1]
    return v


def list_value(inner: str) -> list[Any]:
    parts = inner.split(",", MAX_LIST_ITEMS)
    return [convert(x) for x in parts[:MAX_LIST_ITEMS] if x.strip()]


def normalize_key(key: str) -> str:
    k = _KEY_CLEAN.sub("_", key.strip().lower()).strip("_")
    return _KEY_ALIASES.get(k, k)


def _parts(text: str) -> Iterator[str]:
    """`_SPLIT.split(text)` one part at a time: a long line never becomes a list of a million pieces."""
    pos = 0
    for m in _SPLIT.finditer(text):
        yield text[pos:m.start()]
        pos = m.end()
    yield text[pos:]


def extract_pairs(text: str) -> Fields:
    """Every `key=value` / `key: value` in a free-form message, with units folded into the key."""
    out: Fields = {}
    lists: list[list[Any]] = []

    def stash(m: re.Match[str]) -> str:
        if len(lists) >= MAX_PAIRS:
            return m.group(0)
        lists.append(list_value(m.group(1)))
        return f"\x00{len(lists) - 1}\x00"

    text = LIST.sub(stash, text)
    for part in _parts(text):
        if len(out) >= MAX_PAIRS:
            break
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
            if idx.isdigit() and len(idx) < 6 and int(idx) < len(lists):
                out[normalize_key(key)] = lists[int(idx)]
            continue
        m = _UNIT_VALUE.match(value)
        if m:
            num, unit = m.groups()
            k = normalize_key(key) + (_UNIT_SUFFIX.get(unit, "") if unit else "")
            value_num = convert(num) if unit != "GB" and unit != "GiB" else to_float(num)
            out[_KEY_ALIASES.get(k, k)] = num if value_num is None else value_num
        else:
            out[normalize_key(key)] = convert(value)
    return out



#!/usr/bin/env python3
"""Wrap every line of a plain log the way a log collector hands it over: an oracle for the envelope stage.

Usage: python tools/wrap_log.py ENVELOPE[+ENVELOPE...] IN [-o OUT] [--split BYTES] [--map MAP.tsv]

Each envelope is written from the real tool's output format (not from logdoctor's peeler), so a test
that wraps a fixture and diagnoses it checks the peeler against the tools. `A+B` is A around B (outermost
first, as `attrs["envelope"]` lists layers): `kubectl-prefix+rfc3339` is `kubectl logs --prefix
--timestamps`, whose client adds the prefix around the timestamps the kubelet wrote.

| envelope | what prints it | line |
|---|---|---|
| rfc3339 | kubectl logs --timestamps, docker logs -t | `2025-04-05T00:01:19.209123456Z TEXT` (Go RFC3339NanoFixed) |
| kubectl-prefix | kubectl logs --prefix | `[pod/NAME/CONTAINER] TEXT` |
| stern | stern --color never (default template) | `POD CONTAINER TEXT` |
| cri | containerd, /var/log/pods/.../0.log | `TIME stdout|stderr P|F TEXT`; lines over `split` bytes as P records |
| json | docker json-file (`json:attrs` with a tag) | `{"log":"TEXT\\n","stream":"stderr","time":"..."}` Go escapes; partials have no \\n |
| vector | Vector kubernetes_logs source, json codec | sorted keys, `message`, `kubernetes.*`, `timestamp` |
| fluentbit | fluent-bit tail+cri parser+kubernetes filter (`fluentbit:docker`: docker parser, `log` keeps \\n) | `date`, `time`, `stream`, `_p`, `log`, `kubernetes` |
| loki | logcli query --output=jsonl (default --forward=false: NEWEST FIRST); `loki:forward` | `{"labels":{..},"line":"TEXT","timestamp":".."}` |
| compose | docker compose logs / up | `sglang-1        | TEXT` (padded to the longest service + 1) |
| journald | journalctl -o short (also :short-iso, :short-precise, :short-iso-precise) | `Apr 05 00:01:19 host python3[1234]: TEXT` |
| syslog | rsyslog traditional file (also :iso = RSYSLOG_FileFormat, :5424) | `Apr  5 00:01:19 host python3[1234]: TEXT` |
| ray | Ray driver output (`ray:verl`: `(WorkerDict pid=N, ip=...)`; `ray:color`: ANSI-coloured prefix, as Ray writes it even to a pipe; `ray:pasted`: the same pasted into an issue, ESC lost: `[36m(...)[0m`) | `(SGLangEngine pid=4100) TEXT`, driver lines plain, `(raylet) ` lines added |
| gcp | Cloud Logging export, severity + RFC 3339, NEWEST FIRST (`gcp:ms`: millisecond times) | `ERROR 2025-04-05T00:01:19.209123456Z TEXT` |
| cloudwatch | aws logs tail (detailed format) | `2025-04-05T00:01:19.209000+00:00 STREAM TEXT` |
| srun | srun --label (one task) | `0: TEXT` |
| quote | a log pasted as a Markdown quote | `> TEXT` (`>` on an empty line) |

Not emulated, because they change the text itself (say so when a diagnosis differs on a real file):
journalctl without `-a` shows lines with control characters (tqdm's `\\r`) as `[N blob data]`; rsyslog
escapes them as `#015`; Ray folds repeated lines into ` [repeated 3x across cluster]`.

Collector times follow the log's own `[YYYY-MM-DD HH:MM:SS` times (as the collector saw the line a moment
after it was written) and always increase; some fall on a whole millisecond or second, so the formats
that drop trailing zeros (Go's RFC3339Nano, Python's isoformat) are exercised.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

POD = "sglang-7d9f8c6b5-x2k4q"
CONTAINER = "sglang"
NAMESPACE = "default"
NODE = "gpu-node-1"
POD_IP = "10.42.3.17"
SPLIT_BYTES = 16 * 1024           # kubelet/containerd max_container_log_line_size, docker's copier buffer
BASE = datetime(2025, 4, 5, 0, 1, 19, 209123, tzinfo=UTC)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Record:
    text: str            # may hold lone surrogates: bytes of a UTF-8 character cut by a byte split
    src: int | None      # 0-based index of the input line it came from; None for a line the collector added
    ns: int              # collector time, ns since the epoch
    stream: str = "stderr"


@dataclass(frozen=True)
class Options:
    split: int = SPLIT_BYTES
    pod: str = POD
    container: str = CONTAINER
    base: datetime = BASE


# ------------------------------------------------------------------------------------------------
# times

_LOG_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?")
_LOG_CLOCK = re.compile(r"^\[(\d\d):(\d\d):(\d\d)[\] ]")


def _log_time_ns(text: str, day: datetime) -> int | None:
    """When the collector could have seen this line, by the time SGLang printed on it (ns since the
    epoch); None if it has none. SGLang's whole seconds say the line was written somewhere in that
    second; a printed fraction (SGLANG_LOG_MS) says when, and the collector reads it a moment later."""
    m = _LOG_TIME.match(text)
    if m:
        frac = (m.group(5) or "").ljust(6, "0")
        t = _ns(datetime.fromisoformat(f"{m.group(1)}T{m.group(2)}:{m.group(3)}:{m.group(4)}.{frac}+00:00"))
        return t + 412_345 if m.group(5) else t + 50_000_000 + (t // 10**9 * 2_654_435_761) % 900_000_000
    m = _LOG_CLOCK.match(text)
    if m:
        t = _ns(day.replace(hour=int(m.group(1)), minute=int(m.group(2)), second=int(m.group(3)), microsecond=0))
        return t + 50_000_000 + (t // 10**9 * 2_654_435_761) % 900_000_000
    return None


def _ns(t: datetime) -> int:
    delta = t - _EPOCH
    return (delta.days * 86400 + delta.seconds) * 10**9 + delta.microseconds * 1000


def collector_times(lines: Sequence[str], base: datetime = BASE) -> list[int]:
    """One strictly increasing collector time per line, a little after the log's own time."""
    first = next((t for ln in lines[:200] if (t := _log_time_ns(ln, base)) is not None), None)
    now = first - 10**6 if first is not None else _ns(base)
    day = datetime.fromtimestamp(now // 10**9, UTC)
    out: list[int] = []
    for i, text in enumerate(lines):
        step = 23_011 + (i * 7_919) % 61_000   # ns: lines of one burst land microseconds apart
        own = _log_time_ns(text, day)
        now = max(now + step, own or 0)
        if i % 11 == 5:
            now = -(-now // 10**6) * 10**6     # a whole millisecond: `.209Z`, not `.209000000Z`
        elif i % 97 == 41:
            now = -(-now // 10**9) * 10**9     # a whole second: Go's RFC3339Nano prints no fraction
        out.append(now)
    return out


def _utc(ns: int) -> datetime:
    return _EPOCH + timedelta(microseconds=ns // 1000)


def _frac9(ns: int) -> str:
    return f"{ns % 10**9:09d}"


def rfc3339_fixed(ns: int) -> str:
    """Go's RFC3339NanoFixed (kubelet's timeFormatOut, docker's jsonmessage): always 9 digits."""
    return _utc(ns).strftime("%Y-%m-%dT%H:%M:%S.") + _frac9(ns) + "Z"


def rfc3339_nano(ns: int) -> str:
    """Go's time.RFC3339Nano: trailing zeros of the fraction dropped, no dot for a whole second."""
    frac = _frac9(ns).rstrip("0")
    return _utc(ns).strftime("%Y-%m-%dT%H:%M:%S") + (f".{frac}" if frac else "") + "Z"


def rfc3339_auto_si(ns: int) -> str:
    """chrono's SecondsFormat::AutoSi (Vector): 0, 3, 6 or 9 digits, whichever is exact."""
    f = ns % 10**9
    digits = 0 if f == 0 else 3 if f % 10**6 == 0 else 6 if f % 1000 == 0 else 9
    frac = "." + _frac9(ns)[:digits] if digits else ""
    return _utc(ns).strftime("%Y-%m-%dT%H:%M:%S") + frac + "Z"


def iso_micro(ns: int) -> str:
    """`2025-04-05T00:01:19.209123+00:00`: journalctl short-iso-precise, rsyslog RFC 3339 dates."""
    return _utc(ns).strftime("%Y-%m-%dT%H:%M:%S.%f") + "+00:00"


def aws_isoformat(ns: int) -> str:
    """`aws logs tail`: datetime.fromtimestamp(ms / 1000.0, tzutc()).isoformat(), CloudWatch keeps ms."""
    ms = ns // 10**6
    return datetime.fromtimestamp(ms / 1000.0, UTC).isoformat()


# ------------------------------------------------------------------------------------------------
# JSON string escaping as each collector's encoder does it


def go_json_string(text: str) -> str:
    """encoding/json and docker's jsonlog writer: <, >, & and U+2028/9 escaped, bytes of a cut UTF-8
    character (lone surrogates here) become \\ufffd one per byte, other non-ASCII written raw."""
    out = ['"']
    for ch in text:
        c = ord(ch)
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif c < 0x20 or ch in "<>&":
            out.append(f"\\u00{c:02x}")
        elif c in (0x2028, 0x2029):
            out.append(f"\\u{c:04x}")
        elif 0xD800 <= c <= 0xDFFF:
            out.append("\\ufffd")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _valid(text: str) -> str:
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


# ------------------------------------------------------------------------------------------------
# layers: each maps the records of the layer inside it to the records it prints


def _byte_chunks(text: str, size: int) -> list[str]:
    """Cut at `size` bytes, as containerd and docker do (a UTF-8 character may be cut in two)."""
    data = text.encode("utf-8", "surrogateescape")
    if len(data) <= size:
        return [text]
    return [data[i:i + size].decode("utf-8", "surrogateescape") for i in range(0, len(data), size)]


def _partials(recs: list[Record], size: int) -> list[tuple[Record, str, bool]]:
    """(record, chunk, is_last) for every chunk; each chunk a microsecond later than the one before."""
    out = []
    for r in recs:
        chunks = _byte_chunks(r.text, size)
        for k, chunk in enumerate(chunks):
            out.append((replace(r, ns=r.ns + k * 1000), chunk, k == len(chunks) - 1))
    return out


def _prefixed(prefix: Callable[[Record, Options], str], stream: str | None = None) -> Callable[..., list[Record]]:
    def layer(recs: list[Record], opts: Options, variant: str) -> list[Record]:
        return [replace(r, text=prefix(r, opts) + r.text, stream=stream or r.stream) for r in recs]
    return layer


def _cri(recs: list[Record], opts: Options, variant: str) -> list[Record]:
    return [replace(r, text=f"{rfc3339_nano(r.ns)} {r.stream} {'F' if last else 'P'} {chunk}")
            for r, chunk, last in _partials(recs, opts.split)]


def _docker_json(recs: list[Record], opts: Options, variant: str) -> list[Record]:
    # `json:attrs`: a container run with `--log-opt tag=… --log-opt labels=…` (docker writes them between)
    attrs = ',"attrs":{"tag":"sglang/sglang-1"}' if variant == "attrs" else ""
    out = []
    for r, chunk, last in _partials(recs, opts.split):
        log = go_json_string(chunk + ("\n" if last else ""))
        out.append(replace(r, text=f'{{"log":{log},"stream":"{r.stream}"{attrs},"time":"{rfc3339_nano(r.ns)}"}}'))
    return out


_POD_UID = "5f1c9a2e-7b3d-4e8f-9a61-2c4d8e0f1b37"
_CONTAINER_ID = "3b9e1f0a7c5d2e8f4a6b1c9d0e7f3a5b2c8d4e6f1a0b9c7d5e3f2a1b0c9d8e7f"
_IMAGE = "lmsysorg/sglang:v0.5.6-cu129"


def _vector(recs: list[Record], opts: Options, variant: str) -> list[Record]:
    kube = {"container_id": f"containerd://{_CONTAINER_ID}", "container_image": _IMAGE,
            "container_name": opts.container, "namespace_labels": {"kubernetes.io/metadata.name": NAMESPACE},
            "node_labels": {"kubernetes.io/hostname": NODE}, "pod_ip": POD_IP, "pod_ips": [POD_IP],
            "pod_labels": {"app": "sglang", "pod-template-hash": opts.pod.split("-")[-2]},
            "pod_name": opts.pod, "pod_namespace": NAMESPACE, "pod_node_name": NODE,
            "pod_owner": f"ReplicaSet/{opts.pod.rsplit('-', 1)[0]}", "pod_uid": _POD_UID}
    path = f"/var/log/pods/{NAMESPACE}_{opts.pod}_{_POD_UID}/{opts.container}/0.log"
    out = []
    for r in recs:   # Vector merges CRI partials itself (auto_partial_merge) and drops the newline
        doc = {"file": path, "kubernetes": kube, "message": _valid(r.text), "source_type": "kubernetes_logs",
               "stream": r.stream, "timestamp": rfc3339_auto_si(r.ns)}
        out.append(replace(r, text=json.dumps(doc, ensure_ascii=False, sort_keys=True, separators=(",", ":"))))
    return out


def _fluentbit(recs: list[Record], opts: Options, variant: str) -> list[Record]:
    kube = {"pod_name": opts.pod, "namespace_name": NAMESPACE, "pod_id": _POD_UID,
            "labels": {"app": "sglang"}, "host": NODE, "container_name": opts.container,
            "docker_id": _CONTAINER_ID, "container_hash": f"docker.io/{_IMAGE}@sha256:{_CONTAINER_ID}",
            "container_image": _IMAGE}
    out = []
    for r in recs:   # fluent-bit's JSON writer escapes non-ASCII as \uXXXX
        if variant == "docker":  # tail on /var/lib/docker/containers/*/*.log, docker parser: the \n stays
            doc = {"date": round(r.ns / 1e9, 6), "log": _valid(r.text) + "\n", "stream": r.stream,
                   "time": rfc3339_nano(r.ns), "kubernetes": kube}
        else:
            doc = {"date": round(r.ns / 1e9, 6), "time": rfc3339_nano(r.ns), "stream": r.stream, "_p": "F",
                   "log": _valid(r.text), "kubernetes": kube}
        out.append(replace(r, text=json.dumps(doc, ensure_ascii=True, separators=(",", ":"))))
    return out


def _loki(recs: list[Record], opts: Options, variant: str) -> list[Record]:
    out = []
    for r in recs:
        labels = {"container": opts.container, "instance": opts.pod, "job": f"{NAMESPACE}/sglang",
                  "namespace": NAMESPACE, "node_name": NODE, "pod": opts.pod, "stream": r.stream}
        lbl = ",".join(f"{go_json_string(k)}:{go_json_string(v)}" for k, v in sorted(labels.items()))
        line = go_json_string(_valid(r.text))
        out.append(replace(r, text=f'{{"labels":{{{lbl}}},"line":{line},"timestamp":"{rfc3339_nano(r.ns)}"}}'))
    # logcli's default direction is backward: the newest entry first
    return out if variant == "forward" else out[::-1]


COMPOSE_SERVICE = "sglang-1"
COMPOSE_OTHERS = ("sglang-router-1",)


def _compose(recs: list[Record], opts: Options, variant: str) -> list[Record]:
    # docker compose v2: `%-{width}s | ` with width = the longest container name + 1
    width = max(len(n) for n in (COMPOSE_SERVICE, *COMPOSE_OTHERS)) + 1
    prefix = f"{COMPOSE_SERVICE:<{width}s} | "
    return [replace(r, text=prefix + r.text, stream="stdout") for r in recs]


HOST = "gpu-node-1"
IDENT, PID = "python3", 1234


def _journald(recs: list[Record], opts: Options, variant: str) -> list[Record]:
    def stamp(ns: int) -> str:
        t = _utc(ns)
        if variant in ("", "short"):
            return t.strftime("%b %d %H:%M:%S")
        if variant == "short-precise":
            return t.strftime("%b %d %H:%M:%S.%f")
        if variant == "short-iso":
            return t.strftime("%Y-%m-%dT%H:%M:%S") + "+00:00"
        if variant == "short-iso-precise":
            return iso_micro(ns)
        raise ValueError(f"journald: unknown output mode {variant!r}")
    return [replace(r, text=f"{stamp(r.ns)} {HOST} {IDENT}[{PID}]: {r.text}", stream="stdout") for r in recs]


def _syslog(recs: list[Record], opts: Options, variant: str) -> list[Record]:
    def line(r: Record) -> str:
        t = _utc(r.ns)
        if variant == "":      # RSYSLOG_TraditionalFileFormat: `%b %e`, the day padded with a space
            return f"{t.strftime('%b')} {t.day:2d} {t.strftime('%H:%M:%S')} {HOST} {IDENT}[{PID}]: {r.text}"
        if variant == "iso":   # RSYSLOG_FileFormat (Ubuntu 24.04's default)
            return f"{iso_micro(r.ns)} {HOST} {IDENT}[{PID}]: {r.text}"
        if variant == "5424":  # RFC 5424 (RSYSLOG_SyslogProtocol23Format), daemon.info
            return f"<30>1 {iso_micro(r.ns)} {HOST} {IDENT} {PID} - - {r.text}"
        raise ValueError(f"syslog: unknown format {variant!r}")
    return [replace(r, text=line(r), stream="stdout") for r in recs]


_RANK_TAG = re.compile(r"^\[[^\]]{0,40}\b(?:TP|DP|PP|EP)(\d{1,4})\b")
_SGLANG_LINE = re.compile(r"^\[(?:\d{4}-\d\d-\d\d |\d\d:\d\d:\d\d)")
RAYLET_LINE = "(raylet) Spilled 2048 MiB, 10 objects, write throughput 512 MiB/s. Set RAY_verbose_spill_logs=0 to disable this message."


def _ray(recs: list[Record], opts: Options, variant: str) -> list[Record]:
    """Worker lines get their actor's prefix; driver lines (the main process of a multi-rank log:
    SGLang lines with no rank tag) stay plain; two `(raylet) ` lines are added near the start."""
    ranked = any(_RANK_TAG.match(r.text) for r in recs[:400])
    out: list[Record] = []
    actor: int | None = 0       # rank of the process printing now; None = the driver
    for i, r in enumerate(recs):
        m = _RANK_TAG.match(r.text)
        if m:
            actor = int(m.group(1))
        elif ranked and _SGLANG_LINE.match(r.text):
            actor = None
        elif not ranked:
            actor = None if i < 2 else 0
        if variant == "verl":
            prefix = f"(WorkerDict pid={4100 + (actor or 0)}, ip=10.0.0.{2 + (actor or 0) % 200}) "
        elif variant in ("", "color", "pasted"):
            prefix = "" if actor is None else f"(SGLangEngine pid={4100 + actor}) "
            if prefix and variant:  # Ray colours the prefix even into a file or pipe; a paste loses the ESC
                esc = "\x1b" if variant == "color" else ""
                prefix = f"{esc}[2m{esc}[36m{prefix[:-1]}{esc}[0m "
        else:
            raise ValueError(f"ray: unknown variant {variant!r}")
        out.append(replace(r, text=prefix + r.text))
        if i in (1, len(recs) // 2):
            out.append(Record(RAYLET_LINE, None, r.ns + 1000, "stderr"))
    return out


def _gcp(recs: list[Record], opts: Options, variant: str) -> list[Record]:
    # GKE: stderr lines are severity ERROR, stdout INFO; the export lists the newest entry first
    # `gcp:ms`: times in milliseconds, as the Logs Explorer shows them (lines of one burst then tie)
    stamp = (lambda ns: rfc3339_fixed(ns)[:23] + "Z") if variant == "ms" else rfc3339_nano
    out = [replace(r, text=f"{'ERROR' if r.stream == 'stderr' else 'INFO'} {stamp(r.ns)} {r.text}")
           for r in recs]
    return out[::-1]


CLOUDWATCH_STREAM = "sglang/sglang/5f0c2a9b8e7d4c3ba1f2e3d4c5b6a798"


def _cloudwatch(recs: list[Record], opts: Options, variant: str) -> list[Record]:
    return [replace(r, text=f"{aws_isoformat(r.ns)} {CLOUDWATCH_STREAM} {r.text}") for r in recs]


def _quote(recs: list[Record], opts: Options, variant: str) -> list[Record]:
    # a log pasted into a GitHub comment as a quote: `> ` before each line, a bare `>` on an empty one
    return [replace(r, text=f"> {r.text}" if r.text else ">") for r in recs]


LAYERS: dict[str, Callable[[list[Record], Options, str], list[Record]]] = {
    "rfc3339": _prefixed(lambda r, o: rfc3339_fixed(r.ns) + " ", "stdout"),
    "kubectl-prefix": _prefixed(lambda r, o: f"[pod/{o.pod}/{o.container}] ", "stdout"),
    "stern": _prefixed(lambda r, o: f"{o.pod} {o.container} ", "stdout"),
    # `srun --label`: SGLang's ranks are processes of one task, task 0
    "srun": _prefixed(lambda r, o: "0: ", "stdout"), "quote": _quote,
    "cri": _cri, "json": _docker_json, "vector": _vector, "fluentbit": _fluentbit, "loki": _loki,
    "compose": _compose, "journald": _journald, "syslog": _syslog, "ray": _ray, "gcp": _gcp,
    "cloudwatch": _cloudwatch,
}
# the peeler's layer name (contract) for each of these envelopes
LAYER_OF = {"vector": "json", "fluentbit": "json", "loki": "json", "gcp": "severity", "cloudwatch": "rfc3339"}
REVERSED = {"loki", "gcp", "gcp:ms"}   # envelopes whose file lists the newest line first (not loki:forward)
ADDS_LINES = {"ray"}         # envelopes that add lines of their own


def _stream_of(text: str) -> str:
    # Python logging and tracebacks go to stderr; uvicorn's access log goes to stdout
    return "stdout" if 'HTTP/1.1"' in text else "stderr"


def wrap_with_origins(lines: Sequence[str], envelope: str, options: Options | None = None
                      ) -> tuple[list[str], list[int | None]]:
    """The wrapped lines, and for each the 1-based number of the input line it came from (None: added)."""
    opts = options or Options()
    times = collector_times(lines, opts.base)
    recs = [Record(t, i, ns, _stream_of(t)) for i, (t, ns) in enumerate(zip(lines, times))]
    # innermost first; each outer collector sees the line a little later than the one inside it
    for depth, spec in enumerate(reversed(envelope.split("+"))):
        name, _, variant = spec.partition(":")
        if name not in LAYERS:
            raise ValueError(f"unknown envelope {name!r} (known: {', '.join(LAYERS)})")
        if depth:
            recs = [replace(r, ns=r.ns + 211_000) for r in recs]
        recs = LAYERS[name](recs, opts, variant)
    return [r.text for r in recs], [None if r.src is None else r.src + 1 for r in recs]


def wrap_lines(lines: Sequence[str], envelope: str, options: Options | None = None) -> list[str]:
    return wrap_with_origins(lines, envelope, options)[0]


def source_line_of(origins: Sequence[int | None], wrapped_line: int) -> int | None:
    """The input line (1-based) that wrapped line `wrapped_line` (1-based) came from."""
    return origins[wrapped_line - 1] if 1 <= wrapped_line <= len(origins) else None


def is_reversed(envelope: str) -> bool:
    return any(spec in REVERSED for spec in envelope.split("+"))


def split_log(data: bytes) -> list[str]:
    """A plain log's lines as `grep -n` numbers them (bytes kept exactly, via surrogateescape)."""
    text = data.decode("utf-8", "surrogateescape")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def join_log(lines: Sequence[str]) -> bytes:
    return "".join(ln + "\n" for ln in lines).encode("utf-8", "surrogateescape")


def wrap_file(src: str | Path, dst: str | Path, envelope: str, options: Options | None = None
              ) -> list[int | None]:
    data = sys.stdin.buffer.read() if str(src) == "-" else Path(src).read_bytes()
    out, origins = wrap_with_origins(split_log(data), envelope, options)
    Path(dst).write_bytes(join_log(out))
    return origins


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("envelope", help=f"layers joined by +, outermost first; known: {', '.join(LAYERS)}")
    ap.add_argument("input", help="plain log, or - for stdin")
    ap.add_argument("-o", "--output", help="output file (default stdout)")
    ap.add_argument("--split", type=int, default=SPLIT_BYTES, help="bytes per CRI / docker partial record")
    ap.add_argument("--map", help="write `wrapped_line<TAB>input_line` rows here")
    a = ap.parse_args(argv)
    try:
        data = sys.stdin.buffer.read() if a.input == "-" else Path(a.input).read_bytes()
        out, origins = wrap_with_origins(split_log(data), a.envelope, Options(split=max(a.split, 1)))
    except (OSError, ValueError) as e:
        print(f"wrap_log: {a.input}: {e}", file=sys.stderr)
        return 2
    if a.output:
        Path(a.output).write_bytes(join_log(out))
    else:
        sys.stdout.buffer.write(join_log(out))
    if a.map:
        Path(a.map).write_text("".join(f"{i}\t{'' if o is None else o}\n" for i, o in enumerate(origins, 1)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

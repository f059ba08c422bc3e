"""The JSON envelope layer (envelope.py's `json`): docker json-file, fluent-bit, Vector, Loki / logcli
jsonl, GCP exports and `journalctl -o json` records, with JSON's string escapes undone by `json.loads`.

A line that is not a JSON object (or is nested past the parser's depth) is not this layer's: it stays
as it is. Which field holds the text and which hold the pod, container, node, ... is a table per
collector (`_JSON_ATTRS`): nested objects by their path, or dotted keys as some exporters flatten them.
"""
from __future__ import annotations

import json

Attrs = dict[str, str]
# what one layer makes of a line: (rest of the line, what the layer said, partial-record stream or None)
Peeled = tuple[str, Attrs | None, str | None]

_TEXT_KEYS = ("log", "message", "msg", "line", "textPayload", "MESSAGE")
_TIME_KEYS = ("time", "timestamp", "@timestamp", "date", "ts", "__REALTIME_TIMESTAMP")
# attrs key: where collectors put it (nested dicts by their path, dotted keys as exporters flatten them)
_JSON_ATTRS = (
    ("pod", ("kubernetes.pod_name", "resource.labels.pod_name", "labels.pod", "labels.pod_name")),
    ("container", ("kubernetes.container_name", "resource.labels.container_name", "labels.container",
                   "labels.container_name")),
    ("namespace", ("kubernetes.namespace_name", "kubernetes.pod_namespace", "resource.labels.namespace_name",
                   "labels.namespace")),
    ("k8s_node", ("kubernetes.host", "kubernetes.pod_node_name", "labels.node_name", "labels.node")),
    ("host", ("host", "hostname", "_HOSTNAME", "labels.host", "labels.hostname", "labels.instance")),
    ("ip", ("kubernetes.pod_ip",)),
    ("unit", ("SYSLOG_IDENTIFIER", "_SYSTEMD_UNIT", "labels.job")),
    ("pid", ("_PID",)),
    ("severity", ("severity",)),
    ("stream", ("stream", "labels.stream")),
)


def _lookup(record: dict, path: str) -> object:
    value = record.get(path)
    if value is not None or "." not in path:
        return value
    node: object = record
    for part in path.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def peel_json(t: str) -> Peeled | None:
    """A JSON record's text (`log`, `message`, `msg`, `line`, …), what its fields say, and the stream of
    a docker partial record."""
    if t[:1] != "{" or not t.rstrip().endswith("}"):
        return None
    try:
        record = json.loads(t)
    except (ValueError, RecursionError):  # not JSON after all, or nested past the parser's depth
        return None
    if not isinstance(record, dict):
        return None
    key = next((k for k in _TEXT_KEYS if isinstance(record.get(k), str)), None)
    if key is None:
        payload = record.get("jsonPayload")
        if not (isinstance(payload, dict) and isinstance(payload.get("message"), str)):
            return None
        text = payload["message"]
    else:
        text = record[key]
    attrs: Attrs = {}
    for name, paths in _JSON_ATTRS:
        for path in paths:
            value = _lookup(record, path)
            if isinstance(value, (str, int)) and not isinstance(value, bool) and value != "":
                attrs[name] = str(value)
                break
    when = next((record[k] for k in _TIME_KEYS if isinstance(record.get(k), (str, int, float))), None)
    if when is not None and not isinstance(when, bool):
        attrs["time"] = str(when)
    partial = None
    if key == "log" and "stream" in record and "time" in record:
        # docker json-file: a record whose log does not end in a newline was split (at 16 KiB) and
        # goes on in the next one; fluent-bit's CRI parsers say so in `logtag` / `_p` instead
        tag = record.get("logtag", record.get("_p"))
        done = tag != "P" if isinstance(tag, str) else text.endswith("\n")
        if not done:
            partial = str(record.get("stream"))
    if text.endswith("\n"):
        text = text[:-1]
        text = text.removesuffix("\r")
    return text, attrs, partial

"""Two runs side by side, and the first point where they diverge.

Launch order is the axis: server args (what was asked) → free memory after distributed init → weights →
KV pool → graphs → ready → serving. The first quantity that differs beyond its noise, or the first stage
one run reached and the other did not, is what the user reads first.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from logdoctor.diagnosis.ranking import Report
from logdoctor.run.memory import analyse
from logdoctor.run.model import STAGES

_IGNORED_ARGS = {"random_seed", "port", "host", "nccl_port", "dist_init_addr", "served_model_name", "file_storage_path",
                 "download_dir", "log_level", "log_level_http", "api_key", "crash_dump_folder", "tokenizer_path"}
# (label, attribute of the memory analysis, tolerance in GiB / units)
_MEMORY_STEPS = [
    ("free memory before weights", "pre_load_free_gib", 0.02),
    ("free memory after weights", "post_load_free_gib", 0.02),
    ("weights", "weights_gib", 0.02),
    ("KV cache", "kv_cache_gib", 0.02),
    ("KV tokens", "kv_tokens", 0),
    ("reserve for activations and graphs", "reserve_gib", 0.02),
    ("CUDA-graph memory", "graph_gib", 0.02),
]


@dataclass
class Comparison:
    a: str
    b: str
    arg_diffs: list[tuple[str, Any, Any]] = field(default_factory=list)
    stage_rows: list[tuple[str, str, str]] = field(default_factory=list)
    memory_rows: list[tuple[str, Any, Any]] = field(default_factory=list)
    rank_rows: list[tuple[str, str, str]] = field(default_factory=list)
    outcome_rows: list[tuple[str, Any, Any]] = field(default_factory=list)
    divergence: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": self.a, "b": self.b,
            "server_args": [{"arg": k, "a": x, "b": y} for k, x, y in self.arg_diffs],
            "stages": [{"stage": s, "a": x, "b": y} for s, x, y in self.stage_rows],
            "memory": [{"quantity": q, "a": x, "b": y} for q, x, y in self.memory_rows],
            "ranks": [{"rank": r, "a": x, "b": y} for r, x, y in self.rank_rows],
            "outcome": [{"what": w, "a": x, "b": y} for w, x, y in self.outcome_rows],
            "divergence": self.divergence,
        }


def _stage_text(report: Report, name: str) -> str:
    st = report.run.stages.get(name)
    if st is None:
        return "not reached"
    dur = f", took {st.duration_s:.0f} s" if st.duration_s is not None else ""
    return f"reached (line {st.first_line}{dur})"


def _rank_text(rm: Any) -> str:
    f = lambda v: "?" if v is None else f"{v:.2f}"  # noqa: E731
    return (f"before {f(rm.free_before_weights_gib)} after {f(rm.free_after_weights_gib)} "
            f"KV {f(rm.kv_gib)} pool-end {f(rm.pool_end_free_gib)} graphs {f(rm.graph_gib)}")


def compare(ra: Report, rb: Report) -> Comparison:
    c = Comparison(ra.source, rb.source)
    sa, sb = ra.run.server_args, rb.run.server_args
    for k in sorted(set(sa) | set(sb)):
        if k in _IGNORED_ARGS:
            continue
        if sa.get(k) != sb.get(k):
            c.arg_diffs.append((k, sa.get(k, "(absent)"), sb.get(k, "(absent)")))
    for name in STAGES:
        c.stage_rows.append((name, _stage_text(ra, name), _stage_text(rb, name)))
    ma, mb = analyse(ra.run), analyse(rb.run)
    for label, attr, _ in _MEMORY_STEPS:
        c.memory_rows.append((label, getattr(ma, attr), getattr(mb, attr)))
    c.memory_rows.append(("effective mem_fraction_static", ma.effective_mem_fraction_static, mb.effective_mem_fraction_static))
    ranks_a = {r.rank: r for r in ra.run.rank_list()}
    ranks_b = {r.rank: r for r in rb.run.rank_list()}
    for rank in sorted(set(ranks_a) | set(ranks_b), key=lambda x: (len(x), x)):
        c.rank_rows.append((rank, _rank_text(ranks_a[rank]) if rank in ranks_a else "-",
                            _rank_text(ranks_b[rank]) if rank in ranks_b else "-"))
    ba, bb = ra.run.batches, rb.run.batches
    c.outcome_rows = [
        ("verdict", ra.verdict, rb.verdict),
        ("diagnosis", _diag(ra), _diag(rb)),
        ("gen throughput median (tok/s)", ba.get("gen_throughput_median"), bb.get("gen_throughput_median")),
        ("peak token usage", ba.get("peak_token_usage"), bb.get("peak_token_usage")),
    ]
    c.divergence = _divergence(ra, rb, ma, mb, c.arg_diffs)
    return c


def _diag(r: Report) -> str:
    p = r.primary
    return "-" if p is None else f"{p.rule.id} {p.category}: {p.rule.title} (line {p.position})"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.2f}"
    return str(v)


def _divergence(ra: Report, rb: Report, ma: Any, mb: Any, arg_diffs: list[tuple[str, Any, Any]]) -> list[str]:
    out: list[str] = []
    if arg_diffs:
        shown = ", ".join(f"{k} {_fmt(x)} → {_fmt(y)}" for k, x, y in arg_diffs[:6])
        out.append(f"asked differently: {shown}" + (f" (+{len(arg_diffs) - 6} more)" if len(arg_diffs) > 6 else ""))
    last_a, last_b = ra.run.last_stage, rb.run.last_stage
    end_a = "ready" if ra.run.ready else f"stopped at {last_a or 'the start'}"
    end_b = "ready" if rb.run.ready else f"stopped at {last_b or 'the start'}"
    for label, attr, tol in _MEMORY_STEPS:
        x, y = getattr(ma, attr), getattr(mb, attr)
        if x is None or y is None:
            continue
        if abs(float(x) - float(y)) > tol:
            delta = float(y) - float(x)
            unit = "" if attr == "kv_tokens" else " GiB"
            amount = f"{abs(delta):,.0f}" if attr == "kv_tokens" else (
                f"{abs(delta) * 1024:.0f} MiB" if abs(delta) < 1 else f"{abs(delta):.2f}")
            more_less = "more" if delta > 0 else "less"
            out.append(f"first difference in launch order: {label} — B had {amount}{'' if 'MiB' in amount else unit} "
                       f"{more_less} than A ({_fmt(x)} vs {_fmt(y)}); A {end_a}, B {end_b}.")
            break
    if ra.verdict != rb.verdict or ra.run.last_stage != rb.run.last_stage:
        for name in STAGES:
            ina, inb = name in ra.run.stages, name in rb.run.stages
            if ina != inb:
                who, other = ("A", "B") if ina else ("B", "A")
                failed = rb if ina else ra
                cause = f": {failed.primary.rule.title}" if failed.primary else ""
                out.append(f"{who} reached {name}, {other} did not{cause}.")
                break
    if not out:
        out.append("no difference in arguments, stages or memory beyond rounding")
    return out


def comparison_text(c: Comparison) -> str:
    out = [f"A: {c.a}", f"B: {c.b}", ""]
    out.append("Where they diverge")
    out.extend(f"  - {d}" for d in c.divergence)
    w = 34

    def section(title: str, rows: list[tuple[str, Any, Any]]) -> None:
        if not rows:
            return
        out.append("")
        out.append(f"{title:<{w}} {'A':<44} B")
        for k, x, y in rows:
            mark = " " if _fmt(x) == _fmt(y) else "*"
            out.append(f"{mark} {k:<{w - 2}} {_fmt(x):<44} {_fmt(y)}")

    section("server args that differ", c.arg_diffs)
    section("stages", c.stage_rows)
    section("memory (GiB, min over ranks)", c.memory_rows)
    section("per rank", c.rank_rows)
    section("outcome", c.outcome_rows)
    return "\n".join(out)

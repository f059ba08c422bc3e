"""Two runs side by side, told in the order a person reads them.

1. Where they part: the launch stage where one run fails or stops while the other goes on, with the line
   of each side that shows it (and, in graph capture, at which graph).
2. The flags that differ, those that change memory or the launch first (ordered by whether they act on the
   stage where the runs part, then by a fixed relevance list); other differing args after; args present on
   one side only in one line.
3. Memory per launch stage with the values in force (free after distributed init, after the weights, after
   the KV pool, after the graphs), never the configured fraction where the numbers say another was used,
   and the delta that decided it, phrased from the numbers only.

Nothing unknown is shown as `None`/`nan`/`?` in text: it is named ("not in B's log"); JSON keeps null.
Graph progress comes from `run/graph_memory.py` when it is there (imported lazily; without it the capture
is described from the stage lines alone).
"""
from __future__ import annotations

import math
from typing import Any

from logdoctor.diagnosis.ranking import Report
from logdoctor.many.compare_flags import FlagDiff, diff_args
from logdoctor.many.compare_text import amount as _amount
from logdoctor.many.compare_text import comparison_markdown, comparison_text
from logdoctor.many.compare_text import more_less as _more_less
from logdoctor.many.compare_text import value_text as _value_text
from logdoctor.records import asdict, dataclass, field
from logdoctor.run.memory import MemoryAnalysis, analyse
from logdoctor.run.model import STAGES, Run

STAGE_WORDS = {"init": "distributed init", "weights": "weight loading", "kv_pool": "the KV pool",
               "graph_capture": "graph capture", "ready": "ready"}
SCHEMA = "logdoctor.compare/1"
NOISE_GIB = 0.015          # the log prints GB with 2 decimals: differences below are rounding


@dataclass
class MemoryRow:
    key: str
    label: str
    a: float | int | None
    b: float | int | None
    a_note: str | None = None   # why a value is missing ("not in A's log", "not reached: …")
    b_note: str | None = None
    unit: str = "GiB"

    @property
    def delta(self) -> float | None:
        # a note on a present value says it covers less (a capture that died): no like-for-like delta
        if self.a is None or self.b is None or self.a_note or self.b_note:
            return None
        return round(float(self.b) - float(self.a), 4)


@dataclass
class Comparison:
    a: str
    b: str
    parting: dict[str, Any] = field(default_factory=dict)
    flags: list[FlagDiff] = field(default_factory=list)      # the flags that matter, by relevance
    other_args: list[FlagDiff] = field(default_factory=list)
    one_sided: dict[str, Any] = field(default_factory=dict)
    not_compared: list[str] = field(default_factory=list)
    memory: list[MemoryRow] = field(default_factory=list)
    memory_basis: dict[str, Any] = field(default_factory=dict)
    decided: list[str] = field(default_factory=list)
    stage_rows: list[tuple[str, str, str]] = field(default_factory=list)
    rank_rows: list[tuple[str, str, str]] = field(default_factory=list)
    outcome_rows: list[tuple[str, Any, Any]] = field(default_factory=list)
    divergence: list[str] = field(default_factory=list)      # the lead sentences, in reading order

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "a": self.a, "b": self.b,
            "divergence": self.divergence,
            "parting": self.parting,
            "server_args": [_flag_dict(f) for f in self.flags + self.other_args],
            "server_args_one_sided": self.one_sided,
            "server_args_not_compared": self.not_compared,
            "memory": [{"key": r.key, "quantity": r.label, "unit": r.unit, "a": _json_num(r.a), "b": _json_num(r.b),
                        "delta": _json_num(r.delta), "a_note": r.a_note, "b_note": r.b_note} for r in self.memory],
            "memory_basis": self.memory_basis,
            "decided": self.decided,
            "stages": [{"stage": s, "a": x, "b": y} for s, x, y in self.stage_rows],
            "ranks": [{"rank": r, "a": x, "b": y} for r, x, y in self.rank_rows],
            "outcome": [{"what": w, "a": _json_num(x), "b": _json_num(y)} for w, x, y in self.outcome_rows],
        }


def _flag_dict(f: FlagDiff) -> dict[str, Any]:
    d = asdict(f)
    d["matters"] = f.area is not None
    return d


def _json_num(v: Any) -> Any:
    return None if isinstance(v, float) and not math.isfinite(v) else v


# ------------------------------------------------------------------------------------------------
# what each run shows


def graph_progress(run: Run) -> Any:
    """GraphMemory of the run (run/graph_memory.py), or None when that module or a capture is missing."""
    try:
        from logdoctor.run.graph_memory import graph_memory
    except ImportError:  # the graph fit is optional: the comparison reads the stage lines without it
        return None
    return graph_memory(run)


def _failure(r: Report) -> tuple[int | None, str | None, str | None]:
    """(line, text, title) of what stopped the run: its root-cause diagnosis, else its first failure."""
    p = r.primary
    if p is not None and p.counted:
        ev = p.evidence[0] if p.evidence else None
        return p.position, (ev.text if ev else None), p.rule.title
    if r.run.failures:
        f = r.run.failures[0]
        return f.line, f.text, None
    return None, None, None


def _first_stage(run: Run) -> str | None:
    return next((s for s in STAGES if s in run.stages), None)


def _graph_words(g: Any) -> str | None:
    """"graph 11 of 52 (bs=352)" for a capture that died, from graph_memory's progress."""
    if g is None or g.failed_at_bs is None and g.graphs_done is None:
        return None
    if g.finished or g.graphs_done is None:
        return None
    n = f"graph {g.graphs_done + 1}" + (f" of {g.graphs_total}" if g.graphs_total else "")
    return n + (f" (bs={g.failed_at_bs})" if g.failed_at_bs is not None else "")


# ------------------------------------------------------------------------------------------------
# 1. where they part


def _parting(ra: Report, rb: Report, ga: Any, gb: Any) -> dict[str, Any]:
    run_a, run_b = ra.run, rb.run
    out: dict[str, Any] = {"stage": None, "stops": None, "summary": "", "a": None, "b": None, "graph": None}
    if run_a.ready and run_b.ready:
        out["summary"] = "both runs reached ready: the launches do not part"
        return out
    if run_a.ready or (not run_b.ready and _reach(run_a) > _reach(run_b)):
        stop, go, stop_name, go_name, g_stop, g_go = rb, ra, "B", "A", gb, ga
    elif run_b.ready or _reach(run_b) > _reach(run_a):
        stop, go, stop_name, go_name, g_stop, g_go = ra, rb, "A", "B", ga, gb
    else:
        return _both_stopped(ra, rb, out, ga, gb)
    stage = stop.run.last_stage or _first_stage(stop.run)
    out["stage"], out["stops"] = stage, stop_name
    line, text, title = _failure(stop)
    where = STAGE_WORDS.get(stage or "", "the start")
    graph = _graph_words(g_stop) if stage == "graph_capture" else None
    if graph is not None:
        out["graph"] = {"side": stop_name, "graphs_done": g_stop.graphs_done, "graphs_total": g_stop.graphs_total,
                        "failed_at_bs": g_stop.failed_at_bs}
    if line is not None:
        what = "ran out of memory" if _is_oom(text, title) else "failed"
        at = f" at {graph}" if graph else f" in {where}"
        lead = f"{stop_name} {what}{at}"
    else:
        lead = f"{stop_name}'s log ends in {where} with no error" + (f" after {graph}" if graph else "")
    go_end = _went_on(go, g_go, stage)
    out["summary"] = f"{lead}, while {go_name} {go_end}."
    out[stop_name.lower()] = {"line": line, "text": text, "title": title}
    nxt = _next_stage_line(go.run, stage)
    out[go_name.lower()] = {"line": nxt[1], "text": _go_evidence(go.run, g_go, stage, nxt[0]), "title": None}
    if graph is not None and g_stop.samples:
        after = f"after {g_stop.graphs_done} graphs" if g_stop.graphs_done else "before the first graph"
        out[stop_name.lower()]["progress"] = (f"last capture progress: bs={g_stop.samples[-1][0]}, "
                                              f"{g_stop.samples[-1][1]:.2f} GiB free {after}")
    first = _first_stage(stop.run)
    if first not in (None, "init") and "init" in go.run.stages:
        out["note"] = (f"{stop_name}'s log starts at {STAGE_WORDS[first]} (line {stop.run.stages[first].first_line}):"
                       " it is a fragment of a launch")
    return out


def _used_after(g: Any, done: int) -> float | None:
    """GiB a capture had used once `done` graphs were captured, from its own progress frames."""
    if g.begin_free_gib is None or not done:
        return None
    at = [s[1] for s in g.samples if len(s) > 2 and s[2] == done]
    return round(g.begin_free_gib - at[0], 2) if at else None


def _reach(run: Run) -> int:
    return max((STAGES.index(s) for s in run.stages if s in STAGES), default=-1)


def _is_oom(text: str | None, title: str | None) -> bool:
    blob = f"{text or ''} {title or ''}".lower()
    return "out of memory" in blob or "outofmemory" in blob


def _went_on(go: Report, g: Any, stage: str | None) -> str:
    if stage == "graph_capture" and g is not None and g.finished and g.graphs_total:
        rest = "reached ready" if go.run.ready else f"stopped at {STAGE_WORDS.get(go.run.last_stage or '', 'the start')}"
        return f"captured all {g.graphs_total} graphs and {rest}"
    if go.run.ready:
        return "went on to ready"
    return f"went on to {STAGE_WORDS.get(go.run.last_stage or '', 'the start')}"


def _next_stage_line(run: Run, stage: str | None) -> tuple[str | None, int | None]:
    """The first stage `run` reached after `stage`, and its line: the line that shows it went on."""
    after = STAGES[STAGES.index(stage) + 1:] if stage in STAGES else STAGES
    for s in after:
        st = run.stages.get(s)
        if st is not None:
            return s, st.first_line
    return None, None


def _go_evidence(run: Run, g: Any, stage: str | None, reached: str | None) -> str | None:
    if reached is None:
        return None
    text = f"reached {STAGE_WORDS[reached]}"
    if stage == "graph_capture" and g is not None and g.finished:
        ends = [rm.graph_end_free_gib for rm in run.rank_list() if rm.graph_end_free_gib is not None]
        used = f" using {g.total_gib:.2f} GiB" if g.total_gib is not None else ""
        left = f", {min(ends):.2f} GiB free after" if ends else ""
        text = f"captured {g.graphs_total or 'all'} graphs{used}{left}; {text}"
    return text


def _both_stopped(ra: Report, rb: Report, out: dict[str, Any], ga: Any, gb: Any) -> dict[str, Any]:
    stage = ra.run.last_stage or _first_stage(ra.run)
    out["stage"] = stage
    la, ta, tia = _failure(ra)
    lb, tb, tib = _failure(rb)
    out["a"] = {"line": la, "text": ta, "title": tia}
    out["b"] = {"line": lb, "text": tb, "title": tib}
    where = STAGE_WORDS.get(stage or "", "the start")
    if tia == tib and tia is not None:
        out["summary"] = f"both runs stopped in {where} the same way: {tia}"
    else:
        out["summary"] = (f"both runs stopped in {where}: A {'— ' + tia if tia else 'with no error'}, "
                          f"B {'— ' + tib if tib else 'with no error'}")
    wa, wb = (_graph_words(ga), _graph_words(gb)) if stage == "graph_capture" else (None, None)
    if wa and wb:
        out["summary"] += f" — A at {wa}, B at {wb}"
    return out


# ------------------------------------------------------------------------------------------------
# 3. memory per stage, with the values in force


def _min(values: list[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return min(xs) if xs else None


def _max(values: list[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return max(xs) if xs else None


def _side_memory(r: Report, mem: MemoryAnalysis, g: Any) -> dict[str, Any]:
    ranks = r.run.rank_list()
    eff = mem.effective_mem_fraction_static
    P, A, KV = mem.pre_load_free_gib, mem.post_load_free_gib, mem.kv_cache_gib
    graphs_end = _min([rm.graph_end_free_gib for rm in ranks])
    ready_free = _min([rm.available_gpu_mem_gib for rm in ranks])
    return {
        "dist_init_used": _max([rm.dist_init_gib for rm in ranks]),
        "free_after_dist_init": P, "weights": mem.weights_gib, "free_after_weights": A,
        "kv_cache": KV, "kv_tokens": mem.kv_tokens,
        # the reserve the numbers show: P·(1 − m in force) = A − KV (never the configured m's)
        "reserve": round(P * (1 - eff), 2) if (P is not None and eff is not None) else
                   (round(A - KV, 2) if A is not None and KV is not None else None),
        "free_after_kv_pool": _min([rm.pool_end_free_gib for rm in ranks]),
        "free_at_capture_begin": _min([rm.graph_begin_free_gib for rm in ranks]),
        "graphs": None if _none_captured(g) else _graph_total(mem, g),
        "free_after_graphs": graphs_end if graphs_end is not None else ready_free,
        "free_at_last_graph": g.samples[-1][1] if (g is not None and g.samples and not g.finished) else None,
        "per_graph": g.per_graph_gib if g is not None and not _none_captured(g) else None,
    }


def _none_captured(g: Any) -> bool:
    return g is not None and not g.finished and g.graphs_done == 0


def _graph_total(mem: MemoryAnalysis, g: Any) -> float | None:
    if mem.graph_gib is not None:
        return mem.graph_gib
    return g.total_gib if g is not None else None


_ROWS = [  # (key, label, unit); launch order
    ("dist_init_used", "used by distributed init", "GiB"),
    ("free_after_dist_init", "free after distributed init (P)", "GiB"),
    ("weights", "weights", "GiB"),
    ("free_after_weights", "free after weights", "GiB"),
    ("kv_cache", "KV cache", "GiB"),
    ("kv_tokens", "KV tokens", "tokens"),
    ("reserve", "reserve for graphs + activations", "GiB"),
    ("free_after_kv_pool", "free after KV pool", "GiB"),
    ("free_at_capture_begin", "free at graph capture begin", "GiB"),
    ("per_graph", "graph memory per graph", "GiB"),
    ("graphs", "graph memory", "GiB"),
    ("free_after_graphs", "free after graphs", "GiB"),
]
_STAGE_OF_ROW = {"dist_init_used": "init", "free_after_dist_init": "init", "weights": "weights",
                 "free_after_weights": "weights", "kv_cache": "kv_pool", "kv_tokens": "kv_pool", "reserve": "kv_pool",
                 "free_after_kv_pool": "kv_pool", "free_at_capture_begin": "graph_capture", "per_graph": "graph_capture",
                 "graphs": "graph_capture", "free_after_graphs": "ready"}


def _missing_note(side: str, run: Run, key: str, graph: str | None, failed: bool) -> str:
    stage = _STAGE_OF_ROW[key]
    if key == "free_after_graphs" and run.stages.get("graph_capture") is not None and not run.ready and failed:
        return f"not reached: {side} ran out at {graph}" if graph else f"not reached: {side} stopped in graph capture"
    if key in ("graphs", "per_graph") and graph:
        return f"none captured: {side} ran out at {graph}" if graph.startswith("graph 1 ") else f"capture stopped at {graph}"
    if stage in STAGES and stage not in run.stages:
        return f"not reached in {side}'s log" if _reach(run) < STAGES.index(stage) else f"not in {side}'s log"
    return f"not in {side}'s log"


def _partial_note(key: str, g: Any) -> str | None:
    """The note on a graph figure of a capture that died: it covers only the graphs captured."""
    if key not in ("graphs", "per_graph") or g is None or g.finished or g.graphs_done is None:
        return None
    of = f" of {g.graphs_total}" if g.graphs_total else ""
    if g.graphs_done == 0:
        return "no graph captured"
    if key == "per_graph":
        return f"over the first {g.graphs_done}{of}"
    left = f", {g.samples[-1][1]:.2f} free after them" if g.samples else ""
    return f"first {g.graphs_done}{of} graphs{left}"


def _memory(ra: Report, rb: Report, ga: Any, gb: Any, c: Comparison) -> tuple[dict[str, Any], dict[str, Any]]:
    ma, mb = analyse(ra.run), analyse(rb.run)
    xa, xb = _side_memory(ra, ma, ga), _side_memory(rb, mb, gb)
    wa, wb = _graph_words(ga), _graph_words(gb)
    fa, fb = _failure(ra)[0] is not None, _failure(rb)[0] is not None
    for key, label, unit in _ROWS:
        a, b = xa[key], xb[key]
        if a is None and b is None:
            continue
        c.memory.append(MemoryRow(key, label, a, b,
                                  _partial_note(key, ga) if a is not None else _missing_note("A", ra.run, key, wa, fa),
                                  _partial_note(key, gb) if b is not None else _missing_note("B", rb.run, key, wb, fb), unit))
    c.memory_basis = {side: {"configured_mem_fraction_static": m.configured_mem_fraction_static,
                             "effective_mem_fraction_static": m.effective_mem_fraction_static,
                             "free_at_last_graph_gib": x["free_at_last_graph"]}
                      for side, m, x in (("a", ma, xa), ("b", mb, xb))}
    return xa, xb


def _decided(c: Comparison, xa: dict[str, Any], xb: dict[str, Any], ga: Any, gb: Any) -> list[str]:
    """The delta that decided it, from the numbers only; a cause only as what flags and numbers show together."""
    out: list[str] = []
    stops = c.parting.get("stops")
    graph = c.parting.get("graph")
    first = next((r for r in c.memory if r.unit == "GiB" and r.delta is not None and abs(r.delta) > NOISE_GIB
                  and r.key != "dist_init_used"), None)
    end = ""
    if stops and graph:
        end = f" and ran out at graph {graph['graphs_done'] + 1}" + (f" of {graph['graphs_total']}" if graph["graphs_total"] else "")
    elif stops and c.parting.get(stops.lower(), {}).get("line") is not None:
        end = f" and stopped in {STAGE_WORDS.get(c.parting.get('stage') or '', 'the start')}"
    if first is not None:
        who, other = ("B", "A") if stops != "A" else ("A", "B")
        d = float(first.delta or 0.0) * (1 if who == "B" else -1)
        va, vb = (first.a, first.b) if who == "B" else (first.b, first.a)
        # rows before it that one log lacks: the first difference is only the first one both logs show
        gap = any(r.unit == "GiB" and (r.a is None or r.b is None) for r in c.memory[:c.memory.index(first)])
        lead = "Of the figures both logs print, the first that differs: " if gap else ""
        sent = (f"{who} had {_amount(d)} {_more_less(d)} {first.label.split(' (')[0]} than {other} "
                f"({vb:.2f} vs {va:.2f} GiB){end}.")
        out.append(lead + sent)
    elif end:
        out.append(f"{stops} had the same memory as the other run up to the stage where it stopped{end}.")
    per_a, per_b = xa.get("per_graph"), xb.get("per_graph")
    if graph and per_a is not None and per_b is not None and ga is not None and gb is not None:
        stop_g, go_g = (gb, ga) if stops == "B" else (ga, gb)
        ps, pg = (per_b, per_a) if stops == "B" else (per_a, per_b)
        done = stop_g.graphs_done or 0
        free_last = stop_g.samples[-1][1] if stop_g.samples else None
        used = (stop_g.begin_free_gib - free_last) if (stop_g.begin_free_gib is not None and free_last is not None) else None
        go_name = "A" if stops == "B" else "B"
        sent = (f"the capture decided it: {stops}'s graphs took {ps:.2f} GiB each" +
                (f" ({used:.2f} GiB for the first {done}, leaving {free_last:.2f} GiB)" if used is not None else ""))
        # the first graphs are the largest (SGLang captures from the largest batch down): only the same graphs compare
        go_same = _used_after(go_g, done)
        if go_same is not None:
            sent += f"; {go_name}'s first {done} took {go_same:.2f} GiB"
        elif go_g.total_gib is not None and go_g.graphs_total:
            sent += (f"; {go_name}'s log shows only its whole capture ({go_g.total_gib:.2f} GiB for all "
                     f"{go_g.graphs_total}), not its first {done} graphs")
        sent += "."
        out.append(sent[0].upper() + sent[1:])
    ra_, rb_ = xa.get("reserve"), xb.get("reserve")
    if ra_ is not None and rb_ is not None and stops:
        ea = c.memory_basis["a"]["effective_mem_fraction_static"]
        eb = c.memory_basis["b"]["effective_mem_fraction_static"]
        d = rb_ - ra_
        if ea is not None and eb is not None and abs(ea - eb) < 0.005:
            same = "the same" if abs(d) < 0.005 else f"{_amount(d)} {_more_less(d)} in B"
            out.append(f"With the same fraction in force (m ≈ {ea:.3f} in both), the reserve for graphs and activations "
                       f"was {same} ({ra_:.2f} vs {rb_:.2f} GiB): the difference came after the KV pool was sized.")
        elif ea is not None and eb is not None and abs(d) >= 0.005:
            out.append(f"With m in force {eb:.3f} in B against {ea:.3f} in A, B's reserve for graphs and activations was "
                       f"{_amount(d)} {'larger' if d > 0 else 'smaller'} ({rb_:.2f} vs {ra_:.2f} GiB).")
    out.extend(_flag_reading(c, first))
    return out


def _flag_reading(c: Comparison, first: MemoryRow | None) -> list[str]:
    """What the differing flags and the numbers show together (never a cause stated as fact)."""
    if not c.flags:
        missing = c.one_sided.get("no_server_args_line")
        return ["No flag that matters for memory or the launch differs" +
                (f" among the args both logs print: {missing}'s log has no server_args line to compare." if missing
                 else " among the args both logs print." if c.one_sided.get("summary") else ".")]
    f = c.flags[0]
    rest = f" ({len(c.flags) - 1} more below)" if len(c.flags) > 1 else ""
    s = f"Of the flags that matter here, {f.arg} differs first (A {_value_text(f.a)}, B {_value_text(f.b)}){rest}"
    if f.arg == "disable_custom_all_reduce":
        on = "B" if f.b is False else "A"
        s += (f": custom all-reduce was on in {on}, which allocates buffers at distributed init and runs inside the "
              f"captured graphs")
        if first is not None and first.key == "free_after_dist_init":
            s += f"; the {_amount(first.delta or 0)} difference after distributed init is consistent with those buffers"
        s += ". The log does not say what used the memory."
    else:
        s += f": it {f.why[0].lower() + f.why[1:]}." if f.why and f.why.split()[0].endswith("s") else f" ({f.why})."
    return [s]


# ------------------------------------------------------------------------------------------------


def _stage_text(report: Report, name: str) -> str:
    st = report.run.stages.get(name)
    if st is None:
        return "not reached" if _reach(report.run) < STAGES.index(name) else "not in the log"
    dur = f", took {st.duration_s:.0f} s" if st.duration_s is not None else ""
    return f"reached (line {st.first_line}{dur})"


def _rank_text(rm: Any) -> str:
    parts = [(n, v) for n, v in (("before", rm.free_before_weights_gib), ("after", rm.free_after_weights_gib),
                                 ("KV", rm.kv_gib), ("pool-end", rm.pool_end_free_gib), ("graphs", rm.graph_gib)) if v is not None]
    return " ".join(f"{n} {v:.2f}" for n, v in parts) or "no memory lines"


def _diag(r: Report) -> str:
    p = r.primary
    return "no failure diagnosed" if p is None else f"{p.rule.id} {p.category}: {p.rule.title} (line {p.position})"


def compare(ra: Report, rb: Report) -> Comparison:
    c = Comparison(ra.source, rb.source)
    ga, gb = graph_progress(ra.run), graph_progress(rb.run)
    c.parting = _parting(ra, rb, ga, gb)
    c.flags, c.other_args, c.one_sided, c.not_compared = diff_args(ra.run.server_args, rb.run.server_args,
                                                                    c.parting.get("stage"))
    xa, xb = _memory(ra, rb, ga, gb, c)
    c.decided = _decided(c, xa, xb, ga, gb)
    c.divergence = [c.parting["summary"]] + ([c.parting["note"] + "."] if c.parting.get("note") else []) + c.decided[:1]
    for name in STAGES:
        c.stage_rows.append((name, _stage_text(ra, name), _stage_text(rb, name)))
    ranks_a = {r.rank: r for r in ra.run.rank_list()}
    ranks_b = {r.rank: r for r in rb.run.rank_list()}
    for rank in sorted(set(ranks_a) | set(ranks_b), key=lambda x: (len(x), x)):
        c.rank_rows.append((rank, _rank_text(ranks_a[rank]) if rank in ranks_a else "not in A's log",
                            _rank_text(ranks_b[rank]) if rank in ranks_b else "not in B's log"))
    ba, bb = ra.run.batches, rb.run.batches
    c.outcome_rows = [("verdict", ra.verdict, rb.verdict), ("diagnosis", _diag(ra), _diag(rb))] + [
        (label, ba.get(key), bb.get(key)) for label, key in (("gen throughput median (tok/s)", "gen_throughput_median"),
                                                             ("peak token usage", "peak_token_usage"))
        if ba.get(key) is not None or bb.get(key) is not None]
    return c


__all__ = ["Comparison", "FlagDiff", "MemoryRow", "compare", "comparison_markdown", "comparison_text", "graph_progress"]

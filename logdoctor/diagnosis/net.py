"""The broad net: after the rules, place a failure no rule names, from what the log still shows.

It reads the same events the rules read (never raw lines) and looks for clues in the log's end: a
vocabulary term in an error or warning line (net_data.Term: a phrase that points to a category), the
deepest recognised frame of a traceback whose exception line is cut off (net_data.Subsystem), or, failing
both, an error-looking last line. The strongest clue wins (weight, then the earliest); its diagnosis says
that it was inferred and from what, has a lower confidence than a rule, and gives the category's remedies.

When it runs: the rules found no failure and no ready line (`incomplete`: an error clue makes it
`failed`, a warning clue names the stall), or the only failure they found is a catch-all (`unknown`).
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from logdoctor.diagnosis.engine import Diagnosis, EventIndex, Evidence, is_wrapper, position, rules_named_it
from logdoctor.diagnosis.literals import fold_case
from logdoctor.diagnosis.net_data import CATEGORIES, NetData, Subsystem, Term
from logdoctor.diagnosis.rules import Rule
from logdoctor.events import KINDS, Event
from logdoctor.records import dataclass
from logdoctor.run.model import Run

TAIL_EVENTS = 120              # the events at the end of a log the net looks at
LAST_LINE_EVENTS = 6           # an error-looking line counts only among the very last events
MAX_SEARCH_CHARS = 4_000       # of one event's searchable text
MIN_WEIGHT_OVER_CATCHALL = 25  # a clue must weigh this much to replace a rule's "cause not in the log"
MIN_WEIGHT_OVER_WRAPPER = 70   # and only a strong clue names the wrapped error instead
NET_RULE_IDS = {c: f"NET{i:03d}" for i, c in enumerate(CATEGORIES, 1)}
_ERROR_KINDS = frozenset({"traceback", "cuda_error", "native_error", "fatal_signal", "killed", "cudart_error",
                          "nccl_error", "argparse_error"})
# an INFO line is no error whatever it says (NCCL prints "cannot open shared object file" at INFO in every
# log without a net plugin)
_INFO_LEVELS = frozenset({"INFO", "I", "DEBUG", "TRACE"})
# The kinds whose text the net reads: lines of other libraries, unrecognised lines, and SGLang's error,
# exit, watchdog and memory lines. A typed SGLang warning or info line ("Custom allreduce is disabled",
# "memory is not balanced") already has its meaning, which the rules know; its words are no clue.
_WARNING_KINDS = frozenset({"sigquit_received", "crash_dump", "progress", "python_warning", "memory_unbalanced",
                            "mem_fraction_reduced", "host_cache_allocating", "max_total_tokens_capped",
                            "kv_retract", "request_truncated", "cache_flushed"})
_SEARCHED_KINDS = frozenset(k for k, info in KINDS.items()
                            if info.phase in ("external", "other", "exit", "memory", "watchdog")) \
    - _WARNING_KINDS \
    | {"nccl_error", "cudart_error", "mooncake_init_failed", "p2p_test_failed", "graph_capture_failed"}


@dataclass
class Clue:
    category: str
    weight: int
    event: Event
    stage: str
    fatal: bool                       # an error (the launch failed) rather than a warning (it stalled)
    via: str                          # vocabulary | frames | last_line
    term: Term | None = None
    quote: str = ""                   # the matched text of the event
    subsystem: Subsystem | None = None
    frame: str = ""


class CompiledNet:
    """A net's terms prepared once per process: one RE2 scan finds which literal terms occur in a text;
    a regex term is compiled on first use, and only searched when a literal every match contains occurs."""

    def __init__(self, net: NetData) -> None:
        from logdoctor.diagnosis.literals import required_literals
        self.net = net
        self._by_text: dict[str, list[Term]] = {}          # lower-cased literal -> literal terms
        self._regex_by_lit: dict[str, list[Term]] = {}     # lower-cased required literal -> regex terms
        self._regex_always: list[Term] = []                # regex terms with no literal every match contains
        for t in net.terms:
            if t.text is not None:
                self._by_text.setdefault(t.text, []).append(t)
                continue
            lits = required_literals(t.regex or "")
            if lits is None or not all(lits[1]):
                self._regex_always.append(t)
            else:
                for lit in lits[1]:
                    self._regex_by_lit.setdefault(lit.lower(), []).append(t)
        self._literals = sorted(set(self._by_text) | set(self._regex_by_lit))
        self._scan = _literal_scanner(self._literals)
        self._rx: dict[str, Any] = {}
        self.subsystems = [s for s in net.subsystems if s.weight > 0]

    def term_hits(self, ev: Event, keep_subsumed: bool = False) -> list[tuple[Term, str]]:
        """The terms matching `ev` with the text each matched; a term is left out when a more specific one it
        is `subsumed_by` also matches, unless `keep_subsumed` (an example must match its own term)."""
        hits: list[tuple[Term, str]] = []
        seen: set[str] = set()
        for text in searchable(ev):
            low = fold_case(text)
            found = [x for x in self._literals if x in low] \
                if self._scan is not None and self._scan.search(low) is not None else []
            candidates: list[Term] = list(self._regex_always)
            for lit in found:
                for t in self._by_text.get(lit, ()):
                    if (t.kinds is None or ev.kind in t.kinds) and t.id not in seen:
                        at = low.find(lit)
                        hits.append((t, text[at:at + len(lit)]))
                        seen.add(t.id)
                candidates.extend(self._regex_by_lit.get(lit, ()))
            for t in candidates:
                if t.id in seen or (t.kinds is not None and ev.kind not in t.kinds):
                    continue
                m = self.regex(t).search(text)
                if m is not None:
                    hits.append((t, m.group(0)))
                    seen.add(t.id)
        if keep_subsumed:
            return hits
        ids = {t.id for t, _ in hits}
        return [(t, q) for t, q in hits if not ids.intersection(t.subsumed_by)]

    def regex(self, t: Term) -> Any:
        rx = self._rx.get(t.id)
        if rx is None:
            rx = self._rx[t.id] = _re2(t.regex)
        return rx

    def frame_hit(self, frames: list[str], cut: bool, serving: bool = False) -> tuple[Subsystem, str] | None:
        """The deepest frame in a deciding subsystem; the last frame of a cut traceback may be cut itself,
        so its function name matches as a prefix. Once the server was `serving` (after a ready line), code
        that places a traceback in graph capture or the warm-up (a model's forward) no longer does."""
        for depth, frame in enumerate(reversed(frames)):
            path, func = split_frame(frame)
            for s in self.subsystems:
                if serving and s.stage in ("graph_capture", "warmup"):
                    continue
                if s.path_part in path and _function_ok(s, func, cut and depth == 0):
                    return s, frame
        return None


def _literal_scanner(literals: list[str]) -> Any:
    """One RE2 alternation of every literal term (a DFA: linear in the text whatever the count)."""
    if not literals:
        return None
    import re

    import re2
    options = re2.Options()
    options.log_errors = False
    options.max_mem = 64 << 20
    return re2.compile("|".join(re.escape(x) for x in sorted(literals, key=len, reverse=True)), options)


def _function_ok(s: Subsystem, func: str, may_be_cut: bool) -> bool:
    if s.functions is None:
        return True
    if func in s.functions:
        return True
    return may_be_cut and len(func) >= 3 and any(f.startswith(func) for f in s.functions)


def split_frame(frame: str) -> tuple[str, str]:
    """`/a/b.py:12 in f` -> ("/a/b.py", "f")."""
    loc, _, func = frame.rpartition(" in ")
    path = loc.rpartition(":")[0] if ":" in loc else loc
    return path.replace("\\", "/"), func.strip()


def _re2(pattern: str | None) -> Any:
    from logdoctor.diagnosis.rules import compile_regex
    return compile_regex(pattern or "")


_COMPILED: dict[int, tuple[NetData, CompiledNet]] = {}


def compiled(net: NetData) -> CompiledNet:
    """A net compiled once per process (load_net caches the NetData itself)."""
    hit = _COMPILED.get(id(net))
    if hit is None or hit[0] is not net:
        hit = _COMPILED[id(net)] = (net, CompiledNet(net))
    return hit[1]


def searchable(ev: Event) -> list[str]:
    """What terms are matched against: the text, and for a traceback its exception lines."""
    out = [ev.text[:MAX_SEARCH_CHARS]] if ev.text else []
    if ev.kind == "traceback":
        f = ev.fields
        for exc, msg in [(f.get("exception"), f.get("message"))] + [
                (c.get("exception"), c.get("message")) for c in f.get("chain") or [] if isinstance(c, dict)]:
            if exc or msg:
                out.append(f"{exc or ''}: {msg or ''}"[:MAX_SEARCH_CHARS])
    elif isinstance(ev.fields.get("message"), str) and ev.fields["message"] not in ev.text:
        out.append(ev.fields["message"][:MAX_SEARCH_CHARS])
    if ev.kind == "nccl_log" and ev.fields.get("location"):
        # which NCCL source file printed it (`transport/p2p.cc:275`) is part of what the line says
        f = ev.fields
        out.append(f"{f['location']} NCCL {f.get('level') or ''} {f.get('message') or ''}"[:MAX_SEARCH_CHARS])
    return out


def _looks_like_error(ev: Event) -> bool:
    if ev.kind in _ERROR_KINDS:
        return True
    level = ev.fields.get("level")
    if ev.kind == "nccl_log":
        return level in ("WARN", "ERROR", "ABORT")
    if ev.kind in ("torch_log", "vllm_log"):
        return level in ("E", "F", "ERROR", "CRITICAL")
    if ev.kind == "unparsed":
        return _error_word(ev.text)
    return False


def _error_word(text: str) -> bool:
    head = text[:400]
    return any(w in head for w in ("Error:", "Exception:", "ERROR", "FATAL", "Fatal error", "error:")) \
        or head.rstrip().endswith(("Error", "Exception"))


def _is_warning(ev: Event) -> bool:
    level = ev.fields.get("level")
    return level in ("W", "WARNING", "WARN") and ev.kind != "nccl_log"


def collect_clues(index: EventIndex, net: CompiledNet, after_line: int = 0,
                  explained: frozenset[int] = frozenset()) -> list[Clue]:
    """Clues in the last TAIL_EVENTS events after `after_line` (a ready line, when the log has one), but
    not in lines a rule already explained as harmless (`explained`: their positions)."""
    picked = [i for i, ev in enumerate(index.events) if ev.line > after_line and ev.kind in _SEARCHED_KINDS
              and ev.fields.get("level") not in _INFO_LEVELS and position(ev) not in explained]
    picked = picked[-TAIL_EVENTS:]
    clues: list[Clue] = []
    last_events = set(picked[-LAST_LINE_EVENTS:])
    for i in picked:
        ev, stage = index.events[i], index.stages[i]
        error = _looks_like_error(ev)
        for term, quote in net.term_hits(ev):
            fatal = term.severity == "error" and not _is_warning(ev)
            clues.append(Clue(term.category, term.weight, ev, stage, fatal, "vocabulary", term=term, quote=quote))
        if ev.kind == "traceback":
            frames = [f for f in ev.fields.get("frames") or [] if isinstance(f, str)]
            cut = not ev.fields.get("exception")
            hit = net.frame_hit(frames, cut, serving=after_line > 0)
            if hit is not None:
                s, frame = hit
                clues.append(Clue(s.category, s.weight, ev, s.stage if stage == "args" and s.stage else stage,
                                  True, "frames", subsystem=s, frame=frame))
        if error and i in last_events:
            clues.append(Clue("unknown", 1, ev, stage, True, "last_line", quote=_evidence_text(ev)))
    return clues


def best_clue(clues: list[Clue]) -> Clue | None:
    """The strongest clue; at equal weight an error before a warning, then the earliest in the log."""
    if not clues:
        return None
    return min(clues, key=lambda c: (-c.weight, not c.fatal, position(c.event)))


def _evidence_text(ev: Event) -> str:
    if ev.kind == "traceback":
        exc, msg = ev.fields.get("exception"), (ev.fields.get("message") or "").split("\n", 1)[0]
        if exc:
            return f"{exc}: {msg}"[:300] if msg else exc
        frames = ev.fields.get("frames") or []
        return f"Traceback … {frames[-1]}"[:300] if frames else "Traceback (most recent call last):"
    return ev.text if len(ev.text) <= 300 else ev.text[:299] + "…"


def _rule_for(clue: Clue, net: NetData, title: str, remedies: list[str]) -> Rule:
    cat = clue.category
    path = Path(clue.term.path if clue.term else clue.subsystem.path if clue.subsystem else "rules/net")
    return Rule(id=NET_RULE_IDS[cat], name=f"net-{cat.replace('_', '-')}", title=title, category=cat,
                severity="error" if clue.fatal else "warning", fatal=clue.fatal, cascade=False,
                stall=not clue.fatal, priority=0, confidence=0.0, stage=clue.stage, versions="", anchor=None,
                selections={}, condition=None, condition_text="", explanation="", remedy=remedies, why="",
                references=[], examples={}, path=path, builtin=True, inferred=True)


def _where(ev: Event) -> str:
    rank = ev.ranks or (f"rank {ev.rank}" if ev.rank is not None else "")
    return f"line {position(ev)}" + (f" ({rank})" if rank else "")


_STAGE_WORDS = {"init": "distributed init", "weights": "weight loading", "kv_pool": "KV cache allocation",
                "graph_capture": "CUDA graph capture", "warmup": "HTTP server start and warm-up",
                "runtime": "serving"}


def explain(clue: Clue, net: NetData, has_stages: bool) -> tuple[str, str, list[str], dict[str, Any]]:
    """(title, explanation, remedies, inferred) for a clue; every sentence about the run cites the log."""
    headline = net.headlines.get(clue.category, clue.category.replace("_", " "))
    stage = _STAGE_WORDS.get(clue.stage)
    sentences: list[str] = []
    inferred: dict[str, Any] = {"from": clue.via, "weight": clue.weight}
    if clue.via == "vocabulary" and clue.term is not None:
        t = clue.term
        title = f"{headline} (inferred from a {t.library} message)"
        sentences.append(f"No rule names this failure; logdoctor placed it from its message vocabulary. "
                         f"At {_where(clue.event)} the log reads \u201c{_clip(clue.quote)}\u201d.")
        sentences.append(f"What this message generally means ({t.library}, {t.source.rstrip('.')}): "
                         f"{t.means.rstrip('.')}.")
        if clue.event.kind == "traceback" and not clue.event.fields.get("exception"):
            sentences.append("The traceback's exception line is cut off.")
        inferred.update({"term": t.id, "library": t.library})
        remedies = list(t.remedy) or list(net.remedies.get(clue.category, ()))
    elif clue.via == "frames" and clue.subsystem is not None:
        s = clue.subsystem
        title = f"{headline} (inferred from the traceback's frames)"
        path, func = split_frame(clue.frame)
        cut = not clue.event.fields.get("exception")
        sentences.append(f"No rule names this failure. The traceback at {_where(clue.event)} "
                         + ("ends without its exception line (cut off)." if cut else
                            f"ends in {clue.event.fields.get('exception')}, which no rule knows."))
        sentences.append(f"Its deepest recognised frame is {_short_path(path)} in {func} ({s.subsystem}).")
        sentences.append(f"About that code, in general: {s.means.rstrip('.')}.")
        inferred.update({"subsystem": s.id, "frame": clue.frame})
        remedies = list(s.remedy) or list(net.remedies.get(clue.category, ()))
    else:
        title = "The log ends with an error no rule or vocabulary term knows"
        sentences.append(f"No rule names this failure and no ready line follows: the log ends with an error line "
                         f"at {_where(clue.event)}, \u201c{_clip(clue.quote)}\u201d.")
        remedies = list(net.remedies.get("unknown", ()))
    if stage and has_stages:
        sentences.append(f"The last launch stage the log reached before this line is {stage}.")
    elif clue.subsystem is not None and clue.subsystem.stage in _STAGE_WORDS:
        sentences.append(f"The log has no stage lines; that code runs during "
                         f"{_STAGE_WORDS[clue.subsystem.stage]}.")
    if not clue.fatal:
        sentences.append("The line is a warning and the log stops after it: a stall, or a log cut before the "
                         "outcome.")
    return title, " ".join(sentences), remedies, inferred


def _short_path(path: str) -> str:
    """From the package directory on: `sglang/srt/...`, `torch/...`."""
    for marker in ("/site-packages/", "/dist-packages/"):
        at = path.rfind(marker)
        if at >= 0:
            return path[at + len(marker):]
    at = path.rfind("sglang/srt/")
    return path[at:] if at >= 0 else path


def _clip(text: str, limit: int = 240) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def diagnosis_for(clue: Clue, net: NetData, has_stages: bool = True) -> Diagnosis:
    title, explanation, remedies, inferred = explain(clue, net, has_stages)
    rule = _rule_for(clue, net, title, remedies)
    ev = clue.event
    pos = position(ev)
    text = f"Traceback … {_short_path(clue.frame)}" if clue.via == "frames" else _evidence_text(ev)
    evidence = [Evidence(pos, ev.rank, ev.ranks, text, ev.kind, ev.end_line)]
    conf = round((0.6 if clue.via == "vocabulary" else 0.5 if clue.via == "frames" else 0.2) * clue.weight / 100
                 if clue.via != "last_line" else 0.2, 3)
    d = Diagnosis(rule, evidence, pos, max(conf, 0.05), {}, explanation=explanation, remedies=remedies)
    d.inferred = inferred
    return d


def stage_stall(index: EventIndex, run: Run, net: NetData) -> Diagnosis | None:
    """A log that stops in a stage with no error, named from the stage (rules/net/stalls.yaml)."""
    stage = run.last_stage
    if stage not in run.stages or not index.events:
        return None
    telling = [ev for ev in index.events if ev.kind not in ("unparsed", "progress")] or index.events
    last = telling[-1]
    # every rank printed "Load weight end": what comes next is the KV-cache set-up, not more reading
    info = net.stalls.get("kv_pool" if stage == "weights" and last.kind == "weight_load_end" else stage or "")
    if info is None:
        return None
    first = run.stages[stage].first_line
    sentences = [f"No rule names where this launch stopped. The log ends in the {_STAGE_WORDS.get(stage, stage)} "
                 f"stage" + (f" (which begins at line {first})" if first else "") + ", with no error and no ready "
                 "line; its last recognised line is the evidence.",
                 f"In general, {info['likely'].rstrip('.')}.", "The log may also have been cut before the outcome."]
    rule = Rule(id=NET_RULE_IDS[info["category"]], name=f"net-stall-{stage.replace('_', '-')}",
                title=info["title"], category=info["category"], severity="warning", fatal=False, cascade=False,
                stall=True, priority=0, confidence=0.0, stage=stage, versions="", anchor=None, selections={},
                condition=None, condition_text="", explanation="", remedy=list(info["remedies"]), why="",
                references=[], examples={}, path=Path("rules/net/stalls.yaml"), builtin=True, inferred=True)
    pos = position(last)
    d = Diagnosis(rule, [Evidence(pos, last.rank, last.ranks, _evidence_text(last), last.kind, last.end_line)], pos,
                  round(0.5 * info["weight"] / 100, 3), {}, explanation=" ".join(sentences),
                  remedies=list(info["remedies"]))
    d.inferred = {"from": "stage", "weight": info["weight"], "stage": stage}
    return d


def refine(verdict: str, primary: Diagnosis | None, ordered: list[Diagnosis], index: EventIndex, run: Run,
           net_of: Callable[[], NetData]) -> tuple[str, Diagnosis | None, list[Diagnosis]]:
    """The ranking, with the net's diagnosis as primary where the rules left the cause unnamed.

    `net_of` gives the net: most failures are named by a rule, and those never load it."""
    if rules_named_it(verdict, primary):
        return verdict, primary, ordered
    wrapper = is_wrapper(verdict, primary)
    net = net_of()
    ready = run.stages["ready"].first_line if "ready" in run.stages else 0
    harmless = frozenset(e.line for d in ordered if not d.rule.fatal and not d.rule.stall for e in d.evidence)
    allowed = getattr(net, "categories", None)  # narrowed by --select / --ignore (diagnosis/selection.py)
    clue = best_clue([c for c in collect_clues(index, compiled(net), ready or 0, harmless)
                      if allowed is None or c.category in allowed])
    if clue is None:
        stall = stage_stall(index, run, net) if verdict == "incomplete" and primary is None else None
        return (verdict, stall, [stall] + ordered) if stall is not None else (verdict, primary, ordered)
    if wrapper:
        # a wrapper (SGLang's "Capture cuda graph failed: <inner>", a child that died) names where the launch
        # failed, not why: a strong clue of another category at or before it says why
        assert primary is not None
        if not clue.fatal or clue.weight < MIN_WEIGHT_OVER_WRAPPER or clue.category in ("unknown", primary.category) \
                or position(clue.event) > primary.position:
            return verdict, primary, ordered
        d = diagnosis_for(clue, net, bool(run.stages))
        d.explanation = d.explanation.replace(
            "No rule names this failure", f"Only a general rule ({primary.rule.id}: {primary.rule.title}) names "
            "this failure, which wraps another error", 1)
        d.counted = True
        return verdict, d, [d] + ordered
    if verdict == "failed":
        # a catch-all rule says the cause is not in the log; only a clue of some weight says otherwise
        if clue.category == "unknown" or not clue.fatal or clue.weight < MIN_WEIGHT_OVER_CATCHALL:
            return verdict, primary, ordered
        d = diagnosis_for(clue, net, bool(run.stages))
        d.counted = True
        return verdict, d, [d] + ordered
    # incomplete: an error names a failure; a warning names the stall unless a stall rule already did
    if not clue.fatal and primary is not None:
        return verdict, primary, ordered
    d = diagnosis_for(clue, net, bool(run.stages))
    d.counted = clue.fatal
    return ("failed" if clue.fatal else "incomplete"), d, [d] + ordered


__all__ = ["NET_RULE_IDS", "Clue", "CompiledNet", "best_clue", "collect_clues", "refine", "split_frame"]


def example_problems(net: NetData) -> list[str]:
    """Terms whose `example` line, parsed as a log, gives no event the term matches (`file:line: id ...`)."""
    from logdoctor.parse.parse import parse_text
    cnet = compiled(net)
    problems: list[str] = []
    for t in net.terms:
        events = parse_text(t.example + "\n")
        if not any(h.id == t.id for ev in events for h, _ in cnet.term_hits(ev, keep_subsumed=True)):
            kinds = ", ".join(sorted({ev.kind for ev in events})) or "no event"
            problems.append(f"{t.path}:{t.line}: term {t.id}: its example parses to {kinds}, which the term does "
                            "not match")
    return problems


def main(argv: list[str] | None = None) -> int:
    """`python -m logdoctor.diagnosis.net check [DIR]`: the net files' schema, patterns and examples."""
    import sys

    from logdoctor.diagnosis.net_data import builtin_net_dir, check_net_dir
    from logdoctor.diagnosis.net_data import summary as net_summary
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] != "check":
        print("usage: python -m logdoctor.diagnosis.net check [NET_DIR]", file=sys.stderr)
        return 2
    directory = Path(args[1]) if len(args) > 1 else builtin_net_dir()
    net, errors = check_net_dir(directory)
    problems = [str(p) for p in errors] or example_problems(net)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} problem(s)", file=sys.stderr)
        return 2
    counts = net_summary(net)["by_category"]
    for cat, c in counts.items():
        print(f"{cat:24s} {c['terms']:5d} terms {c['subsystems']:4d} subsystems")
    print(f"{len(net.terms)} term(s), {len(net.subsystems)} subsystem(s) OK")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

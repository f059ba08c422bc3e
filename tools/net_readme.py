#!/usr/bin/env python3
"""Write rules/net/README.md from the net's own data: what each library's vocabulary covers, by category,
and which sources and versions were read. `--check` exits 1 when the file is not up to date (a test runs it).
"""
from __future__ import annotations

import sys
from collections import defaultdict

from generated import write_or_check  # a sibling: this folder is on the path
from logdoctor.diagnosis.net_data import CATEGORIES, builtin_net_dir, check_net_dir

HEADER = """# The broad net's data

The rules (`rules/<category>/*.yaml`) name the failures they know. After them, the broad net
(`logdoctor/diagnosis/net.py`) places a failure no rule names from what the log still shows, and says that it
inferred it, from what, with a lower confidence:

1. **vocabulary** (`vocabulary/<library>.yaml`): phrases the libraries SGLang runs on print when a launch
   fails, each with a category, a weight (how sure the phrase alone is) and a severity (an error makes the
   verdict `failed`, a warning names a stall). The strongest term wins; at equal weight the earliest line.
2. **frames** (`frames/*.yaml`): source paths and functions of SGLang (by era) and of its dependencies,
   mapped to a subsystem, a category and the launch stage the code runs in, so a traceback cut before its
   exception line is still placed by its deepest recognised frame.
3. **categories.yaml**: each category's headline and the remedies given when the clue has none of its own.
4. Failing both, an error-looking last line of a log without a ready line makes the launch `failed`
   (category `unknown`) with that line as evidence.
5. **stalls.yaml**: a log that stops in a stage with no error, no ready line and no stall rule gets a stall
   named from the stage (what a hang there usually is, worded as such; the log may also be cut).

The net reads only lines of other libraries, unrecognised lines and SGLang's exit and error lines (never
INFO lines, never a line a rule explained as harmless), and only the last 120 events (after the ready
line, when there is one). Add your own in `DIR/net/vocabulary/*.yaml` and `DIR/net/frames/*.yaml` of a
`--rules DIR`; a term or subsystem with a built-in id replaces it. Check with
`python -m logdoctor.diagnosis.net check [DIR/net]` (schema, RE2 patterns, and that every term's `example` line
parses to an event the term matches). This file is written by `tools/net_readme.py`.
"""


def render() -> str:
    net, problems = check_net_dir(builtin_net_dir())
    if problems:
        raise SystemExit(f"net invalid: {problems[0]}")
    out = [HEADER, "## Vocabulary: message classes by library\n"]
    by_lib: dict[str, list] = defaultdict(list)
    for t in net.terms:
        by_lib[t.library].append(t)
    out.append("| library | terms | " + " | ".join(c.replace("_", " ") for c in CATEGORIES) + " |")
    out.append("|---|---:|" + "---:|" * len(CATEGORIES))
    for lib in sorted(by_lib):
        counts = [sum(1 for t in by_lib[lib] if t.category == c) for c in CATEGORIES]
        out.append(f"| {lib} | {len(by_lib[lib])} | " + " | ".join(str(n or "") for n in counts) + " |")
    out.append("")
    for lib in sorted(by_lib):
        out.append(f"### {lib}\n")
        for c in CATEGORIES:
            terms = sorted((t for t in by_lib[lib] if t.category == c), key=lambda t: -t.weight)
            if terms:
                shown = "; ".join(f"`{(t.text or t.regex or '')[:70]}`" for t in terms[:4])
                more = f" and {len(terms) - 4} more" if len(terms) > 4 else ""
                out.append(f"- **{c}** ({len(terms)}): {shown}{more}")
        out.append("")
    out.append("## Frames: subsystems\n")
    by_group: dict[str, list] = defaultdict(list)
    for s in net.subsystems:
        by_group[s.group].append(s)
    for group in sorted(by_group):
        subs = by_group[group]
        out.append(f"### {group} ({len(subs)} subsystems, {sum(1 for s in subs if s.weight == 0)} plumbing)\n")
        for c in CATEGORIES:
            names = sorted({s.subsystem for s in subs if s.category == c and s.weight > 0})
            if names:
                more = f" and {len(names) - 6} more" if len(names) > 6 else ""
                out.append(f"- **{c}** ({len(names)}): " + "; ".join(names[:6]) + more)
        out.append("")
    out.append("## Stalls by stage (`stalls.yaml`)\n")
    out.append("| stage | category | title |")
    out.append("|---|---|---|")
    for stage, info in net.stalls.items():
        out.append(f"| {stage} | {info['category']} | {info['title']} |")
    out.append("")
    out.append("## Sources and versions read\n")
    for key in sorted(net.read):
        out.append(f"### {key}\n")
        out.extend(f"- {line}" for line in net.read[key])
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def main() -> int:
    return write_or_check({builtin_net_dir() / "README.md": render()}, "--check" in sys.argv[1:], "net_readme.py",
                          "is out of date")

if __name__ == "__main__":
    raise SystemExit(main())

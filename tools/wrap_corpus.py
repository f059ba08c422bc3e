#!/usr/bin/env python3
"""Wrap every log of a labelled corpus in a collector's envelope, so the corpus can be scored wrapped.

Usage:
  python tools/wrap_corpus.py ENVELOPE [CORPUS] [-o OUTDIR] [--split BYTES]
  python tools/wrap_corpus.py --table ENVELOPE... [CORPUS]   (wrap each, score plain and each, print a table)

CORPUS (default /work/shared/corpus/dev) holds cases/<id>.log and labels.tsv; OUTDIR (default
/work/tmp-wrap/<corpus>-<envelope>) gets the wrapped cases under the same names and a copy of labels.tsv,
so that `python3 /work/shared/eval/score.py OUTDIR --tier strict` compares with the plain corpus.
Envelopes are those of tools/wrap_log.py (`cri`, `json+rfc3339`, `journald:short-iso`, ...).
Never used by tests: tests do not read ../shared.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import wrap_log

DEFAULT_CORPUS = Path("/work/shared/corpus/dev")
OUT_ROOT = Path("/work/tmp-wrap")
SCORE = Path("/work/shared/eval/score.py")
_ACCURACY = re.compile(r"^accuracy \w+: (\d+)/(\d+)", re.MULTILINE)
_CRASHES = re.compile(r"^crashes: (\d+)", re.MULTILINE)


def out_dir_for(corpus: Path, envelope: str) -> Path:
    return OUT_ROOT / f"{corpus.name}-{envelope.replace('+', '_').replace(':', '_')}"


def wrap_corpus(envelope: str, corpus: Path, out: Path, split: int = wrap_log.SPLIT_BYTES) -> int:
    """Wrap every cases/*.log of `corpus` into `out`; returns the number of logs written."""
    cases = sorted((corpus / "cases").glob("*.log"))
    if not cases:
        raise SystemExit(f"wrap_corpus: {corpus}: no cases/*.log")
    (out / "cases").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(corpus / "labels.tsv", out / "labels.tsv")
    options = wrap_log.Options(split=split)
    for case in cases:
        lines = wrap_log.split_log(case.read_bytes())
        (out / "cases" / case.name).write_bytes(wrap_log.join_log(wrap_log.wrap_lines(lines, envelope, options)))
    return len(cases)


def score(corpus_dir: Path, tier: str) -> tuple[str, dict[str, str], int]:
    """score.py on `corpus_dir`: `k/n` (with crashes, if any), the category got for each miss, n."""
    # score.py runs `logdoctor` from PATH: the one beside this interpreter (the venv's) comes first
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    p = subprocess.run([sys.executable, str(SCORE), str(corpus_dir), "--tier", tier, "--show-misses"],
                       check=False, capture_output=True, text=True, timeout=3600, env=env)
    m, c = _ACCURACY.search(p.stdout), _CRASHES.search(p.stdout)
    if not m:
        return f"error ({p.stderr.strip().splitlines()[-1:] or p.returncode})", {}, 0
    crashes = f" ({c.group(1)} crashes)" if c and c.group(1) != "0" else ""
    misses = {parts[1]: parts[3] for line in p.stdout.splitlines()
              if line.startswith("miss:") and len(parts := line.split()) >= 4}
    return f"{m.group(1)}/{m.group(2)}{crashes}", misses, int(m.group(2))


def table(envelopes: list[str], corpus: Path, split: int, jobs: int) -> str:
    """Accuracy per tier, and how many cases get the plain log's scored category ("same")."""
    dirs = {"plain": corpus}
    for env in envelopes:
        dirs[env] = out_dir_for(corpus, env)
        wrap_corpus(env, corpus, dirs[env], split)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {(name, tier): pool.submit(score, d, tier) for name, d in dirs.items() for tier in ("strict", "weak")}
        results = {key: f.result() for key, f in futures.items()}
    rows = []
    for name in dirs:
        cells = []
        for tier in ("strict", "weak"):
            acc, misses, n = results[name, tier]
            plain_misses = results["plain", tier][1]
            # a case scores the same category as plain when both got it right, or both missed it alike
            differ = {k for k in set(misses) | set(plain_misses) if misses.get(k) != plain_misses.get(k)}
            cells += [acc, f"{n - len(differ)}/{n}" + (f" (differ: {', '.join(sorted(differ))})" if differ else "")]
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(["| envelope | strict | same as plain | weak | same as plain |", "|---|---|---|---|---|", *rows])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("envelopes", nargs="+", metavar="ENVELOPE",
                    help="envelope (wrap_log.py names); with --table several, optionally followed by CORPUS")
    ap.add_argument("-o", "--output", type=Path, help="output directory (one envelope only)")
    ap.add_argument("--split", type=int, default=wrap_log.SPLIT_BYTES)
    ap.add_argument("--table", action="store_true", help="wrap in each envelope, score plain and each, print a table")
    ap.add_argument("--jobs", type=int, default=2, help="score.py runs at once (--table)")
    a = ap.parse_args(argv)
    corpus = DEFAULT_CORPUS
    envelopes = list(a.envelopes)
    if Path(envelopes[-1]).is_dir():
        corpus = Path(envelopes.pop())
    try:
        for env in envelopes:
            wrap_log.wrap_lines(["probe"], env)  # unknown names fail before anything is written
    except ValueError as e:
        print(f"wrap_corpus: {e}", file=sys.stderr)
        return 2
    if a.table:
        print(table(envelopes, corpus, a.split, a.jobs))
        return 0
    if len(envelopes) != 1:
        print("wrap_corpus: one ENVELOPE (or --table)", file=sys.stderr)
        return 2
    out = a.output or out_dir_for(corpus, envelopes[0])
    n = wrap_corpus(envelopes[0], corpus, out, a.split)
    print(f"{n} logs wrapped in {envelopes[0]} into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

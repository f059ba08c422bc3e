"""Stage 3, the run: `Event`s in (and, on the bulk path, raw batch lines), one `Run` out.

- `fold`: the one place a run is folded. `Folding` passes events through once and folds each into a
  `RunBuilder`; `fold_source` reads, parses and folds one log; `summarize` / `summarize_source` drain one.
  `RunBuilder` composes the pieces below and keeps the counts, version, server args, failures, warnings.
- `model`: what a Run is (`Run`, `Stage`, `RankMemory`, `Failure`, `STAGES`) and its JSON form.
- `stages`: stages reached and when, the SGLang era, the parallel sizes (server args, else rank prefixes).
- `rank_memory`: memory figures per rank, from the lines that print them.
- `batches`: batch counts, peaks and throughput quantiles, per event or in bulk.
- `memory`: rebuilds the KV-cache budget from a Run's numbers and says what to change.
"""

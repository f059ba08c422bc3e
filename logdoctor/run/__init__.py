"""Stage 3, the run: `Event`s in, one `Run` out.

`summary.RunBuilder` folds a log's events into a Run (configuration, stages, memory per rank, batches,
failures); `memory` rebuilds the KV-cache budget from the Run's numbers and says what to change.
"""

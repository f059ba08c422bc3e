"""Many logs: batches of files (`batch`, `workers`), several logs of one launch (`launch`), run tables
(`tables`, polars), comparison (`compare`) and clustering of unexplained failures (`clusters`). Each calls
the single-log stages.
"""

# seconds a batch gives one log (batch.py); here, where the CLI's options read it without importing the batch machinery
DEFAULT_TIMEOUT_S = 120.0

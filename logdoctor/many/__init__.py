"""Many logs: batches of files (`batch`, `workers`), several logs of one launch (`launch`), run tables
(`tables`, polars), comparison (`compare`) and clustering of unexplained failures (`clusters`). Each calls
the single-log stages.
"""

"""The command line: options parsed, stages called, nothing else.

`main` holds the `logdoctor` group, the stream and signal guards and the exit codes; the commands live in
`one` (one log or one launch: parse, summary, memory, explain), `rules` (rule files) and `many` (batch, runs,
compare, clusters), which share only `common`. `python -m logdoctor.cli` and the `logdoctor` script both
start `main.main`.
"""
from logdoctor.cli.main import cli, main

__all__ = ["cli", "main"]

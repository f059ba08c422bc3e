"""The command line: options parsed, stages called (`main` has the single-log commands, `many` the ones over
many logs). `python -m logdoctor.cli` and the `logdoctor` script both start `main`.
"""
from logdoctor.cli.main import cli, main

__all__ = ["cli", "main"]

"""The command line: options parsed, stages called, nothing else.

`main` holds the `logdoctor` group, the stream and signal guards and the exit codes; the commands live in
`one` (one log or one launch: parse, summary, memory, explain), `rules` (rule files) and `many` (batch, runs,
compare, clusters), which share only `common`. `python -m logdoctor.cli` and the `logdoctor` script both
start `main.main`.
"""
import gc

# Importing the command line makes ~100k objects that live as long as the process (click, the commands, the
# stages they import) and no garbage: collections during it would only traverse them again and again, and the
# first one after it all of them at once (~8 ms). So none runs meanwhile, and what exists then is moved out
# of the collector's reach for good (gc.freeze): later collections traverse only what the command makes.
_collecting = gc.isenabled()
gc.disable()
try:
    from logdoctor.cli.main import cli, main
finally:
    gc.freeze()
    if _collecting:
        gc.enable()

__all__ = ["cli", "main"]

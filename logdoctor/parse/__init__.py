"""Stage 2, parsing: `Line`s in, typed `Event`s (logdoctor.events) out.

- `parse`: the entry points (`parse_lines`, `parse_source`, `parse_text`, `EventParser`) and line dispatch:
  prefix split, then one-line classification, or the line handed to the open block.
- `blocks`: multi-line blocks (tracebacks with their chains, C++ stacks, fatal dumps, `Possible solutions:`
  lists) assembled into one event each, plus the events a closed traceback's messages stand for.
- `grammar`: the lark grammar for SGLang's launch lines and the batch fast path; `finishers` turns what it
  captured into named fields in real units (`values`, `serverargs`, `errortext`).
Unknown lines become `unparsed` events: kept, never dropped.
"""

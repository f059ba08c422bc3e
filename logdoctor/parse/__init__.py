"""Stage 2, parsing: `Line`s in, typed `Event`s (logdoctor.events) out.

`parse` dispatches lines and assembles multi-line blocks (tracebacks, faulthandler dumps); `grammar` is the lark
grammar for SGLang's launch lines; `finishers` turns what it captured into named fields in real units
(`values`, `serverargs`, `errortext`). Unknown lines become `unparsed` events: kept, never dropped.
"""

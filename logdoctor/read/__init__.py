"""Stage 1, reading: bytes in, `Line`s out.

Sources (files, .gz/.zst/.bz2/.xz, stdin) are sniffed (`sniff`), decoded and split into lines (`ingest`); how
the log was collected (kubectl, CRI, docker json, journald, Ray, cloud exports) is peeled by shape
(`envelope*`), and SGLang's own prefix (time, ranks, level, origin) by `prefix`. `citations` maps positions
back to the lines as given. Nothing here knows what a message means.
"""

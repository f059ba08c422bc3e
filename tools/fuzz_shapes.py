"""Input shapes that byte-level mutation never makes, and that is where issue 9's defects were.

Each shape takes the random generator and the current input and returns a new input: long runs of one
character class, one sub-pattern repeated thousands of times, a header followed by thousands of lines
that each look like the next item of its block, huge and non-finite numbers where a number is parsed,
envelope prefixes stacked on a line, lone-CR line ends. Sizes are drawn log-uniformly so that most
inputs stay small (fast to run) and some reach a few hundred KB (where quadratic work shows), all under
the slow oracle's 1 MB.
"""
from __future__ import annotations

import random
import re
from collections.abc import Callable

MAX_SHAPED = 900_000     # bytes: a shaped input stays under the slow oracle's 1 MB

CHAR_CLASSES = [b"0123456789", b" ", b"abcdefghijXYZ_0123456789", b"=", b".", b"(", b")", b"\t", b":", b",",
                b"-", b"[", b"'", b"\\", b"#", b"%", b"\r", b"\x1b", b"\xff", "é😀".encode()]

REPEATED = [b"SeqNum=1, OpType=ALLREDUCE, ", b"(pid=123) ", b"pid=123 ", b"(SchedulerActor pid=1, ip=10.0.0.1) ",
            b"rank: 3 ", b"exitcode: 1 ", b"[rank0]:", b"[E1130 01:45:25.1 P.cpp:1] ", b"a=1, ", b"[1, (2, ",
            b"'x', ", b"Tried to allocate 1.00 GiB. ", b"CUDA out of memory. ", b"#token: 1, ", b"\x1b[31m",
            b"avail mem=1.0 GB, ", b"mem usage=1.00 GB. ", b"1\r", b"0.", b"1e", b"${", b"{", b"[", b"(", b"\"",
            b"Process 123 has 1.00 GiB memory in use. ", b"NCCL INFO ", b"TP0 ", b"DP1 TP2 EP3 ", b"cuda graph: True, "]

ENVELOPES = [b"sglang-1  | ", b"> ", b"[2025-01-01 10:00:00 TP0] ", b"[2025-01-01 10:00:00.123 DP0 TP1 EP1] ",
             b"host:1:2 [0] NCCL INFO ", b"[rank0]:[E1130 01:45:25.1 P.cpp:1] ", b"(pid=12) ",
             b"2025-01-01T10:00:00.000Z ", b"INFO:     ", b"W1130 01:45:25.123 1 P.cpp:1] ", b"[10:00:00 TP0] ",
             b"[gpu=0] ", b"Rank 0: ", b"0: "]

FIELDS = re.compile(rb"(#tokens: |mem_fraction_static=|avail mem=|#running-req: |#token: |token usage: |"
                    rb"gen throughput \(token/s\): |#new-token: |#cached-token: |K size: |KV size: |"
                    rb"Tried to allocate |max_total_num_tokens=|context_len=|mem usage=|#queue-req: |"
                    rb"cuda_graph_max_bs=|tp_size=|exit code: |exitcode: |Timeout\(ms\)=)(-?[0-9][0-9.]*)")

HUGE = [b"9" * 400, b"9" * 5000, b"1" * 40_000, b"1e999", b"-1e999", b"nan", b"NaN", b"-inf", b"inf", b"1e-999",
        b"-0", b"0x1f", b"1_000", b"9" * 400 + b".5", b"." * 50, b"1.2.3", b"99999999999999999999.0"]

# lines that carry each field, for inputs whose window has none
FIELD_LINES = [b"[2025-01-01 10:00:00 TP0] KV Cache is allocated. #tokens: %s, K size: 1.00 GB, V size: 1.00 GB\n",
               b"[2025-01-01 10:00:00 TP0] Load weight end. type=X, dtype=torch.bfloat16, avail mem=%s GB, "
               b"mem usage=1.00 GB.\n",
               b"[2025-01-01 10:00:00] server_args=ServerArgs(model_path='m', mem_fraction_static=%s, tp_size=1)\n",
               b"[2025-01-01 10:00:00 TP0] Decode batch. #running-req: 1, #token: %s, token usage: 0.01, "
               b"gen throughput (token/s): 1.0, #queue-req: 0\n",
               b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate %s GiB. GPU 0 has a total capacity "
               b"of 79.19 GiB of which 1.00 MiB is free.\n"]

CHILD_FAILED = (b"Traceback (most recent call last):\n  File \"run.py\", line 8, in <module>\n    main()\n"
                b"torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
                b"============================================================\nrun.py FAILED\n")
ROOT_CAUSE = [b"Root Cause (first observed failure): rank: 3 (local_rank: 3)\n",
              b"Root Cause (first observed failure): rank: 3 (local_rank: 3) exitcode: 1 (pid: 2301)\n",
              b"[0]:\n  time      : 2025-06-11_14:31:10\n  rank      : 3 (local_rank: 3)\n  exitcode  : 1 (pid: 1)\n"]

BLOCK_HEADS = [b"[2025-01-01 10:00:00 TP0] Traceback (most recent call last):\n  File \"a.py\", line 1, in f\n"
               b"ValueError: start\n",
               b"Traceback (most recent call last):\n  File \"a.py\", line 1, in f\nRuntimeError: CUDA error: x\n",
               b"Exception: Capture cuda graph failed: CUDA out of memory\nPossible solutions:\n",
               b"Fatal Python error: Segmentation fault\n\nCurrent thread 0x1 (most recent call first):\n",
               b"terminate called after throwing an instance of 'c10::Error'\n  what():  x\n",
               b"[2025-01-01 10:00:00] Error in request: Traceback (most recent call last):\n"]
CONTINUATIONS = [b"more message text\n", b"  File \"a.py\", line 1, in f\n", b"    x = y\n", b"1. lower it\n",
                 b"frame #1: 0x1 in f\n", b"#running-req: 1, #token: 10, token usage: 0.00, #queue-req: 0\n",
                 b"new fill batch. #seq: 1. #cached_token: 0. #new_token: 9. #remaining_req: 0.\n",
                 b"  what():  x\n", b"\n", b"During handling of the above exception, another exception occurred:\n"]

RULE_HAZARDS = [b"!!binary aGVsbG8=", b"!!set {a, b}", b"2025-01-01", b"2025-01-01 10:00:00", b"9" * 5000,
                b"'{line:999999999}'", b"'{line:9999999999}'", b"'{rank:>99999}'", b"'{ev.x:.99999f}'",
                b"{in: [{regex: '('}]}", b"{in: [{regex: '(a+)+$'}]}", b"{regex: '(?s)(((.{1,5}){1,5}){1,5}){1,8}#'}",
                b"1e999", b".nan", b"-.inf", b"~", b"!!python/name:os.system", b"&a x", b"*a", b"? [a]", b"<<: {a: 1}",
                b"!!timestamp 2025-01-01", b"0o777", b"0x" + b"f" * 300, b"{line:,}", b"'{0}'", b"'{!r}'"]


def _length(rng: random.Random, unit: int) -> int:
    """Repetitions of a `unit`-byte piece: log-uniform, mostly under a thousand (fast to run); one in eight
    up to 128k, the size where quadratic work shows."""
    top = 17 if rng.random() < 0.125 else 10
    return max(1, min(int(2 ** rng.uniform(3, top)), MAX_SHAPED // max(unit, 1)))


def _insert(rng: random.Random, data: bytes, piece: bytes, at_line_start: bool = False) -> bytes:
    if at_line_start:
        starts = [0] + [m.end() for m in re.finditer(rb"\n", data[:200_000])]
        pos = rng.choice(starts)
    else:
        pos = rng.randrange(len(data) + 1)
    return data[:pos] + piece + data[pos:]


def char_run(rng: random.Random, data: bytes) -> bytes:
    cls = rng.choice(CHAR_CLASSES)
    n = _length(rng, 1)
    run = cls * n if len(cls) == 1 else bytes(rng.choice(cls) for _ in range(min(n, 4096))) * max(1, n // 4096)
    return _insert(rng, data, run[:MAX_SHAPED])


def repeated_piece(rng: random.Random, data: bytes) -> bytes:
    piece = rng.choice(REPEATED)
    run = piece * _length(rng, len(piece))
    if rng.random() < 0.5:  # on a line of its own, behind a real envelope, sometimes without a newline
        run = rng.choice(ENVELOPES) + run + (b"\n" if rng.random() < 0.7 else b"")
    return _insert(rng, data, run, at_line_start=rng.random() < 0.5)


def child_failed(rng: random.Random, data: bytes) -> bytes:
    line = rng.choice(ROOT_CAUSE)
    return data + b"\n" + CHILD_FAILED + line * _length(rng, len(line))


def long_block(rng: random.Random, data: bytes) -> bytes:
    cont = rng.choice(CONTINUATIONS)
    lines = cont * _length(rng, len(cont))
    return _insert(rng, data, rng.choice(BLOCK_HEADS) + lines, at_line_start=True)


def huge_number(rng: random.Random, data: bytes) -> bytes:
    value = rng.choice(HUGE)
    fields = list(FIELDS.finditer(data))
    if not fields or rng.random() < 0.3:
        return _insert(rng, data, rng.choice(FIELD_LINES) % value, at_line_start=True)
    m = rng.choice(fields)
    return data[:m.start(2)] + value + data[m.end(2):]


def stacked_envelopes(rng: random.Random, data: bytes) -> bytes:
    env = rng.choice(ENVELOPES)
    if rng.random() < 0.5:  # one line with the prefix thousands of times
        return _insert(rng, data, env * _length(rng, len(env)) + b"x\n", at_line_start=True)
    times = rng.randint(1, 4)
    return b"\n".join(env * times + ln for ln in data.split(b"\n"))


def lone_cr(rng: random.Random, data: bytes) -> bytes:
    return data.replace(b"\r\n", b"\n").replace(b"\n", b"\r")


SHAPES: list[Callable[[random.Random, bytes], bytes]] = [
    char_run, repeated_piece, child_failed, long_block, huge_number, stacked_envelopes, lone_cr]


def shape(rng: random.Random, data: bytes) -> bytes:
    out = rng.choice(SHAPES)(rng, data)
    return out[:MAX_SHAPED] if len(out) > MAX_SHAPED and rng.random() < 0.9 else out


def rule_hazard(rng: random.Random, data: bytes) -> bytes:
    """A YAML value a rule author could write that is valid YAML but hostile: tags, dates, widths, digits."""
    hazard = rng.choice(RULE_HAZARDS)
    values = [m.end() for m in re.finditer(rb": ", data)]
    if not values:
        return data + b"\nx: " + hazard + b"\n"
    pos = rng.choice(values)
    end = data.find(b"\n", pos)
    end = len(data) if end < 0 else end
    return data[:pos] + hazard + (data[end:] if rng.random() < 0.7 else data[pos:])

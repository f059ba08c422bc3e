"""`--redact`: IP addresses, host names, user names, model directories under a home directory and secrets
replaced by stable placeholders (`<ip-1>`, `<host-1>`, `<user-1>`, `<path-1>`, `<secret-1>`), so a report
can be pasted publicly.

It acts on the final output text, which covers every format alike: placeholders hold no quote, backslash or
control character, so replacing inside serialized JSON / CSV text keeps it valid. A `Redactor` is first
seeded from the log itself (`seed_source`, one pass over its bytes): values are numbered in order of their
first appearance in the LOG, so one log redacts the same way whatever the command or format, and a value
keeps one placeholder everywhere in a report. Values only the output holds (a path given on the command
line, a log read from stdin, which cannot be read twice) are numbered after, in output order.

What is found: IPv4 / IPv6 addresses (validated by `ipaddress`; not version numbers, not timestamps; the
loopback and unspecified addresses are kept: they reveal nothing), FQDNs under private or generic suffixes
(public project domains kept: huggingface.co, github.com, ...), the host names a log names itself (NCCL's
`host:pid:tid [rank] NCCL`, kubectl's `[pod/NAME/container]`, `MASTER_ADDR`, `host=` / `dist_init_addr=` /
`--host`, URL hosts), user names after `/home/` or `/Users/` (`/root` is kept), the directory of a model
path under a home directory (its last component, usually the model's name, is kept), and secret-looking
tokens (hf_, sk-, AKIA / ASIA, ghp_ ..., Slack, `Bearer`, `token=` / `api_key=` / `password=` values, URL
credentials). Kept on purpose: numbers, GiB figures, flag names, rank labels, HF repo ids
(`meta-llama/Llama-3-8B`).

Every pattern is linear: bounded repetitions over disjoint classes, no nested unbounded quantifier (a log
line is untrusted input; tests/test_redact.py runs a hostile line under a hang guard).
"""
from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

import re2

from logdoctor import regexes

KINDS = ("ip", "host", "user", "path", "secret")
SCAN_CHUNK = 1 << 20  # the log is scanned in blocks of whole lines, never held whole
CUT_PREFIX = 64       # how far back from a `…` a cut-off value is looked for
PIECE = 1 << 11       # what one RE2 search runs over (see _pieces)
PENDING_LITERALS = 64  # new literal values searched for one by one before the patterns are recompiled
TRIE_DEPTH = 256       # literals longer than this are searched for one by one (bytes.find)

# private suffixes, and the generic ones a company's hosts sit under; not `.io` / `.ai` / `.dev`, which end
# Python module paths as often as host names
_PRIVATE_TLDS = ("internal", "local", "localdomain", "lan", "corp", "intranet", "intra", "private", "cluster",
                 "svc", "com", "net", "org", "edu")
_HEX = "[0-9A-Fa-f]"
# A candidate that must not continue a word starts with the character before it (`(?:^|[^\w.])`), so a run
# like `1.1.1.1.1…` is one candidate, not one per position.
# One RE2 pass finds every candidate (RE2: linear time whatever the repetitions, no backtracking, and much
# faster here than `re` with look-behinds); the boundaries RE2 cannot look at are checked in Python on the few candidates. The specific
# finders come first: at one position the first alternative that matches wins. (name, pattern, value group)
_FINDERS: tuple[tuple[str, str], ...] = (
    ("nccl", r"(?:^|[^\w.-])(?P<nccl_v>[A-Za-z0-9][A-Za-z0-9._-]*):\d{1,10}:\d{1,10} \[\d{1,6}\] NCCL "),
    ("pod", r"\[pod/(?P<pod_v>[A-Za-z0-9][A-Za-z0-9._-]*)/"),
    ("hostkey", (r"(?:MASTER_ADDR[\"']?\s{0,4}[=:]|(?:host|dist_init_addr|nccl_init_addr)\s{0,4}="
                 r"|--(?:host|dist-init-addr|nccl-init-addr)(?:=|\s{1,4}))\s{0,4}[\"']?"
                 r"(?P<hostkey_v>[A-Za-z0-9][A-Za-z0-9._-]*)")),
    # `scheme://[user:password@]host`: one finder, so the credentials do not hide the host after them
    ("url", r"://(?:[^/\s:@]+:(?P<urlcred>[^/\s@]+)@)?(?P<url_v>[A-Za-z0-9][A-Za-z0-9._-]*)"),
    ("model", (r"(?:model_path|tokenizer_path|model|model-path|tokenizer-path)(?:\s{0,4}=\s{0,4}|\s{1,4})[\"']?"
               r"(?P<model_v>(?:/home/|/Users/)[^\s'\",)]+)")),
    ("hf", r"(?P<hf_v>hf_[A-Za-z0-9]{20,})"),
    ("sk", r"(?P<sk_v>sk-[A-Za-z0-9_-]{20,})"),
    ("aws", r"(?P<aws_v>(?:AKIA|ASIA)[0-9A-Z]{16})"),
    ("gh", r"(?P<gh_v>gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"),
    ("slack", r"(?P<slack_v>xox[abprs]-[A-Za-z0-9-]{10,})"),
    ("bearer", r"(?i:bearer)\s{1,8}(?P<bearer_v>[A-Za-z0-9._~+/=-]{8,})"),
    # the value holds a letter: `#new-token: 1024` is a count
    ("kv", (r"(?i:(?:[A-Za-z0-9]{1,32}[_-])?(?:token|api[_-]?key|apikey|password|passwd|secret|secret[_-]key"
            r"|access[_-]?key|auth[_-]token))[\"']?\s{0,4}[=:]\s{0,4}[\"']?"
            r"(?P<kv_v>[^\s'\",;&)}\]<>]*[A-Za-z][^\s'\",;&)}\]<>]*)")),
    ("user", r"(?P<user_v>(?:/home/|/Users/)[A-Za-z0-9._-]{1,64})"),
    # full form; `h:h::h` forms (a group before `::`: a run of colons is no candidate); v4-mapped `::ffff:a.b.c.d`
    ("ipv6", (rf"(?:^|[^\w.])(?P<ipv6_v>(?:{_HEX}{{1,4}}:){{7}}{_HEX}{{1,4}}"
              rf"|(?:{_HEX}{{1,4}}:){{1,7}}:(?:{_HEX}{{1,4}}(?::{_HEX}{{1,4}}){{0,6}})?"
              r"|::(?:ffff:)?\d{1,3}(?:\.\d{1,3}){3})")),
    ("ipv4", r"(?:^|[^\w.])(?P<ipv4_v>\d{1,3}(?:\.\d{1,3}){3})"),
    ("fqdn", r"(?:^|[^\w.-])(?P<fqdn_v>(?:[A-Za-z0-9][A-Za-z0-9-]{0,62}\.){1,10}(?:" + "|".join(_PRIVATE_TLDS) + "))"),
)
# over bytes: the positions of str matches cost a walk from the block's start each (quadratic on a big block)
_SCAN = re2.compile("|".join(f"(?P<{name}>{pattern})" for name, pattern in _FINDERS).encode())
# (the finder's group, its name, its value's group)
_TOP_GROUPS = tuple((_SCAN.groupindex[name.encode()], name, _SCAN.groupindex[f"{name}_v".encode()])
                    for name, _ in _FINDERS)
_URL_CREDENTIAL = _SCAN.groupindex[b"urlcred"]
_SECRET_FINDERS = {"hf", "sk", "aws", "gh", "slack", "bearer", "kv"}
_HOST_FINDERS = {"nccl", "pod", "hostkey", "url"}
# the characters a value may not touch on either side (what look-arounds would have said)
_WORDISH = regexes.compile(r"[\w.-]")
_HOME_USER = regexes.compile(r"(/home/|/Users/)([A-Za-z0-9._-]{1,64})")
_PLAIN_VALUES = {"none", "null", "true", "false", "nil", "undefined", "redacted", "localhost"}
# public project and vendor domains: naming them reveals nothing about the user
_PUBLIC_DOMAINS = ("huggingface.co", "hf.co", "github.com", "githubusercontent.com", "github.io", "pytorch.org",
                   "python.org", "pypi.org", "nvidia.com", "sglang.ai", "readthedocs.io", "amazonaws.com",
                   "googleapis.com", "microsoft.com", "anaconda.org", "conda.io", "docker.io", "docker.com",
                   "ubuntu.com", "gnu.org", "kernel.org", "flashinfer.ai", "vllm.ai", "openai.com", "example.com",
                   "modelscope.cn", "nccl.org", "ray.io", "lmsys.org", "schemastore.org", "json-schema.org",
                   "oasis-open.org", "logdoctor.dev")
_PYTHON_NAMES = {"threading.local"}  # dotted Python names that end like a host suffix


def _keep_ip(value: str) -> bool:
    try:
        ip = ipaddress.ip_address(value.split("%", 1)[0])
    except ValueError:
        return True  # not an address at all
    return ip.is_loopback or ip.is_unspecified


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value.split("%", 1)[0])
        return True
    except ValueError:
        return False


def _public(host: str) -> bool:
    h = host.lower().rstrip(".")
    return h in _PYTHON_NAMES or any(h == d or h.endswith("." + d) for d in _PUBLIC_DOMAINS)


def _host_value(value: str) -> tuple[str, str] | None:
    """(kind, value) for a host a log names, or None when it reveals nothing."""
    value = value.rstrip(".-_")
    if len(value) < 2 or value.lower() in _PLAIN_VALUES or value.isdigit():
        return None
    if _is_ip(value):
        return None if _keep_ip(value) else ("ip", value)
    if not any(c.isdigit() or c in "-." for c in value):
        return None  # a bare word (`worker`): replacing it everywhere would garble the report's own sentences
    return None if _public(value) else ("host", value)


def _ipv6(value: str) -> bool:
    if value.count(":") < 2 or sum(1 for g in value.split("%", 1)[0].split(":") if g) < 2:
        return False  # `c10::` and timestamps are not addresses
    return _is_ip(value) and not _keep_ip(value)


def _secret_value(value: str) -> bool:
    # a count (`#new-token: 1024`), a null, a placeholder or a shell variable is not a secret
    return (value.lower() not in _PLAIN_VALUES and any(c.isalpha() for c in value)
            and not value.startswith("<") and not value.startswith("$"))


def _home_dir(path: str) -> str | None:
    """The directory of a model path under a home directory, when it is deeper than the home itself."""
    parts = path.rstrip("/").split("/")
    # ['', 'home', 'alice', 'dir', ..., 'Model']: a directory to hide only below /home/alice
    return "/".join(parts[:-1]) if len(parts) > 4 else None


Found = tuple[int, str, str]  # (offset, kind, value)


def _touches(text: bytes, start: int, end: int, before: bytes, after: bytes) -> bool:
    """Whether the byte before `start` is one of `before`, or the one at `end` one of `after`; `w` stands for
    any word character, a non-ASCII byte included (what the look-arounds RE2 lacks would have said)."""
    def hit(c: bytes, chars: bytes) -> bool:
        if not c:
            return False
        return (b"w" in chars and (c.isalnum() or c == b"_" or c[0] >= 0x80)) or c in chars.replace(b"w", b"")
    return hit(text[start - 1:start] if start else b"", before) or hit(text[end:end + 1], after)


def _dotted_on(text: bytes, end: int) -> bool:
    """`10.0.0.5.post1`, `a.b.internal.x`: the candidate goes on past a dot."""
    return text[end:end + 1] == b"." and text[end + 1:end + 2].isalnum()


_CONTEXTLESS = {"hf", "sk", "aws", "gh", "slack", "user", "ipv4", "ipv6", "fqdn"}
Hit = tuple[int, str, str, bool]  # (offset in the candidate, kind, value, found again by its shape alone)


def _classify(name: str, value: str, text: bytes, start: int, end: int) -> list[Hit]:
    """What a candidate stands for; empty when it is not one after all. A value the shape finders (an address,
    an FQDN, `hf_…`, `/home/NAME`) find wherever it is, is marked so: the output is searched for it by shape,
    not as one more literal (a log of thousands of addresses would make the literal search grow with them)."""
    bare = name in _CONTEXTLESS
    if name in _SECRET_FINDERS:
        if name in ("hf", "aws", "gh", "slack") and _touches(text, start, end, b"w", b"w"):
            return []
        return [(0, "secret", value, bare)] if len(value) >= 6 and _secret_value(value) else []
    if name in _HOST_FINDERS:
        if name == "nccl" and _touches(text, start, end, b"w.-", b""):
            return []
        if name == "url" and text[end:end + 1] == b"@":  # `https://TOKEN@github.com/...`: a credential
            return [(0, "secret", value, False)] if len(value) >= 6 and _secret_value(value) else []
        hv = _host_value(value)
        return [(0, hv[0], hv[1], hv[0] == "ip")] if hv else []
    if name == "model":
        d = _home_dir(value)
        users = [(m.start(), "user", m.group(1) + m.group(2), True) for m in _HOME_USER.finditer(value)][:1]
        return ([(0, "path", d, False)] if d else []) + users
    if name == "user":
        return [] if _touches(text, start, end, b"", b"w.-") else [(0, "user", value, True)]
    if name == "ipv4":
        if _touches(text, start, end, b"w.", b"w") or _dotted_on(text, end):
            return []
        return [(0, "ip", value, True)] if _is_ip(value) and not _keep_ip(value) else []
    if name == "ipv6":
        if _touches(text, start, end, b"", b"w:"):
            return []
        # `ib0:fe80::1`: the candidate began inside the interface name (`b0:` is hex); the address starts
        # after a colon
        at = 0
        while at < len(value):
            if not (at == 0 and _touches(text, start, end, b"w.", b"")) and _ipv6(value[at:]):
                return [(at, "ip", value[at:], True)]
            nxt = value.find(":", at)
            if nxt < 0 or value[nxt + 1:nxt + 2] == ":":
                break
            at = nxt + 1
        return []
    if name == "fqdn":
        if _touches(text, start, end, b"w.-", b"w-") or _dotted_on(text, end) or _public(value):
            return []
        return [(0, "host", value, True)]
    return []


def _find(data: bytes) -> Iterator[tuple[int, str, str, bool]]:
    """(byte offset, kind, value, found by shape) of every value in `data`, in order of appearance."""
    for base, piece in _pieces(data):
        for m in _SCAN.finditer(piece):
            # span() per finder: the binding's lastgroup and groups() rebuild the group index per match
            hit = next((t for t in _TOP_GROUPS if m.span(t[0])[0] >= 0), None)
            if hit is None:
                continue
            _, name, g = hit
            if name == "url" and m.span(_URL_CREDENTIAL)[0] >= 0:
                c_start, c_end = m.span(_URL_CREDENTIAL)
                password = piece[c_start:c_end].decode("utf-8", "replace")
                if _secret_value(password):
                    yield base + c_start, "secret", password, False
            start, end = m.span(g)
            value = piece[start:end].decode("utf-8", "replace")
            for at, kind, v, bare in _classify(name, value, piece, start, end):
                yield base + start + len(value[:at].encode()), kind, v, bare


def find_values(text: str | bytes) -> list[Found]:
    """Every value to redact in `text`, in order of appearance (offsets in UTF-8 bytes)."""
    data = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text
    return [(at, kind, value) for at, kind, value, _ in _find(data)]


def _pieces(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(offset, piece) of at most PIECE bytes, cut after a line break, else after a space, else anywhere.

    google-re2's finditer copies its whole subject for every match: on a big block with many candidates
    that is quadratic, on pieces this small it is not."""
    at = 0
    while at < len(data):
        end = at + PIECE
        if end < len(data):
            cut = data.rfind(b"\n", at, end)
            if cut < 0:
                cut = data.rfind(b" ", at, end)
            end = cut + 1 if cut >= 0 else end
        yield at, data[at:end]
        at = end


class Redactor:
    """Values to placeholders, numbered per kind in order of first sight."""

    def __init__(self) -> None:
        self.placeholders: dict[str, str] = {}  # value (as the output shows it) → placeholder
        self._counts = {k: 0 for k in KINDS}
        self._literals: set[str] = set()  # values only their context finds: searched for as they are
        # literals not yet in the compiled patterns: found with bytes.find until there are enough of them to
        # recompile (a recompile per new value would be quadratic on a log of thousands of tokens)
        self._pending: list[str] = []
        self._literal: re.Pattern[bytes] | None = None
        self._path_literal: re.Pattern[bytes] | None = None
        self._prefixes: dict[str, str] = {}  # the start of every value → its placeholder (see _cut_values)

    def add(self, kind: str, value: str, by_shape: bool = False) -> None:
        if not by_shape and value not in self._literals:
            self._literals.add(value)
            self._pending.append(value)
        if value in self.placeholders:
            return
        ph = None
        if kind == "user":  # `/home/alice` → `/home/<user-1>`: the name is the secret, not the prefix
            prefix, name = value.rsplit("/", 1)
            known = self.placeholders.get(("/Users/" if prefix == "/home" else "/home/") + name)
            if known is not None:  # one user under both prefixes keeps one number
                ph = prefix + "/" + known.rsplit("/", 1)[1]
        if ph is None:
            self._counts[kind] += 1
            ph = f"<{kind}-{self._counts[kind]}>"
            if kind == "user":
                ph = f"{value.rsplit('/', 1)[0]}/{ph}"
        self.placeholders[value] = ph
        for k in range(4, min(len(value), CUT_PREFIX + 1)):
            self._prefixes.setdefault(value[:k], ph)

    def add_hosts(self, names: Iterable[str]) -> None:
        """Host names a report found by itself (the pods or hosts a single interleaved log was split into, e.g.
        stern's `POD CONTAINER` prefix, which has no shape to find them by)."""
        for name in names:
            hv = _host_value(name)
            if hv is not None:
                self.add(hv[0], hv[1])

    def seed_text(self, text: str | bytes) -> None:
        data = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text
        for _, kind, value, by_shape in _find(data):
            self.add(kind, value, by_shape)

    def seed_source(self, source: str) -> None:
        """Number the values of one log in order of appearance (stdin cannot be read twice: skipped)."""
        if source == "-":
            return
        from logdoctor.read.sniff import InputError, open_source
        try:
            with open_source(source) as f:
                for block in _blocks(f):
                    self.seed_text(block)
        except (InputError, OSError, EOFError):
            return  # the command itself reports what is wrong with the file

    def _patterns(self) -> tuple[re.Pattern[bytes] | None, re.Pattern[bytes] | None]:
        if len(self._pending) > max(PENDING_LITERALS, (len(self._literals) - len(self._pending)) // 2):
            # the longest literals stay with bytes.find: a trie as deep as a 4 KiB token is no pattern
            self._pending = [v for v in self._literals if len(v) > TRIE_DEPTH]
            compiled = [v for v in self._literals if len(v) <= TRIE_DEPTH]
            paths = [v for v in compiled if v.startswith("/")]
            words = [v for v in compiled if not v.startswith("/")]
            # a path ends at a separator; a host or a token must not be part of a longer word (after a colour
            # code, `\x1b[36m`, a value starts too)
            self._path_literal = regexes.compile(b"(?:" + _trie(paths) + rb")(?![\w.-])") if paths else None
            self._literal = (regexes.compile(rb"(?:(?<![\w.-])|(?<=\x1b\[\dm)|(?<=\x1b\[\d\dm))(?:" + _trie(words)
                                        + rb")(?![\w-]|\.\d)") if words else None)
        return self._path_literal, self._literal

    def text(self, s: str) -> str:
        """`s` with every known value, and every value it shows for the first time, replaced."""
        if not s:
            return s
        data = s.encode("utf-8", "surrogateescape")
        spans: list[tuple[int, int, str]] = []
        for at, kind, value, by_shape in _find(data):
            self.add(kind, value, by_shape)
            spans.append((at, at + len(value.encode("utf-8", "surrogateescape")), value))
        for rx in self._patterns():
            if rx is not None:
                spans += [(m.start(), m.end(), m.group().decode("utf-8", "surrogateescape")) for m in rx.finditer(data)]
        for value in self._pending:
            spans += _occurrences(data, value)
        if spans:
            out, last = [], 0
            for start, end, value in sorted(spans, key=lambda t: (t[0], -t[1])):  # the longest at a position wins
                if start < last:
                    continue
                out += [data[last:start], self.placeholders[value].encode()]
                last = end
            out.append(data[last:])
            s = b"".join(out).decode("utf-8", "surrogateescape")
        if "…" in s:
            s = self._cut_values(s)
        return s

    def _cut_values(self, s: str) -> str:
        """A value an output cut short (`fe80::1ce:ff:…`, a long evidence line) shows no prefix of itself:
        the text before each `…`, from a boundary at most CUT_PREFIX characters back, is looked up among the
        values' prefixes (a set: linear in the text, however many values and cuts)."""
        out, last = [], 0
        for m in re.finditer("…", s):
            pos = m.start()
            for start in range(max(last, pos - CUT_PREFIX), pos - 3):  # the longest prefix first
                if (start == 0 or not _WORDISH.match(s[start - 1])) and s[start:pos] in self._prefixes:
                    out.append(s[last:start] + self._prefixes[s[start:pos]])
                    last = pos
                    break
        out.append(s[last:])
        return "".join(out)

    def stream(self, out: IO[str]) -> RedactingStream:
        return RedactingStream(out, self)


def _trie(values: list[str]) -> bytes:
    """The values as one pattern shaped like a trie: at each position `re` tries the branches of one node (a
    few first bytes), not every value, so thousands of literals cost what a handful does. Longer matches
    are tried first; a shorter value that is a prefix of a longer one stays matchable (`(?:…)?`)."""
    root: dict[int, Any] = {}
    for v in values:
        node = root
        for b in v.encode("utf-8", "surrogateescape"):
            node = node.setdefault(b, {})
        node[-1] = {}  # a value ends here

    def build(node: dict[int, Any]) -> bytes:
        branches = [re.escape(bytes([b])) + build(child) for b, child in sorted(node.items()) if b >= 0]
        if not branches:
            return b""
        body = branches[0] if len(branches) == 1 else b"(?:" + b"|".join(branches) + b")"
        if -1 in node:
            return (body if len(branches) > 1 else b"(?:" + body + b")") + b"?"
        return body
    return build(root)


_ANSI_BEFORE = regexes.compile(rb"\x1b\[\d{1,2}m$")


def _occurrences(data: bytes, value: str) -> list[tuple[int, int, str]]:
    """Where `value` stands in `data` on its own, by the boundaries the compiled literal patterns use."""
    needle = value.encode("utf-8", "surrogateescape")
    path = value.startswith("/")
    out, at = [], data.find(needle)
    while at >= 0:
        end = at + len(needle)
        before = b"" if at == 0 else data[at - 1:at]
        after = data[end:end + 1]
        ok_before = path or not before or not (before.isalnum() or before in b"_.-") or bool(
            before == b"m" and _ANSI_BEFORE.search(data, max(0, at - 5), at))
        ok_after = not after or not (after.isalnum() or after in (b"_.-" if path else b"_-")) and not (
            not path and after == b"." and data[end + 1:end + 2].isdigit())
        if ok_before and ok_after:
            out.append((at, end, value))
        at = data.find(needle, at + 1)
    return out


def _blocks(f: IO[bytes]) -> Iterator[bytes]:
    """The content in blocks that end at a line break (a value never spans two lines)."""
    rest = b""
    while True:
        chunk = f.read(SCAN_CHUNK)
        if not chunk:
            break
        data = rest + chunk
        cut = data.rfind(b"\n")
        if cut < 0 and len(data) < 4 * SCAN_CHUNK:
            rest = data  # a long line: wait for its end, but never hold more than a few blocks
            continue
        cut = len(data) if cut < 0 else cut + 1
        rest = data[cut:]
        yield data[:cut]
    if rest:
        yield rest


class RedactingStream:
    """A text stream that redacts whole lines as they are written (`parse` streams millions of events)."""

    def __init__(self, out: IO[str], redactor: Redactor) -> None:
        self.out, self.redactor, self._pending = out, redactor, ""

    def write(self, s: str) -> int:
        data = self._pending + s
        cut = data.rfind("\n") + 1
        self._pending = data[cut:]
        if cut:
            self.out.write(self.redactor.text(data[:cut]))
        return len(s)

    def flush(self) -> None:
        if self._pending:
            self.out.write(self.redactor.text(self._pending))
            self._pending = ""
        self.out.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.out, name)


def redactor_for(sources: list[str]) -> Redactor:
    """A Redactor seeded from these logs, in order."""
    r = Redactor()
    for s in sources:
        r.seed_source(s)
    return r


def redact_frame(df: Any, redact: Callable[[str], str]) -> Any:
    """A polars frame with every string column redacted (what `-o x.parquet` and every table format write)."""
    import polars as pl
    cols = [c for c, t in df.schema.items() if t == pl.Utf8]
    if not cols:
        return df
    return df.with_columns([pl.col(c).map_elements(redact, return_dtype=pl.Utf8, skip_nulls=True) for c in cols])


__all__ = ["RedactingStream", "Redactor", "find_values", "redact_frame", "redactor_for"]

"""Logs at URLs: `s3://`, `gs://`, `az://`, `https://`, `file://`, `memory://` … through fsspec.

Every command that takes a path takes a URL too: `sniff.open_source` opens it here (`open_url`) and then
treats the bytes exactly as a file's (compression by magic bytes, binary refused), and batch's discovery
lists prefixes and globs here (`discover_urls`). Nothing is downloaded first: an object is read in blocks
as the reader asks for lines.

- fsspec and its backends are imported only when a URL is met (a plain-path `explain` never pays for
  them); the backends are extras: `logdoctor[s3]` (s3fs), `[gcs]` (gcsfs), `[azure]` (adlfs), `[http]`.
- credentials come from each backend's usual environment (AWS_* / AWS_PROFILE / AWS_ENDPOINT_URL,
  GOOGLE_APPLICATION_CREDENTIALS, AZURE_STORAGE_*), and fsspec's own `FSSPEC_<PROTOCOL>_<OPTION>`
  variables override the defaults set here.
- the defaults bound every request (connect and read timeouts, a few retries): an unreachable endpoint
  is an error after seconds, never a hang.
- every failure is an `InputError` naming the URL with one reason: no such object, no such bucket,
  access denied, a backend that is not installed, a network error.

`file://` URLs are opened through the same checks as local paths (a FIFO, a device or a directory is
refused, not read), under the URL's name.
"""
from __future__ import annotations

import io
import os
import re
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from logdoctor import regexes
from logdoctor.read.sniff import BUFFER_SIZE, InputError

# `scheme://`, optionally after fsspec chaining (`simplecache::s3://…`); two letters at least, so a
# Windows drive (`C:\`, `C://`) is never a scheme. Bounded: a path is untrusted input.
_URL = regexes.compile(r"(?:[A-Za-z][A-Za-z0-9+.-]{0,31}::){0,4}([A-Za-z][A-Za-z0-9+.-]{1,31})://")
_GLOB_MAGIC = regexes.compile(r"[*?\[]")
READ_BLOCK = 8 << 20     # bytes fetched per request while reading an object (one block is held)
CONNECT_TIMEOUT_S = 10
READ_TIMEOUT_S = 60
RETRIES = 3
REASON_MAX = 200
PREFIX_REASON = "is a prefix (a directory), not an object: use 'logdoctor batch' for every log under it"

# what each scheme needs: (package, extra)
BACKENDS = {
    "s3": ("s3fs", "s3"), "s3a": ("s3fs", "s3"),
    "gs": ("gcsfs", "gcs"), "gcs": ("gcsfs", "gcs"),
    "az": ("adlfs", "azure"), "abfs": ("adlfs", "azure"), "abfss": ("adlfs", "azure"), "adl": ("adlfs", "azure"),
    "http": ("aiohttp", "http"), "https": ("aiohttp", "http"),
}


def scheme_of(text: str) -> str | None:
    """The URL scheme of `text` (lower case), or None for a plain path."""
    m = _URL.match(text)
    return m.group(1).lower() if m else None


def is_url(text: str | os.PathLike[str]) -> bool:
    """Whether `text` names a URL rather than a local path: `scheme://…` that is not an existing file.

    No fsspec import: a plain path costs one regex match. Any scheme counts, so a mistyped or unknown one
    is reported as such ("unknown URL scheme") instead of as a missing file.
    """
    if not isinstance(text, str) or "://" not in text:
        return False
    return _URL.match(text) is not None and not os.path.lexists(text)


# ------------------------------------------------------------------------------------------------
# file systems


def _fsspec() -> Any:
    try:
        import fsspec
    except ImportError:
        raise ImportError("fsspec") from None
    return fsspec


def _defaults(scheme: str) -> dict[str, Any]:
    """Bounded timeouts and retries for the backends whose options are known here."""
    if scheme in ("s3", "s3a"):
        return {"config_kwargs": {"connect_timeout": CONNECT_TIMEOUT_S, "read_timeout": READ_TIMEOUT_S,
                                  "retries": {"max_attempts": RETRIES, "mode": "standard"}},
                # listings are streamed through once; caching them would hold every key of a big prefix
                "use_listings_cache": False}
    if scheme in ("http", "https"):
        import aiohttp
        return {"client_kwargs": {"timeout": aiohttp.ClientTimeout(total=None, connect=CONNECT_TIMEOUT_S,
                                                                   sock_read=READ_TIMEOUT_S)}}
    return {}


def _options(fsspec: Any, scheme: str) -> dict[str, Any]:
    """Our defaults, overridden by the user's fsspec configuration (FSSPEC_<PROTO>_<KEY>, config files)."""
    options = _defaults(scheme)
    for key, value in dict(fsspec.config.conf.get(scheme, {})).items():
        if isinstance(value, dict) and isinstance(options.get(key), dict):
            options[key] = {**options[key], **value}
        else:
            options[key] = value
    return options


def filesystem_of(url: str, **options: Any) -> tuple[Any, str]:
    """(fsspec file system, path inside it) for a URL; InputError (one line) when there is none.

    `options` are passed to the file system on top of the defaults (e.g. for writing datasets)."""
    scheme = scheme_of(url) or "file"
    try:
        fsspec = _fsspec()
        fs, path = fsspec.core.url_to_fs(url, **{**_options(fsspec, scheme), **options})
    except ImportError as e:
        raise InputError(url, _missing_backend(scheme, e)) from None
    except Exception as e:
        raise InputError(url, reason_of(e, scheme)) from None
    return fs, path


def _missing_backend(scheme: str, e: ImportError) -> str:
    if str(e) == "fsspec":
        return "URLs need fsspec: pip install fsspec"
    package, extra = BACKENDS.get(scheme, (None, None))
    if package is not None:
        return f"{scheme}:// needs {package}: pip install 'logdoctor[{extra}]'"
    return f"{scheme}:// needs a package that is not installed ({one_line(str(e))})"


def one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= REASON_MAX else text[:REASON_MAX - 1] + "…"


def _is_network(e: BaseException) -> bool:
    name = type(e).__name__
    return isinstance(e, (TimeoutError, ConnectionError)) or "timeout" in name.lower() \
        or "connect" in name.lower() or name.startswith(("ServerDisconnected", "ClientOSError"))


def reason_of(e: BaseException, scheme: str = "", what: str = "object") -> str:
    """One clear reason for what a backend raised."""
    cause = e.__cause__
    if isinstance(e, FileNotFoundError) and cause is not None and _is_network(cause):
        e = cause  # fsspec's http backend reports an unreachable host as a missing file
    text = str(e)
    low = text.lower()
    name = type(e).__name__
    if isinstance(e, ImportError):
        return _missing_backend(scheme, e)
    if isinstance(e, ValueError) and "protocol not known" in low:
        return f"unknown URL scheme '{scheme}'"
    if isinstance(e, FileNotFoundError):
        if "bucket" in low or "container" in low:
            return "no such bucket"
        return f"no such {what}"
    if isinstance(e, PermissionError) or "accessdenied" in low.replace(" ", "") or "forbidden" in low:
        return "access denied"
    if isinstance(e, IsADirectoryError):
        return "is a prefix (a directory), not an object"
    if name in ("NoCredentialsError", "PartialCredentialsError", "DefaultCredentialsError"):
        return f"no credentials ({one_line(text)})"
    if _is_network(e):
        return f"network error ({one_line(text) or name})"
    if isinstance(e, OSError):
        return f"read failed ({one_line(e.strerror or text) or name})"
    return f"{what} cannot be read ({name}: {one_line(text)})" if text else f"{what} cannot be read ({name})"


def is_local(fs: Any) -> bool:
    """Whether an fsspec file system is this machine's (a `file://` URL)."""
    protocol = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    return "file" in protocol or "local" in protocol


# ------------------------------------------------------------------------------------------------
# reading


class _RemoteRaw(io.RawIOBase):
    """An fsspec file as a raw stream whose every failure is an InputError naming the URL."""

    def __init__(self, inner: Any, url: str) -> None:
        self._inner, self._url = inner, url

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        try:
            return bool(self._inner.seekable())
        except Exception:
            return False

    def tell(self) -> int:
        return int(self._inner.tell())

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return int(self._inner.seek(offset, whence))

    def readinto(self, b: Any) -> int:
        try:
            data = self._inner.read(len(b))
        except InputError:
            raise
        except Exception as e:
            raise InputError(self._url, reason_of(e)) from None
        n = len(data)
        b[:n] = data
        return n

    def close(self) -> None:
        if not self.closed:
            try:
                self._inner.close()
            except Exception:
                pass
        super().close()


def open_url(url: str, block_size: int = READ_BLOCK) -> BinaryIO:
    """The object's raw bytes (not decompressed: sniff does that by magic bytes), read in blocks."""
    from logdoctor.read import sniff

    fs, path = filesystem_of(url)
    if is_local(fs):  # the local checks (FIFO, device, directory), under the URL's name
        try:
            return sniff.open_local(path)
        except InputError as e:
            raise InputError(url, e.reason) from None
    extra: dict[str, Any] = {}
    info = _take_info(url)
    if info is not None and isinstance(info.get("size"), int) and scheme_of(url) in ("s3", "s3a"):
        extra["size"] = info["size"]  # s3fs then skips its own HEAD: check_url has just made it
    try:
        inner = fs.open(path, "rb", compression=None, block_size=block_size, **extra)
    except Exception as e:
        reason = reason_of(e)
        if reason == "no such object" and _is_prefix(fs, path):
            reason = PREFIX_REASON
        raise InputError(url, reason) from None
    if extra:  # what check_url learnt; s3fs would ask again for the ETag it checks reads against
        try:
            inner.details = info
        except AttributeError:
            pass
    # what the open asked the store (with a size given it asked nothing, and check_url saw an object)
    details = None if extra else getattr(inner, "details", None)
    if isinstance(details, dict) and details.get("type") == "directory":
        inner.close()
        raise InputError(url, PREFIX_REASON)
    return io.BufferedReader(_RemoteRaw(inner, url), BUFFER_SIZE)


# the last object check_url looked at, for the open that follows it in the same process (batch checks a
# log, then reads it): one entry, so memory does not grow with the number of logs
_LAST_INFO: tuple[str, dict[str, Any]] | None = None


def _take_info(url: str) -> dict[str, Any] | None:
    global _LAST_INFO
    if _LAST_INFO is None or _LAST_INFO[0] != url:
        return None
    info, _LAST_INFO = _LAST_INFO[1], None
    return info


def check_url(url: str) -> str | None:
    """Why an object cannot be read as a log, from its metadata alone (one HEAD request): no such object
    or bucket, access denied, a prefix, empty. Content problems (binary, corrupt compression) are found by
    the open that reads it, with the same reasons as for a file. A `file://` URL: `sniff.check_path`."""
    global _LAST_INFO
    try:
        fs, path = filesystem_of(url)
    except InputError as e:
        return e.reason
    if is_local(fs):
        from logdoctor.read.sniff import check_path
        return check_path(path)
    try:
        info = fs.info(path)
    except Exception as e:
        return reason_of(e, scheme_of(url) or "")
    if info.get("type") == "directory":
        return PREFIX_REASON
    if info.get("size") == 0:
        return "empty object"
    _LAST_INFO = (url, info)
    return None


def _is_prefix(fs: Any, path: str) -> bool:
    try:
        return bool(fs.isdir(path))
    except Exception:
        return False


# ------------------------------------------------------------------------------------------------
# discovery


def discover_urls(pattern: str, is_log_name: Callable[[str], bool]) -> Iterator[tuple[str, str | None]]:
    """(url, problem) for a glob (`*`, `**`), a prefix (walked recursively, names filtered by
    `is_log_name`, as a local directory is) or a single object; `problem` is None for an object to try.

    A missing bucket, a denied listing or an unknown scheme is one (url, problem) pair: never raises.
    Listings are streamed one prefix at a time; nothing is stat'ed here beyond the one `info` of a
    pattern without wildcards (to tell an object from a prefix).
    """
    try:
        fs, path = filesystem_of(pattern)
    except InputError as e:
        yield pattern, e.reason
        return
    if _GLOB_MAGIC.search(path):
        yield from _glob(fs, path, pattern)
        return
    try:
        if path.endswith("/") and scheme_of(pattern) in ("http", "https"):
            items = [(path, {"type": "directory"})]  # a web server's index page: its links are listed
        else:
            items = [(path, fs.info(path))]
    except Exception as e:
        yield pattern, reason_of(e, scheme_of(pattern) or "")
        return
    for name, info in items:
        if info.get("type") == "directory":
            yield from _walk(fs, name, lambda key: is_log_name(key.rsplit("/", 1)[-1]))
        else:
            yield fs.unstrip_protocol(name), None


def _glob(fs: Any, path: str, pattern: str) -> Iterator[tuple[str, str | None]]:
    """The objects matching a glob, streamed: the prefix before the first wildcard is walked (only as deep
    as the pattern reaches, unless it has `**`) and each key matched, so memory holds one prefix's listing,
    not every match (fsspec's own glob collects them all first). Matches are objects: a prefix
    that matches is not walked."""
    from fsspec.utils import glob_translate

    parts = path.split("/")
    first = next(i for i, part in enumerate(parts) if _GLOB_MAGIC.search(part))
    root = "/".join(parts[:first])
    depth = None if "**" in parts[first:] else len(parts) - first
    try:
        regex = glob_translate(path)
    except ValueError as e:
        yield pattern, f"invalid glob ({one_line(str(e))})"
        return
    matches = _matcher(regex)
    found = False
    for url, problem in _walk(fs, root, lambda name: matches(name), depth):
        found = True
        yield url, problem
    if not found:
        yield pattern, "no object matches"


def _matcher(regex: str) -> Callable[[str], bool]:
    """A full-match test for a translated glob: RE2 (linear in the key, whatever the pattern) when it
    takes the expression, else `re` (keys are at most a few KiB)."""
    try:
        import re2
        compiled: Any = re2.compile(regex.replace(r"\Z", r"\z"))
    except Exception:
        compiled = regexes.compile(regex)
    return lambda name: compiled.match(name) is not None


def _walk(fs: Any, top: str, accept: Callable[[str], bool], depth: int | None = None
          ) -> Iterator[tuple[str, str | None]]:
    """Every object under a prefix whose path `accept` takes, depth first in name order (as os.walk with
    sorted names), `depth` levels at most; a prefix that cannot be listed is its own (url, problem) and
    the walk goes on."""
    pending = [(top.rstrip("/"), 1)]
    while pending:
        here, level = pending.pop()
        try:
            listing = fs.ls(here, detail=True)
        except Exception as e:
            yield fs.unstrip_protocol(here), f"cannot list ({reason_of(e, what='prefix')})"
            continue
        below: list[str] = []
        for info in sorted(listing, key=lambda i: str(i.get("name", ""))):
            name = str(info.get("name", "")).rstrip("/")
            if not name.startswith(here + "/"):  # itself, or a link out of the prefix (an index page's parent)
                continue
            if info.get("type") == "directory":
                if depth is None or level < depth:
                    below.append(name)
            elif accept(name):
                yield fs.unstrip_protocol(name), None
        pending.extend((name, level + 1) for name in reversed(below))


__all__ = ["BACKENDS", "check_url", "discover_urls", "filesystem_of", "is_local", "is_url", "open_url", "reason_of",
           "scheme_of"]

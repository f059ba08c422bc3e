"""The one place logdoctor keeps files between runs: a private directory the user owns.

A cache is input the next run trusts, so it is only ever read from `$XDG_CACHE_HOME/logdoctor` (or
`~/.cache/logdoctor`) when that directory is a real directory (not a symlink), owned by this user and
closed to everyone else (mode 0700). When it cannot be made so — a read-only home, a container user, a
shared cache owned by someone else — there is no cache: runs are a little slower, never less safe. There
is deliberately no fallback to the system temp dir, where any local user can plant a file under a
predictable name.

Cache files are read with `read_private`: no symlinks, regular files only, owned by this user, bounded in
size; anything else reads as a miss. The formats kept here are JSON, never a format that runs code when
loaded. (platformdirs would find the same directory on Linux but costs ~20 ms to import on every run.)
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

MAX_CACHE_BYTES = 64 << 20
# entries of one kind (`rules-*.json`, `net-*.json`) kept: each change to a rule file or set of rule
# directories makes a new one, and without a bound the directory grows with every edit
MAX_ENTRIES_PER_KIND = 16


def private_cache_dir() -> Path | None:
    """The user's private logdoctor cache directory, created 0700 if missing; None if it cannot be trusted."""
    base = os.environ.get("XDG_CACHE_HOME") or ""
    if not os.path.isabs(base):  # the XDG spec: a relative value is invalid and is ignored
        home = os.path.expanduser("~")
        if not os.path.isabs(home):
            return None
        base = os.path.join(home, ".cache")
    target = os.path.join(base, "logdoctor")
    try:
        os.makedirs(base, mode=0o700, exist_ok=True)
        try:
            os.mkdir(target, 0o700)
        except FileExistsError:
            pass
        st = os.lstat(target)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            return None
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.chmod(target, 0o700)  # ours, but opened up (an old version, a umask): close it first
            if stat.S_IMODE(os.lstat(target).st_mode) & 0o077:
                return None
        if not os.access(target, os.W_OK | os.X_OK):
            return None
    except OSError:
        return None
    return Path(target)


def read_private(path: Path, limit: int = MAX_CACHE_BYTES) -> bytes | None:
    """The bytes of a cache file we wrote ourselves, or None (missing, a symlink, not ours, too big, a FIFO)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_size > limit:
            return None
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return None if size > limit else b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def prune(directory: Path, prefix: str, keep: int = MAX_ENTRIES_PER_KIND) -> None:
    """Remove all but the `keep` newest `{prefix}*.json` files of ours in `directory` (symlinks and files of
    other users are left alone). Failures only leave files behind."""
    found: list[tuple[int, str]] = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name.startswith(prefix) and entry.name.endswith(".json"):
                    st = entry.stat(follow_symlinks=False)
                    if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                        found.append((st.st_mtime_ns, entry.name))
    except OSError:
        return
    found.sort(reverse=True)
    for _, name in found[keep:]:
        try:
            os.unlink(os.path.join(directory, name))
        except OSError:
            pass


def write_private(path: Path, data: bytes) -> None:
    """Write a cache file atomically, 0600; failures only cost speed."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        except BaseException:
            os.unlink(tmp)
            raise
        os.replace(tmp, path)
    except OSError:
        pass

"""Where a build's index goes: checking out_dir, cleaning up after killed builds, publishing.

`build_index(..., overwrite=True)` replaces what sits at out_dir, so what it may replace is kept
narrow: an infinigram_hf index -- a real directory (not a link) whose meta.json carries the
format marker and which holds nothing but index entries. Anything else (a directory of other
files, a plain file, a symbolic link, the current directory or one above it, a directory the
corpus is read from) is refused before anything is written, and checked again on the entry
actually swapped out at publish time, which is put back if it is not an index. An existing empty
directory is a fine out_dir.

A build writes into a hidden sibling `.<name>.tmp-<pid>-<hex>` that holds a marker file
(BUILD_MARKER) until its meta.json is written. A later build removes such a directory of a dead
process only if it is provably a build's: empty, marked, or an index (what a build killed after
swapping leaves there). Where the filesystem cannot swap two directories in one step, the old
index is moved aside to `.<name>.old-<pid>-<hex>` after a journal `.<name>.journal-<pid>-<hex>`
naming it was written; a later build puts such an entry back (or removes it, once the new index
is in place) only when a dead build's journal names it. Other look-alike names are left alone.
"""
from __future__ import annotations

import errno
import json
import os
import re
import shutil
import stat
import uuid
from pathlib import Path
from typing import Iterable, List, Optional, Union

from .._core import format as fmt
from .atomic import exchange
from .._core.safe_text import printable

BUILD_MARKER = ".infinigram-build"
_STALE_RE = re.compile(r"^\.(?P<name>.+)\.(?P<kind>tmp|old|journal)-(?P<pid>[0-9]{1,10})-(?P<tag>[0-9a-f]{8})$")
_SHARD_RE = re.compile(r"^shard_[0-9]{5}$")
_INDEX_ENTRIES = {fmt.META_FILE, "tokenizer"}
_SHARD_ENTRIES = set(fmt.SHARD_FILES) | {fmt.DOCMETA_FILE, fmt.DOCMETA_INDEX_FILE, "ntdcache.bin"}
_PID_MAX = 1 << 22  # Linux's largest pid_max: a larger "pid" in a name was not written by a build


# ------------------------------------------------------------------ what may be replaced


def _read_small(path: Path, limit: int) -> Optional[bytes]:
    """The bytes of a regular file (not a link, FIFO or device: opened without following links
    and without blocking) of at most `limit` bytes; None otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(limit + 1)
    finally:
        os.close(fd)


def why_not_an_index(path: Path) -> Optional[str]:
    """None when `path` is an index that overwrite may replace; otherwise why it is not."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"cannot be examined ({exc.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return f"is a symbolic link (to {os.readlink(path)}), not an index directory"
    if not stat.S_ISDIR(st.st_mode):
        return "is a file, not an index directory"
    raw = _read_small(path / fmt.META_FILE, fmt.MAX_META_BYTES)
    try:
        meta = json.loads(raw) if raw is not None else None
    except (ValueError, RecursionError):
        meta = None
    if not isinstance(meta, dict) or meta.get("format") != fmt.FORMAT_NAME:
        return f"has no {fmt.META_FILE} of an infinigram_hf index"
    try:
        for entry in sorted(os.listdir(path)):
            if entry in _INDEX_ENTRIES:
                continue
            if not _SHARD_RE.match(entry):
                return f"holds {entry!r}, which is not part of an index"
            shard = path / entry
            if os.path.isdir(shard) and not os.path.islink(shard):
                extra = sorted(set(os.listdir(shard)) - _SHARD_ENTRIES)
                if extra:
                    return f"holds {entry}/{extra[0]!r}, which is not part of an index"
    except OSError as exc:
        return f"cannot be listed ({exc.strerror})"
    return None


def _is_empty_dir(path: Path) -> bool:
    try:
        st = os.lstat(path)
        return stat.S_ISDIR(st.st_mode) and not os.listdir(path)
    except OSError:
        return False


def _real(path: Union[str, Path]) -> Path:
    return Path(os.path.realpath(path))


def _within(inner: Path, outer: Path) -> bool:
    """inner is outer or below it (both real paths)."""
    return inner == outer or outer in inner.parents


def resolve_out_dir(out_dir: Union[str, os.PathLike]) -> Path:
    """out_dir as an absolute path whose last component is a name (not '.' or '..')."""
    if isinstance(out_dir, bool) or not isinstance(out_dir, (str, os.PathLike)):
        raise ValueError(f"out_dir must be a path, got {type(out_dir).__name__}")
    raw = os.fspath(out_dir)
    if isinstance(raw, bytes):
        raw = os.fsdecode(raw)
    if not raw.strip():
        raise ValueError(f"out_dir {raw!r} is empty; name the directory the index should go to")
    out = Path(raw).absolute()
    if out.name in ("", "..") or ".." in out.parts:
        out = _real(out) if out.name in ("", "..") else _real(out.parent) / out.name
    return out


def check_out_dir(out: Path, *, overwrite: bool, sources: Iterable[Union[str, os.PathLike]] = (),
                  overwrite_hint: str = "overwrite=True") -> None:
    """Refuse an out_dir a build must not write to (or replace); nothing is changed either way.

    ValueError: out_dir is the current directory or above it, or it holds, or lies inside, a
    source path. FileExistsError: something other than an empty directory is there, and it is
    not an index overwrite may replace (or overwrite is off)."""
    real = _real(out)
    shown = printable(str(out))
    try:
        cwd = _real(os.getcwd())
    except OSError:  # the current directory was removed: nothing to protect there
        cwd = None
    if cwd is not None and _within(cwd, real):
        what = "the current directory" if real == cwd else f"a directory above the current one ({printable(str(cwd))})"
        raise ValueError(f"out_dir {shown} is {what}; the index must go to a directory of its own")
    for src in sources:
        s = _real(src)
        if _within(s, real):
            raise ValueError(f"out_dir {shown} holds the source {printable(str(src))}; the index must go "
                             "to a directory of its own, outside the corpus")
        if _within(real, s):
            raise ValueError(f"out_dir {shown} is inside the source directory {printable(str(src))}; "
                             "put the index outside the corpus")
    if not os.path.lexists(out) or _is_empty_dir(out):
        return
    problem = why_not_an_index(out)
    if problem is not None:
        raise FileExistsError(f"{shown} already exists and {problem}; "
                              f"{overwrite_hint} only replaces an index, so nothing was changed")
    if not overwrite:
        raise FileExistsError(f"{shown} already exists; pass {overwrite_hint} to replace it")


# ------------------------------------------------------------------ after killed builds


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def _is_build_dir(path: Path) -> bool:
    """A temp directory a build left: empty, still marked, or a whole index."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode):
        return False
    return (not os.listdir(path) or _read_small(path / BUILD_MARKER, 64) is not None
            or why_not_an_index(path) is None)


def _recover_journal(journal: Path, out: Path, name: str, pid: str) -> None:
    """A dead build's two-rename publish: put the index it moved aside back where it was if
    nothing took its place, or remove it if the new index did; then drop the journal."""
    raw = _read_small(journal, 4096)
    try:
        old_name = json.loads(raw)["old"] if raw is not None else None
    except (ValueError, KeyError, TypeError):
        old_name = None
    m = _STALE_RE.match(old_name) if isinstance(old_name, str) else None
    if m and m.group("kind") == "old" and m.group("name") == name and m.group("pid") == pid:
        old = out.parent / old_name
        if os.path.lexists(old):
            if not os.path.lexists(out):
                os.rename(old, out)  # killed between the two renames: it goes back where it was
            elif why_not_an_index(old) is None:
                shutil.rmtree(old, ignore_errors=True)  # the new index is in place
    os.unlink(journal)


def clean_stale_builds(out_dir: Path) -> List[Path]:
    """Tidy up after builds into out_dir that were killed (see the module docstring); returns
    the temp directories removed."""
    removed: List[Path] = []
    out = Path(out_dir)
    parent = out.parent
    try:
        names = sorted(os.listdir(parent))
    except OSError:
        return removed
    stale = []
    for entry in names:
        m = _STALE_RE.match(entry)
        if not m or m.group("name") != out.name:
            continue
        pid = int(m.group("pid"))
        if 0 < pid < _PID_MAX and not _alive(pid):
            stale.append((m.group("kind") != "journal", entry, m))  # journals first
    for _, entry, m in sorted(stale):
        path = parent / entry
        if m.group("kind") == "journal":
            _recover_journal(path, out, m.group("name"), m.group("pid"))
        elif m.group("kind") == "tmp" and _is_build_dir(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


# ------------------------------------------------------------------ the build's own directory


def make_build_dir(out: Path) -> Path:
    """Create the marked temp directory a build writes into, next to out."""
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        tmp.mkdir()
        (tmp / BUILD_MARKER).write_text(f"{os.getpid()}\n")
    except OSError as exc:  # name the index the user asked for, not our temp dir
        shutil.rmtree(tmp, ignore_errors=True)
        raise type(exc)(exc.errno, f"cannot build the index {printable(str(out))}: cannot create a directory in "
                        f"{printable(str(out.parent))} ({exc.strerror}); is it read-only?") from None
    return tmp


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_journal(path: Path, old: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w") as f:
        json.dump({"old": old.name}, f)
        f.flush()
        os.fsync(f.fileno())
    _fsync_dir(path.parent)


def publish(tmp: Path, out: Path, overwrite: bool) -> None:
    """Move the finished build into place: into a missing or empty out, or swapped with an index
    at out (overwrite). What is swapped out is checked again and put back unless it is an index,
    so a change at out while the build ran never costs anything but the build."""
    os.unlink(tmp / BUILD_MARKER)  # (meta.json is written: from now on tmp is a whole index)
    _fsync_dir(tmp)
    shown = printable(str(out))
    if not os.path.lexists(out) or _is_empty_dir(out):
        try:
            os.rename(tmp, out)  # (replaces an empty directory atomically, refuses a filled one)
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                raise FileExistsError(f"{shown} appeared while building; not replacing it") from None
            raise
        _fsync_dir(out.parent)
        return
    if not overwrite:
        raise FileExistsError(f"{shown} appeared while building; not replacing it")
    problem = why_not_an_index(out)
    if problem is not None:
        raise FileExistsError(f"{shown} {problem}; overwrite only replaces an index, so nothing was changed")
    if exchange(tmp, out):  # one atomic step: readers find the old index or the new one
        problem = why_not_an_index(tmp)  # what was really swapped out
        if problem is not None:
            exchange(tmp, out)
            raise FileExistsError(f"{shown} changed while building and {problem}; nothing was changed")
        _fsync_dir(out.parent)
        shutil.rmtree(tmp, ignore_errors=True)  # (the old index now; a kill here leaves it to clean_stale_builds)
        return
    tag = uuid.uuid4().hex[:8]
    old = out.parent / f".{out.name}.old-{os.getpid()}-{tag}"
    journal = out.parent / f".{out.name}.journal-{os.getpid()}-{tag}"
    _write_journal(journal, old)
    os.rename(out, old)
    try:
        problem = why_not_an_index(old)
        if problem is not None:
            raise FileExistsError(f"{shown} changed while building and {problem}; nothing was changed")
        os.rename(tmp, out)
    except BaseException:
        os.rename(old, out)
        os.unlink(journal)
        raise
    _fsync_dir(out.parent)
    shutil.rmtree(old, ignore_errors=True)
    os.unlink(journal)

"""Opening an index's files: by name inside an open directory, never through a link, never waiting.

The index directory is opened once (the path the user gave; it may itself be a link: that path is
theirs). Everything inside it -- meta.json, the shard directories, their files -- is opened
relative to that descriptor with ``O_NOFOLLOW``, so a link placed or swapped in anywhere inside
the index is refused instead of followed: a check of where links lead followed by an open by path
was a race (a link swapped in between was served). ``O_NONBLOCK`` keeps a FIFO or a device in
place of a file from blocking open() forever, and only regular files are read. A file with more
than one hard link is refused too: in an index that a server reads for other users, a hard link
could be someone else's file. The C core opens the binary files the same way
(``native/src/files.c``) from the shard directories' descriptors opened here.

One kind of link is followed: in a snapshot folder of huggingface_hub's cache
(``<repo>/snapshots/<commit>/``, detected from the path), a file that is a link of exactly the
shape ``../../blobs/<hex hash>`` (the cache's own layout) is opened by that target, relative to
its directory, and the blob must again be a regular file with one link (``hub_links``; the C core
does the same when asked with ``IG_OPEN_HUB_LINKS``). So an index is read straight from the Hub
cache, with no copy.

Every failure is an ``IndexFormatError`` naming the file (or an ``InfiniGramError`` for an I/O
error such as a permission denied), never a bare ``FileNotFoundError``: a file that disappears
while an index is opened is damage like any other.

Example:
    >>> with IndexDir.open_root(Path("my_index")) as root, root.subdir("shard_00000") as shard:  # doctest: +SKIP
    ...     fd, st = shard.open_file("docmeta.jsonl")
"""
from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path
from typing import Optional, Union

from .errors import IndexFormatError, InfiniGramError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_FILE_FLAGS = os.O_RDONLY | _NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
_LINK_ERRNOS = (errno.ELOOP, errno.EMLINK)  # what O_NOFOLLOW answers for a link (EMLINK: BSDs)


class IndexDir:
    """An open directory of an index: files and subdirectories are opened inside it."""

    def __init__(self, fd: int, path: Path, hub_links: bool = False):
        self.fd = fd
        self.path = path
        self.hub_links = hub_links  # inside a huggingface_hub cache snapshot (see the module docstring)

    @classmethod
    def open_root(cls, path: Union[str, os.PathLike]) -> "IndexDir":
        """Open the index directory itself (following a link there: the path is the caller's)."""
        path = Path(path)
        try:
            return cls(os.open(path, _DIR_FLAGS), path, hub_snapshot(path) is not None)
        except (FileNotFoundError, NotADirectoryError):
            raise IndexFormatError(f"{path / 'meta.json'}: missing; {path} is not an infinigram_hf index") from None
        except OSError as exc:
            raise InfiniGramError(f"{path}: cannot open the index directory ({exc.strerror})") from None

    def subdir(self, name: str) -> "IndexDir":
        """Open the subdirectory `name` (a link there is refused)."""
        try:
            return IndexDir(os.open(name, _DIR_FLAGS | _NOFOLLOW, dir_fd=self.fd), self.path / name, self.hub_links)
        except OSError as exc:
            raise self._error(name, exc, "a directory") from None

    def open_file(self, name: str, optional: bool = False) -> Optional[tuple[int, os.stat_result]]:
        """(descriptor, stat) of the regular file `name`; None when it is absent and optional.
        The caller closes the descriptor."""
        try:
            try:
                fd = os.open(name, _FILE_FLAGS, dir_fd=self.fd)
            except OSError as exc:
                target = self.hub_blob_target(name) if self.hub_links and exc.errno in _LINK_ERRNOS else None
                if target is None:
                    raise
                fd = os.open(target, _FILE_FLAGS, dir_fd=self.fd)
        except FileNotFoundError:
            if optional:
                return None
            raise IndexFormatError(f"{self.path / name}: missing") from None
        except OSError as exc:
            raise self._error(name, exc, "a regular file") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise IndexFormatError(f"{self.path / name}: not a regular file")
            if st.st_nlink != 1:
                raise IndexFormatError(
                    f"{self.path / name}: has {st.st_nlink} hard links; an index's files must be its own "
                    f"(copy the file instead of linking it)")
        except BaseException:
            os.close(fd)
            raise
        return fd, st

    def hub_blob_target(self, name: str) -> Optional[str]:
        """The target of `name` when it is a huggingface_hub cache link (``../../blobs/<hash>``)."""
        try:
            target = os.readlink(name, dir_fd=self.fd)
        except OSError:
            return None
        return target if HUB_BLOB_LINK.fullmatch(target) else None

    def read_file(self, name: str, max_bytes: int) -> Optional[bytes]:
        """The whole content of the regular file `name` (None when absent), refused unread when it
        is larger than max_bytes."""
        opened = self.open_file(name, optional=True)
        if opened is None:
            return None
        fd, st = opened
        try:
            if st.st_size > max_bytes:
                raise IndexFormatError(f"{self.path / name}: {st.st_size} bytes is too large (at most {max_bytes})")
            return read_exactly(fd, st.st_size, self.path / name)
        finally:
            os.close(fd)

    def _error(self, name: str, exc: OSError, kind: str) -> InfiniGramError:
        path = self.path / name
        if exc.errno == errno.ENOENT:
            return IndexFormatError(f"{path}: missing")
        if exc.errno in _LINK_ERRNOS or (exc.errno == errno.ENOTDIR and _is_link(self.fd, name)):
            return IndexFormatError(f"{path}: a symbolic link; an index's files are never opened through links "
                                    f"(copy the files into the index)")
        if exc.errno == errno.ENOTDIR:
            return IndexFormatError(f"{path}: not {kind}")
        return InfiniGramError(f"{path}: cannot open ({exc.strerror})")

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> "IndexDir":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


HUB_BLOB_LINK = re.compile(r"(\.\./){2,}blobs/[0-9a-f]{40,64}")


def hub_snapshot(path: Union[str, os.PathLike]) -> Optional[Path]:
    """The repository folder of huggingface_hub's cache when `path` is one of its snapshot folders
    (``<repo>/snapshots/<commit>``, or a folder inside one), else None."""
    real = Path(os.path.realpath(path))
    for up in [real, *real.parents]:
        if up.parent.name == "snapshots" and (up.parent.parent / "blobs").is_dir():
            return up.parent.parent
    return None


def read_exactly(fd: int, size: int, path: Path) -> bytes:
    """`size` bytes from offset 0 of fd; a file that shrank meanwhile is damage."""
    chunks, got = [], 0
    while got < size:
        chunk = os.pread(fd, size - got, got)
        if not chunk:
            raise IndexFormatError(f"{path}: shorter than its size ({got} of {size} bytes); changed while read")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _is_link(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False

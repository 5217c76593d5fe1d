"""Writing and reading thunderviz's files without ever losing one.

`write_text_atomic` is the one way thunderviz writes a file (.tvz, exported HTML): the text is
encoded first, written to a temporary file in the target's folder, flushed to disk and
renamed over the target. An error at any point (an unencodable string, a full disk) leaves
the old file exactly as it was; a reader never sees a half-written one.

`read_regular_file` is the one way it reads one: only a regular file (a FIFO would block
forever, a device could be endless), at most `max_bytes`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

__all__ = [
    "write_text_atomic",
    "read_regular_file",
    "encode_text",
    "FileTooLargeError",
    "NotARegularFileError",
]


class NotARegularFileError(OSError):
    """The path is a FIFO, a device, a socket or a folder: not something to load."""


class FileTooLargeError(OSError):
    """The file is larger than the caller's limit."""


def encode_text(text: str) -> bytes:
    """UTF-8 bytes for `text`, always valid UTF-8. A lone surrogate (a `str` can hold one,
    e.g. from a file name decoded with `surrogateescape`; UTF-8 cannot encode it) becomes the
    six characters `\\udXXX`: inside a JSON string, the one place thunderviz writes user
    text unescaped, that is the JSON escape of the same character, so it reads back equal."""
    return text.encode("utf-8", errors="backslashreplace")


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write `text` (see `encode_text`) to `path` atomically; returns the path given.
    A symbolic link is written through (its target is replaced), as a plain write would."""
    data = encode_text(text)  # before touching the disk: an encoding error changes nothing
    target = Path(os.path.realpath(path))
    folder = target.parent
    tmp = folder / f".{target.name}.{secrets.token_hex(8)}.tmp"
    # Created like any new file (0666 less the umask, applied by the OS), then given the
    # old file's permissions when there is one.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(FileNotFoundError):
            os.chmod(tmp, stat.S_IMODE(os.stat(target).st_mode))
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_folder(folder)
    return Path(path)


def _fsync_folder(folder: Path) -> None:
    """Make the rename itself durable (best effort: not every platform can open a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def read_regular_file(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """The bytes of `path`. Opening never blocks (O_NONBLOCK: a FIFO with no writer would
    wait forever), and the opened file itself is checked, so a path swapped for a FIFO
    between a check and the open is refused too."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotARegularFileError(
                f"{os.fspath(path)}: not a regular file ({_kind(info.st_mode)})"
            )
        if info.st_size > max_bytes:
            raise FileTooLargeError(
                f"{os.fspath(path)}: {info.st_size} bytes, more than the limit of {max_bytes}"
            )
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(max_bytes + 1)  # a file growing while read stops at the limit too
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise FileTooLargeError(f"{os.fspath(path)}: more than the limit of {max_bytes} bytes")
    return data


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a regular file"

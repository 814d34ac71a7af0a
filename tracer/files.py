"""Reading a file someone named to us: a regular file of bounded size, or one line saying why not.

Every file eagle3-top reads from outside (a manifest, a config.json, a CURVE certificate, a
tokenizer, a recording, an endpoints or metrics file) goes through here. A FIFO, a device
(``/dev/zero``), a directory, a symbolic link loop or a file far larger than its kind ever is must
not hang the reader, exhaust its memory or surface as a traceback: the open does not block (a FIFO
opens at once, and is then refused as not a regular file), a size over the caller's ``limit`` is
refused before a byte is read, and each reader reads no more than its kind's bound.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


class FileProblem(OSError):
    """The file cannot be read as what it should be. Like any ``OSError``: ``strerror`` is the
    reason, ``filename`` the path, and ``str()`` the one line the user gets ("PATH: reason"), so the
    readers' ``except OSError`` keeps working."""

    def __init__(self, path: str, reason: str, code: int = errno.EINVAL) -> None:
        super().__init__(code, reason, path)

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


def kind_of(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def why_not(path: str, exc: OSError) -> str:
    """What an ``OSError`` from opening ``path`` means, in a few words."""
    if exc.errno == errno.ELOOP:
        return "a loop of symbolic links"
    if exc.errno == errno.ENOENT and os.path.islink(path):
        return "a symbolic link to nothing (its target does not exist)"
    return exc.strerror or str(exc)


def open_regular(path: str, limit: int | None = None) -> BinaryIO:
    """``path`` opened for reading if it is a regular file (following links) of at most ``limit``
    bytes; ``FileProblem`` with the reason otherwise. The caller closes it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOENT) and os.path.islink(path):
            raise FileProblem(path, why_not(path, exc), exc.errno) from None
        raise  # FileNotFoundError, PermissionError, ...: as the readers have always had them
    except ValueError:  # a NUL in the path
        raise FileProblem(repr(path), "not a file name") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileProblem(path, f"{kind_of(st.st_mode)}, not a file")
        if limit is not None and st.st_size > limit:
            raise FileProblem(
                path, f"{st.st_size:,} bytes, more than the {limit:,} such a file can be", errno.EFBIG
            )
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise

"""Files a trace writer makes in a directory that others may write (a team logdir: mode 2775, umask 002).

Another user there can plant a link at any name they can predict, swap a file for a link between
two calls, or leave a FIFO where a file is expected. So a writer never follows a link at the name it
creates (``O_NOFOLLOW``), never waits on what is not a regular file (``O_NONBLOCK``, then ``fstat``),
writes a file that must appear whole under a random temporary name created ``O_EXCL`` and renames it
into place through the directory's descriptor (``os.replace`` replaces a link there, never follows
it), and from then on acts on what it made only through the descriptor it holds (``os.utime(fd)``),
never by its name again. In ``traces/`` because the two trace writers are all that use it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path
from typing import IO

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _refused(exc: OSError, path: str | os.PathLike[str]) -> OSError:
    """``exc``, said plainly where a planted link is the likely cause (ELOOP reads 'too many levels')."""
    if exc.errno == errno.ELOOP:
        return OSError(errno.ELOOP, "it is a symbolic link, not written through (someone else may have "
                       "planted it in a directory they can write)", os.fspath(path))
    return exc


def create_file(path: Path, *, exclusive: bool) -> IO[bytes]:
    """A regular file at ``path`` open for writing: a new one when ``exclusive`` (FileExistsError when
    anything is there, a link included), else a new or truncated one; never through a link.

    Raises:
        OSError: a link, a FIFO or anything but a regular file is there; or the usual reasons.
    """
    try:
        fd = os.open(path, _CREATE | (os.O_EXCL if exclusive else os.O_TRUNC), 0o666)
    except OSError as exc:
        raise _refused(exc, path) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or a device left at the name
            raise OSError(errno.EPERM, "not a regular file: not written", os.fspath(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        raise


def open_directory(path: Path, *, exclusive: bool) -> int:
    """A descriptor of the directory ``path`` (made here, its parents too): a new one when ``exclusive``
    (FileExistsError when anything is there), else new or already there; never through a link.

    Raises:
        OSError: a link or a file is there; or the usual reasons.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path)
    except FileExistsError:
        if exclusive:
            raise
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise _refused(exc, path) from None


def replace_whole(directory: int, name: str, data: bytes | memoryview) -> IO[bytes]:
    """Put ``data`` at ``name`` in the open ``directory``, whole or not at all: written under a random
    temporary name (``O_EXCL | O_NOFOLLOW``), ``fsync``ed, then renamed over ``name`` (a link or a
    file there is replaced, never written through). Returns the file, still open (``touch`` it).

    Raises:
        OSError: the disk refused it (no temporary is left behind).
    """
    temporary = f".{name}.{secrets.token_hex(8)}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666,
                 dir_fd=directory)
    file = os.fdopen(fd, "wb")
    try:
        file.write(data)
        file.flush()
        os.fsync(fd)  # on the disk before it has its name: what is seen under the name is whole
        os.replace(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException:
        file.close()
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=directory)
        raise
    return file


def touch(file: IO[bytes]) -> None:
    """Set the modification time of the open ``file`` to now: the one this writer holds, whatever its
    name leads to now.

    Raises:
        OSError: the file system refused it.
    """
    os.utime(file.fileno())

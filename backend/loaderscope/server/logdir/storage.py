"""Where a logdir lives: a local (or NFS-mounted) directory, or any fsspec URL (``s3://``, ``gs://``).

The logdir code only lists files with their size and mtime, opens them for reading (with seek),
and writes small sidecars; these are the operations both kinds offer. fsspec is an optional
extra (``pip install loaderscope[remote]`` plus the protocol's package, e.g. ``s3fs``), imported
only when a logdir is a remote URL. A ``file://`` URL names a local directory and is one: it gets
every defence below (through fsspec it got none: links were followed, sidecars written through them).
A remote file is read through a buffer that asks the store for at most what a read asked for
(``_Remote``), so the byte budgets of the readers hold there too: fsspec's own ``readline`` takes no
limit and reads to the next newline, however far.

A local logdir may be shared with other users (a team directory), so it is read and written as
if someone else were changing it at the same time: only regular files are opened, and without
blocking (a FIFO would hang the reader); a file that resolves outside the logdir (a symlink out)
is refused; writes go through a random temporary name created with ``O_EXCL | O_NOFOLLOW`` and
are renamed into place, so a planted symlink is never written through. Sidecars of a directory
that others can write are kept in the user's own cache instead (``index_cache``).
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import functools
import grp
import hashlib
import io
import itertools
import os
import posixpath
import secrets
import stat as stat_mode
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any, Protocol


@dataclass(frozen=True)
class Entry:
    """A file as a listing sees it."""

    path: str
    size: int  # -1: the file cannot be read (``problem`` says why, where known)
    mtime_ns: int  # 0 where the store keeps no modification time (then changes are seen by size)
    problem: str | None = None


class Storage(Protocol):
    root: str
    remote: bool

    def walk(self, on_error: Callable[[str], None]) -> list[Entry]:
        """Every file under the root, recursively (blocking)."""

    def stat(self, path: str) -> Entry:
        """Raises OSError."""

    def files(self, directory: str) -> list[Entry]:
        """The files directly in ``directory`` (a Parquet trace's parts). Raises OSError."""

    def open(self, path: str) -> IO[bytes]:
        """A seekable binary reader. Raises OSError."""

    def write_atomic(self, path: str, data: bytes) -> None:
        """Readers never see half of it. Raises OSError."""

    def sidecar_path(self, trace_path: str) -> str | None:
        """Where the index of ``trace_path`` is kept (next to it, or in the user's own cache); None: nowhere."""

    def is_dir(self) -> bool: ...

    def relative(self, path: str) -> str:
        """``path`` relative to the root, ``/``-separated."""


def is_url(logdir: str) -> bool:
    return "://" in logdir


LOCAL_PROTOCOLS = ("file", "local")  # fsspec's names for this machine's files


def local_path(logdir: str) -> str | None:
    """The local directory ``logdir`` names (a path, or a ``file://`` URL: the path after it, as
    fsspec reads it); None for a remote URL.

    Raises:
        ValueError: a URL that reaches local files through another fsspec layer (``dir::file://``,
            ``simplecache::file://``): read that way they would skip the local defences.
    """
    if not is_url(logdir):
        return logdir
    layers = logdir.split("::")
    protocols = [layer.partition("://")[0] if "://" in layer else "file" for layer in layers]
    if len(layers) == 1 and protocols[0] in LOCAL_PROTOCOLS:
        return layers[0].partition("://")[2] or "/"
    if any(protocol in LOCAL_PROTOCOLS for protocol in protocols):
        raise ValueError(f"{logdir}: reads local files through fsspec, which would skip the checks a local "
                         "logdir gets (links, FIFOs, files outside it); give the directory itself")
    return None


def storage_for(logdir: str) -> Storage:
    """Local storage for a path or a ``file://`` URL, fsspec for any other URL.

    Raises:
        ValueError: a URL without fsspec installed, a protocol fsspec does not know, or local files
            reached through another fsspec layer.
    """
    path = local_path(logdir)
    if path is not None:
        return LocalStorage(path)
    try:
        # fsspec is the optional extra `remote` (pyproject.toml), not a runtime dependency: only URL
        # logdirs need it, and without it such a logdir is refused with the install command below
        import fsspec  # type: ignore[import-untyped]  # optional: the `remote` extra
    except ImportError:
        raise ValueError(f"{logdir}: a remote logdir needs fsspec (pip install 'loaderscope[remote]' and the "
                         "protocol's package, e.g. s3fs or gcsfs)") from None
    try:
        fs, root = fsspec.core.url_to_fs(logdir)
    except (ImportError, ValueError) as exc:
        raise ValueError(f"{logdir}: {exc}") from None
    return FsspecStorage(fs, root.rstrip("/"))


class LocalStorage:
    """A directory of this machine (NFS and Lustre mounts included: everything is polled)."""

    remote = False

    def __init__(self, root: str) -> None:
        self.root = os.path.normpath(root)

    @functools.cached_property
    def cache(self) -> str | None:
        """The user's private sidecar cache: made when a shared directory first needs it."""
        return index_cache()

    def walk(self, on_error: Callable[[str], None], under: str | None = None,
             max_directories: int | None = None) -> list[Entry]:
        """Every file under the root (or under ``under``, a directory in it), recursively, in the first
        ``max_directories`` directories walked if given (blocking)."""
        def said(exc: OSError) -> None:
            on_error(f"cannot list {exc.filename}: {exc.strerror}")

        walked = os.walk(under or self.root, onerror=said)
        return [self.entry(os.path.join(directory, name))
                for directory, _, names in itertools.islice(walked, max_directories) for name in names]

    def entry(self, path: str) -> Entry:
        """``path`` as listed: its size and mtime, or (size -1) why it cannot be read."""
        try:
            return self.stat(path)
        except OSError as exc:
            return Entry(path, -1, 0, f"cannot read {path}: {exc.strerror or exc}")

    def files(self, directory: str) -> list[Entry]:
        self._check_inside(os.path.realpath(directory), directory)
        with os.scandir(directory) as found:
            return [self.entry(item.path) for item in found if not item.is_dir(follow_symlinks=False)]

    def kernel_watched(self) -> bool:
        """Whether inotify sees every change under the root: a local filesystem, not a network one
        (NFS, Lustre, GPFS, CIFS, FUSE...), where other nodes' writes reach no local watch."""
        return filesystem_type(os.path.realpath(self.root)) in LOCAL_FILESYSTEMS

    def stat(self, path: str) -> Entry:
        """Raises OSError: gone, a dangling or looping link, not a regular file, or outside the logdir."""
        info = os.stat(path)  # stat never blocks, whatever the file is
        _check_regular(info.st_mode, path)
        if os.path.islink(path):  # listings do not enter linked directories: only the file may lead out
            self._check_inside(os.path.realpath(path), path)
        return Entry(path, info.st_size, info.st_mtime_ns)

    def open(self, path: str) -> IO[bytes]:
        # O_NONBLOCK: opening a FIFO to read would wait for a writer; it is refused just after, by fstat
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            _check_regular(os.fstat(fd).st_mode, path)
            self._check_inside(_opened_path(fd, path), path)
            return os.fdopen(fd, "rb")
        except BaseException:
            os.close(fd)
            raise

    def write_atomic(self, path: str, data: bytes) -> None:
        directory, name = os.path.split(path)
        # the directory is opened once and named by its descriptor from then on: renaming a directory
        # or planting a link during the write cannot redirect it
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            # O_NOFOLLOW guards the last name only: a directory above it swapped for a link leads elsewhere
            self._check_inside(_opened_path(dir_fd, directory), directory)
            temporary = f".{name}.{secrets.token_hex(8)}.tmp"
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                         dir_fd=dir_fd)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)  # replaces a link, never follows it
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temporary, dir_fd=dir_fd)
                raise
        finally:
            os.close(dir_fd)

    def sidecar_path(self, trace_path: str) -> str | None:
        """Next to the trace, unless others can write its directory: then in the user's own cache
        (where no one else can plant, replace or forge it), or nowhere if there is none."""
        if not writable_by_others(os.path.dirname(trace_path)):
            return trace_path + SIDECAR_SUFFIX
        if self.cache is None:
            return None
        key = hashlib.sha256(os.path.realpath(trace_path).encode()).hexdigest()[:32]
        return os.path.join(self.cache, key + SIDECAR_SUFFIX)

    def is_dir(self) -> bool:
        return os.path.isdir(self.root)

    def relative(self, path: str) -> str:
        return os.path.relpath(path, self.root).replace(os.sep, "/")

    def _check_inside(self, real: str, path: str) -> None:
        """Raises OSError when ``real`` (what ``path`` resolves to) is neither in the logdir nor our cache."""
        if _within(real, os.path.realpath(self.root)) or (
                self.cache is not None and _within(real, os.path.realpath(self.cache))):
            return
        raise OSError(errno.EACCES, f"it resolves to {real}, outside the logdir: refused", path)


class FsspecStorage:
    """An fsspec filesystem: object stores have no append, so producers there rewrite or upload whole
    files; the dashboard sees each new version as the file growing (by size)."""

    remote = True

    def __init__(self, fs: Any, root: str) -> None:
        self.fs = fs
        self.root = root

    def walk(self, on_error: Callable[[str], None]) -> list[Entry]:
        self.fs.invalidate_cache()  # listings are cached by fsspec; a poll must see new files
        try:
            infos = self.fs.find(self.root, detail=True)
        except OSError as exc:
            on_error(f"cannot list {self.root}: {exc}")
            return []
        return [self._entry(info) for info in infos.values() if info.get("type", "file") == "file"]

    def stat(self, path: str) -> Entry:
        self.fs.invalidate_cache(path)
        try:
            return self._entry(self.fs.info(path))
        except FileNotFoundError:
            raise
        except Exception as exc:  # backends raise their own errors: one kind for callers
            raise OSError(f"{path}: {exc}") from exc

    def files(self, directory: str) -> list[Entry]:
        self.fs.invalidate_cache(directory)
        try:
            infos = self.fs.ls(directory, detail=True)
        except FileNotFoundError:
            raise
        except Exception as exc:
            raise OSError(f"{directory}: {exc}") from exc
        return [self._entry(info) for info in infos if info.get("type", "file") == "file"]

    def open(self, path: str) -> IO[bytes]:
        try:
            handle = self.fs.open(path, "rb", block_size=REMOTE_BLOCK)
        except FileNotFoundError:
            raise
        except Exception as exc:
            raise OSError(f"{path}: {exc}") from exc
        return io.BufferedReader(_Remote(handle, path), REMOTE_BLOCK)

    def write_atomic(self, path: str, data: bytes) -> None:
        try:
            self.fs.makedirs(posixpath.dirname(path), exist_ok=True)  # object stores: nothing to make
            self.fs.pipe_file(path, data)  # one PUT: object stores replace objects whole
        except Exception as exc:
            raise OSError(f"{path}: {exc}") from exc

    def sidecar_path(self, trace_path: str) -> str | None:
        return trace_path + SIDECAR_SUFFIX

    def is_dir(self) -> bool:
        try:
            return bool(self.fs.isdir(self.root))
        except Exception:  # an unreachable store: said by the listing
            return False

    def relative(self, path: str) -> str:
        return path[len(self.root):].lstrip("/")

    def _entry(self, info: dict[str, Any]) -> Entry:
        return Entry(info["name"], int(info.get("size") or 0), _mtime_ns(info))


REMOTE_BLOCK = 1 << 20  # bytes asked of a store at once: a read never fetches much beyond what it needs


class _Remote(io.RawIOBase):
    """An fsspec file as a raw stream: ``io.BufferedReader`` over it gives ``readline(limit)`` and
    ``read(n)`` that never ask the store for more than ``REMOTE_BLOCK`` beyond what they return, and
    turns a backend's own errors into OSError."""

    def __init__(self, handle: Any, path: str) -> None:
        super().__init__()
        self._handle = handle
        self._path = path

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._call(self._handle.read, len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return int(self._call(self._handle.seek, offset, whence))

    def tell(self) -> int:
        return int(self._call(self._handle.tell))

    def close(self) -> None:
        if not self.closed:
            with contextlib.suppress(Exception):
                self._handle.close()
        super().close()

    def _call(self, method: Callable[..., Any], *args: Any) -> Any:
        try:
            return method(*args)
        except OSError:
            raise
        except Exception as exc:  # backends raise their own errors: one kind for callers
            raise OSError(f"{self._path}: {exc}") from exc


def _mtime_ns(info: dict[str, Any]) -> int:
    """The modification time fsspec backends report under different names and types."""
    for key in ("mtime", "LastModified", "updated", "last_modified", "created"):
        value = info.get(key)
        if isinstance(value, int | float):
            return int(value * 1e9)
        if isinstance(value, datetime.datetime):
            return int(value.timestamp() * 1e9)
        if isinstance(value, str):
            try:
                return int(datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1e9)
            except ValueError:
                continue
    return 0


SIDECAR_SUFFIX = ".idx.json"


def index_cache() -> str | None:
    """The user's own directory for the sidecars of shared logdirs (``$XDG_CACHE_HOME/loaderscope/index``),
    made private (0700); None if it cannot be made, or is not ours alone."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.path.join(base, "loaderscope", "index")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.lstat(path)
    except OSError:
        return None
    if not stat_mode.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        return None
    return path


def writable_by_others(directory: str) -> bool:
    """Whether a user other than this one may create or rename files in ``directory``.

    Group write counts unless the group is this user's own private group (umask 002 systems).
    """
    try:
        info = os.stat(directory)
    except OSError:
        return False  # nothing will be written there anyway
    if info.st_uid != os.geteuid() or info.st_mode & stat_mode.S_IWOTH:
        return True
    if info.st_mode & stat_mode.S_IWGRP:
        try:
            members = grp.getgrgid(info.st_gid).gr_mem
        except KeyError:
            return True
        return info.st_gid != os.getegid() or bool(members)
    return False


def _check_regular(mode: int, path: str) -> None:
    if not stat_mode.S_ISREG(mode):
        kind = ("a FIFO" if stat_mode.S_ISFIFO(mode) else "a socket" if stat_mode.S_ISSOCK(mode)
                else "a device" if stat_mode.S_ISCHR(mode) or stat_mode.S_ISBLK(mode) else "a directory"
                if stat_mode.S_ISDIR(mode) else "not a file")
        raise OSError(errno.EINVAL, f"{kind}, not a regular file: refused, never read", path)


def _opened_path(fd: int, path: str) -> str:
    """The real path of an open file: the kernel's (nothing can swap it after the open), else resolved."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}").removesuffix(" (deleted)")
    except OSError:
        return os.path.realpath(path)


def _within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


# filesystems whose every change goes through this kernel (inotify sees it); anything else is polled
LOCAL_FILESYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "overlay", "zfs", "f2fs", "jfs",
                               "reiserfs", "bcachefs", "vfat", "exfat", "ramfs"})


def filesystem_type(path: str) -> str | None:
    """The type of the filesystem ``path`` lives on (``/proc/self/mountinfo``), None where unknown."""
    best, kind = "", None
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as mounts:
            for line in mounts:
                fields, _, rest = line.partition(" - ")
                mount_point = fields.split()[4].replace("\\040", " ")
                if _within(path, mount_point) and len(mount_point) >= len(best):
                    best, kind = mount_point, rest.split()[0]
    except (OSError, IndexError):
        return None
    return kind

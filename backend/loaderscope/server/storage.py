"""Where a logdir lives: a local (or NFS-mounted) directory, or any fsspec URL (``s3://``, ``gs://``).

The logdir code only lists files with their size and mtime, opens them for reading (with seek),
and writes small sidecars; these are the operations both kinds offer. fsspec is an optional
extra (``pip install loaderscope[remote]`` plus the protocol's package, e.g. ``s3fs``), imported
only when a logdir is a URL.
"""

from __future__ import annotations

import datetime
import os
import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any, Protocol


@dataclass(frozen=True)
class Entry:
    """A file as a listing sees it."""

    path: str
    size: int
    mtime_ns: int  # 0 where the store keeps no modification time (then changes are seen by size)


class Storage(Protocol):
    root: str
    remote: bool

    def walk(self, on_error: Callable[[str], None]) -> list[Entry]:
        """Every file under the root, recursively (blocking)."""

    def stat(self, path: str) -> Entry:
        """Raises OSError."""

    def open(self, path: str) -> IO[bytes]:
        """A seekable binary reader. Raises OSError."""

    def write_atomic(self, path: str, data: bytes) -> None:
        """Readers never see half of it. Raises OSError."""

    def is_dir(self) -> bool: ...

    def relative(self, path: str) -> str:
        """``path`` relative to the root, ``/``-separated."""


def is_url(logdir: str) -> bool:
    return "://" in logdir


def storage_for(logdir: str) -> Storage:
    """Local storage for a path, fsspec for a URL.

    Raises:
        ValueError: a URL without fsspec installed, or a protocol fsspec does not know.
    """
    if not is_url(logdir):
        return LocalStorage(logdir)
    try:
        # fsspec is the optional extra `remote` (pyproject.toml), not a runtime dependency: only URL
        # logdirs need it, and without it such a logdir is refused with the install command below
        import fsspec  # type: ignore[import-untyped]
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

    def walk(self, on_error: Callable[[str], None]) -> list[Entry]:
        def said(exc: OSError) -> None:
            on_error(f"cannot list {exc.filename}: {exc.strerror}")

        found = []
        for directory, _, names in os.walk(self.root, onerror=said):
            for name in names:
                path = os.path.join(directory, name)
                try:
                    found.append(self.stat(path))
                except OSError:
                    found.append(Entry(path, -1, 0))  # listed, and named unreadable when opened
        return found

    def stat(self, path: str) -> Entry:
        stat = os.stat(path)
        return Entry(path, stat.st_size, stat.st_mtime_ns)

    def open(self, path: str) -> IO[bytes]:
        return open(path, "rb")  # noqa: SIM115 (the caller closes it)

    def write_atomic(self, path: str, data: bytes) -> None:
        directory, name = os.path.split(path)
        temporary = os.path.join(directory, f".{name}.{os.getpid()}.tmp")
        with open(temporary, "wb") as f:
            f.write(data)
        os.replace(temporary, path)

    def is_dir(self) -> bool:
        return os.path.isdir(self.root)

    def relative(self, path: str) -> str:
        return os.path.relpath(path, self.root).replace(os.sep, "/")


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
        except Exception as exc:  # noqa: BLE001 (backends raise their own errors: one kind for callers)
            raise OSError(f"{path}: {exc}") from exc

    def open(self, path: str) -> IO[bytes]:
        try:
            handle: IO[bytes] = self.fs.open(path, "rb")
        except FileNotFoundError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise OSError(f"{path}: {exc}") from exc
        return handle

    def write_atomic(self, path: str, data: bytes) -> None:
        try:
            self.fs.makedirs(posixpath.dirname(path), exist_ok=True)  # object stores: nothing to make
            self.fs.pipe_file(path, data)  # one PUT: object stores replace objects whole
        except Exception as exc:  # noqa: BLE001
            raise OSError(f"{path}: {exc}") from exc

    def is_dir(self) -> bool:
        try:
            return bool(self.fs.isdir(self.root))
        except Exception:  # noqa: BLE001 (an unreachable store: said by the listing)
            return False

    def relative(self, path: str) -> str:
        return path[len(self.root):].lstrip("/")

    def _entry(self, info: dict[str, Any]) -> Entry:
        return Entry(info["name"], int(info.get("size") or 0), _mtime_ns(info))


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

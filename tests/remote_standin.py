"""A remote logdir for tests of ``serve --logdir URL``: a local directory behind a protocol of its own,
``standin://``, read and written only through fsspec as an object store would be (``FsspecStorage``).

A ``file://`` URL is the local path itself (with the local defences, ``storage.local_path``), so it can
no longer stand in for a remote store. Importing this module registers the protocol; a dashboard
started by a test imports it first (``tests.live.launch(setup=...)``).
"""

from __future__ import annotations

from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

PROTOCOL = "standin"


class StandIn(LocalFileSystem):
    protocol = (PROTOCOL,)

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        text = str(path)
        return super()._strip_protocol(text.removeprefix(f"{PROTOCOL}://"))


fsspec.register_implementation(PROTOCOL, StandIn, clobber=True)

"""Another local user, played for real: as root (CI), ``setpriv --reuid 4242`` runs their commands with
uid and gid 4242 and no supplementary groups."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

OTHER = 4242
needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="playing another local user needs root and setpriv")
# seconds: longer is a hang (today a read of an unreadable run waits 60 s; http clients give up at 30)
REQUEST_LIMIT = 20


def as_other_user(*argv: str, stdin: bytes | None = None) -> None:
    """Run ``argv`` as uid/gid 4242 with no supplementary groups."""
    subprocess.run(["setpriv", f"--reuid={OTHER}", f"--regid={OTHER}", "--clear-groups", *argv],
                   input=stdin, check=True, capture_output=True)

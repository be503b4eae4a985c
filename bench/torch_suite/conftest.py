"""Activates the DataLoader swap for the pytest process when LOADERSCOPE_TORCH_SUITE=instrumented.

run.py also installs it through ``patch/sitecustomize.py`` (so spawned and ``python -c`` children are
probed too); this conftest makes a direct ``pytest`` run in this folder work and refuses to report an
"instrumented" pass in which the swap did not happen. It also stands in for ``expecttest`` when that
test-only package is missing (stubs/expecttest.py); spawned children inherit ``sys.path``.
"""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "patch"))
if importlib.util.find_spec("expecttest") is None:  # torch's test utilities need it; see stubs/
    sys.path.insert(0, os.path.join(HERE, "stubs"))

import loaderscope_suite_patch  # noqa: E402 (in patch/, put on sys.path above, after a check)

loaderscope_suite_patch.install()  # before pytest imports test_dataloader.py


def pytest_report_header(config: pytest.Config) -> str:
    import torch.utils.data

    loader = torch.utils.data.DataLoader
    return f"torch_suite: torch.utils.data.DataLoader is {loader.__module__}.{loader.__qualname__}"


def pytest_sessionstart(session: pytest.Session) -> None:
    if not loaderscope_suite_patch.active():
        return
    import torch.utils.data
    import torch.utils.data.dataloader

    from loaderscope import InstrumentedDataLoader

    for where in (torch.utils.data, torch.utils.data.dataloader):
        if not issubclass(where.DataLoader, InstrumentedDataLoader):
            pytest.exit(f"{where.__name__}.DataLoader was not replaced", returncode=3)

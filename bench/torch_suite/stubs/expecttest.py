"""Stand-in for the ``expecttest`` package (a torch test-only dependency, not installed here).

``torch.testing._internal.common_utils`` imports it for ``expecttest.TestCase`` (the base of torch's
``TestCase``) and ``expecttest.ACCEPT``. The DataLoader suite never calls ``assertExpectedInline``,
so only that method is stubbed, and it refuses loudly rather than pass. conftest.py puts this folder
on ``sys.path`` only when the real package is missing.
"""

import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    longMessage = True

    def assertExpectedInline(self, actual, expect, skip=0):
        raise NotImplementedError("expecttest is stubbed by bench/torch_suite; install expecttest")

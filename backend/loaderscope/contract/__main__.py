"""``python -m loaderscope.contract --write | --check``: write the generated files, or fail when one
differs from what the contract generates (``contract/generated.py``)."""

from __future__ import annotations

import sys

from loaderscope.contract import generated
from loaderscope.contract.generate import COMMAND, OUTPUTS

if __name__ == "__main__":
    sys.exit(generated.main(sys.argv[1:], OUTPUTS, "backend/loaderscope/contract/", COMMAND))

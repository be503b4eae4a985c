"""``python -m loaderscope.cli``: the same command as ``loaderscope``."""

import sys

from loaderscope.cli.main import main

sys.exit(main())

"""The ``loaderscope`` command line: its subcommands, and how they print.

``main.py`` is the command (``loaderscope``, ``python -m loaderscope.cli``), ``compare.py`` its
``compare`` subcommand, ``output.py`` how tables print (to a terminal, piped, as CSV or JSON);
``loaderscope doctor`` lives with the rest of the doctor in ``doctor/``. This is the top layer: it
may import any part of loaderscope (the server, the simulator and the probe inside the subcommand
that needs them, so that ``loaderscope --help`` stays quick), and nothing in loaderscope imports it.
"""

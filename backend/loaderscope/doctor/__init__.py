"""``loaderscope doctor PID``: why a training process that nobody set up is stuck, read from outside.

``sample.py`` reads the process with py-spy and /proc, ``model.py`` rebuilds the loader's state in
torch's terms (pure), ``verdict.py`` names the cause (pure), ``snapshot.py`` writes it as a trace the
page opens, ``cli.py`` is the command.
"""

"""What the dashboard knows about each run, and where a run's events are kept.

``manager.py`` holds the ``RunManager`` (it starts, steers, lists, evicts and ends runs) and each
``Run``; ``store.py`` numbers a run's events, keeps the newest in memory and reduces them into a live
``LoaderState``; ``spill.py`` appends every event to the run's trace file and reads any range back.
It may import the pure core (events, state, diagnosis, trace), the scenarios (a run's plan),
``server.config``, ``server.budgets`` and ``server.processes`` (the run processes it starts). It
never imports ``web`` or ``logdir``: the logdir reaches it through a protocol that it defines.
"""

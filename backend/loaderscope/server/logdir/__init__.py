"""``serve --logdir DIR``: the trace files under a directory, read as runs while they grow.

``follow.py`` lists every trace under DIR as a run and follows the ones being viewed, ``index.py``
says what the run list needs of a trace without parsing its events (kept in a sidecar),
``tracefile.py`` reads a trace that someone else writes by byte offset, tolerating a torn end, and
``storage.py`` is where DIR lives (a local directory or an fsspec URL). It may import the pure
core (events, trace) and ``server.runs`` (a trace becomes a run of the manager); never ``web``.
"""

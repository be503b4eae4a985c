"""The dashboard server, in rooms by concern; ``server.web.dashboard.serve()`` runs it.

``web/`` is the HTTP and websocket surface (FastAPI, uvicorn: ``create_app``, the routes, ``serve``),
``runs/`` the run manager and each run's store and trace file, ``logdir/`` the traces of
``serve --logdir`` read as runs, ``processes/`` the run processes and their launcher, and
``security/`` the checks and limits in front of it all. ``config.py`` (``ServerConfig``: one launch's
settings) and ``budgets.py`` (the byte budgets) are read by every room. Each room's ``__init__`` says
what it may import; ``web`` is on top, and nothing outside the server imports it but the command line.
This package imports nothing itself: run processes and the launcher import it too, and need neither
FastAPI nor uvicorn.
"""

"""The HTTP and websocket surface of the dashboard: the ASGI app, its ◆ routes and websockets, ``serve()``.

``app.py`` builds the app (``create_app``), ``api.py`` holds the REST routes and ``whatif.py`` the
sweeps of a recorded run, ``ingest.py``, ``stream.py`` and ``runlist.py`` the three websockets,
``errors.py`` validation errors a person can act on, and ``dashboard.py`` ``serve()`` (uvicorn). It
is the only room that imports FastAPI and uvicorn, and the top of the server: it may import every
other room (``runs``, ``logdir``, ``processes``, ``security``), ``server.config`` and
``server.budgets``, the scenarios, the simulator and the pure core; no other room imports it.
"""

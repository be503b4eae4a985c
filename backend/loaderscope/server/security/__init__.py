"""Who may talk to the dashboard, and how much any one client may make it hold or do.

``guard.py`` checks Host, Origin and the token in one ASGI middleware ahead of every route,
``bodylimit.py`` caps request bodies before anything parses them, ``protocols.py`` gives uvicorn's
HTTP and websocket protocols a request-head timeout and a pong budget, and ``logs.py`` keeps the
token out of the access log. It may import only ``server.config``, ``server.budgets`` and
``proof.py`` (and Starlette's and uvicorn's types), so each check can be read and tested on its own.
"""

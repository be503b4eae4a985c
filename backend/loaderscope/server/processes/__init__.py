"""Run processes: a dashboard run's DataLoader runs here, never in the server's own process.

``process.py`` starts a run process in its own session and ends its whole process group,
``launcher.py`` is a preloaded process that forks run processes in a fraction of a second, and
``runproc.py`` is the run process itself (``python -m loaderscope.server.processes.runproc``). These
modules run outside the server: they import neither FastAPI nor uvicorn nor another room of the
server, only the runner, the scenarios, the simulator and the pure core (torch lazily, where a run
needs it).
"""

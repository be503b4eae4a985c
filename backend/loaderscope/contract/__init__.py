"""The contract between producers, the server and the page, written once.

``contract/events.py`` declares the event schema (kinds, fields, types, limits, compact rows, run
statuses) as msgspec Structs and tables; ``contract/replay.py`` what a replay of a recorded loader
may change. Everything else reads them: ``loaderscope.events`` validates frames with decoders built
from the Structs, and the page reads ``frontend/js/contract.gen.js``, which ``python -m
loaderscope.contract --write`` generates from the ``SECTIONS`` of ``contract/generate.py`` (CI runs
``--check``). This package imports nothing of loaderscope's outside itself.
"""

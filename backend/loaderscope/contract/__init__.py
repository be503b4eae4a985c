"""The contract between producers, the server and the page, written once.

``contract/events.py`` declares the event schema (kinds, fields with their meanings, types, limits,
compact rows, run statuses) as msgspec Structs and tables, and ``contract/shapes.py`` the nested
values events carry; ``contract/rules.py`` what each kind does to the loader-state model (the
transition rules both reducers interpret); ``contract/loader.py`` the DataLoader's settings (torch's
defaults, the bounds a request may ask for); ``contract/replay.py`` what a replay of a recorded loader
may change. Everything else reads them: ``loaderscope.events`` validates frames with decoders built
from the Structs, ``state.py`` follows the rules, ``settings.py`` types the settings, and
``python -m loaderscope.contract --write`` generates from them what the page and the docs read
(``contract/generate.py``'s ``OUTPUTS``): ``frontend/js/model/contract.gen.js`` (the tables, with the event
table's column map of ``contract/columns.py``), ``frontend/js/model/types.gen.js`` (the page's event types,
``contract/jsdoc.py``), ``docs/reference/events.md`` (``contract/reference.py``) and
``docs/events.schema.json``. CI runs ``--check``; ``contract/generated.py`` is that command, shared
with ``loaderscope.model.wording``. This package imports nothing of loaderscope's outside itself.
"""

"""The contract between producers, the server and the page, written once.

``contract/events.py`` declares the event schema (kinds, fields, types, limits, compact rows, run
statuses) as msgspec Structs and tables; ``contract/rules.py`` what each kind does to the loader-state
model (the transition rules both reducers interpret); ``contract/loader.py`` the DataLoader's settings
(torch's defaults, the bounds a request may ask for); ``contract/replay.py`` what a replay of a
recorded loader may change. Everything else reads them: ``loaderscope.events`` validates frames with
decoders built from the Structs, ``state.py`` follows the rules, ``settings.py`` types the settings,
and the page reads ``frontend/js/contract.gen.js``, which ``python -m loaderscope.contract --write``
generates from the ``SECTIONS`` of ``contract/generate.py`` (CI runs ``--check``; ``contract/generated.py``
is that command, shared with ``loaderscope.wording``). This package imports nothing of loaderscope's
outside itself.
"""

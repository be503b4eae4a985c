"""The pure model: what a stream of events says about a DataLoader, and how it is put into words.

No torch, no I/O, no web stack (``.importlinter``'s pure-core contract). ``state`` reduces events to
the loader's state (``fastpath`` a frame at once), ``stats`` gives its statistics as numbers;
``diagnosis`` says what they mean, in the sentences of ``wording``; ``memory`` keeps the memory
samples; ``ranks`` compares the ranks of one job; ``compare`` tells two runs apart; ``conformance``
checks a trace's protocol invariants; ``advicetext`` words the advice on ``num_workers``. The page
mirrors them in ``frontend/js`` (each module names its mirror).
"""

"""Trace files, in one place: what a run's events become on disk and how they are read back.

``jsonl`` (the JSON-lines format, the readers that pick the format by path, the Chrome export),
``parquet`` (the columnar format), ``header`` (the first record both formats check), ``paths`` (where a
run's trace goes in a logdir), ``safefiles`` (how both writers make files in a shared directory) and
``jobquery`` (a job's ranks tabled by SQL over their traces). The package re-exports nothing.
"""

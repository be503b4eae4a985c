"""Scenarios: a dataset, samplers and a latency model, runnable for real or simulated.

``plan.resolve(name, values)`` checks a scenario's parameters (raising ``errors.ParamError``) and
returns a ``Plan``; ``Plan.build()`` imports the scenario's builder (and torch) and returns the
``workload.Workload`` that the real runner and the simulator both take. ``catalog`` is the table of
scenarios (``hub.py``'s ``torch.hub`` entries join it through ``catalog.register``), ``params`` their
typed and bounded parameters. Listing and resolving never import torch: ``builders.py``,
``datasets.py`` and ``gpu.py`` do, and are imported by dotted path only when a run is built. This
package imports only the pure core (and, in ``gpu.py``, ``probe.batchinfo``). It re-exports nothing:
import a name from its module, so that the simulator, which takes a ``Workload``, loads neither the
catalog nor pydantic's models of the parameters, and ``loaderscope --help`` stays quick.
"""

"""Built-in scenarios: a dataset, a sampler and a latency model, runnable for real or simulated."""

from loaderscope.scenarios.base import REGISTRY, CommonParams, LoaderPlan, Scenario, UnknownScenario, get

__all__ = ["REGISTRY", "CommonParams", "LoaderPlan", "Scenario", "UnknownScenario", "all_scenarios", "get"]


def all_scenarios() -> list[Scenario]:
    from loaderscope.scenarios import catalog  # noqa: F401  (registers the built-ins)
    from loaderscope.scenarios.hub import register_from_env

    register_from_env()  # torch.hub entries the dashboard's command line named

    return sorted(REGISTRY.values(), key=lambda s: s.name)

"""The instrumented DataLoader against vanilla torch: real worker processes, real scenarios."""

from __future__ import annotations

import inspect
import time
import warnings
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from loaderscope import InstrumentedDataLoader
from loaderscope.model.conformance import check
from loaderscope.runner import Collector, build_loader, run_real
from loaderscope.scenarios.catalog import all_scenarios, get
from tests.conftest import wait_for

warnings.filterwarnings("ignore", message=".*suggested max number of worker.*")

FAST = {"sample_ms": 1.0, "dataset_size": 40, "step_ms": 0.0}


def _batches(loader: Any, epochs: int) -> list[list[torch.Tensor]]:
    return [[torch.as_tensor(batch).clone() for batch in loader] for _ in range(epochs)]


def _kinds(events: list[dict[str, Any]]) -> list[str]:
    return [e["kind"] for e in events]


@pytest.mark.parametrize("num_workers", [0, 1, 4])
@pytest.mark.parametrize("scenario", [s.name for s in all_scenarios() if not s.fails])
def test_scenario_is_conformant_and_matches_vanilla(scenario: str, num_workers: int) -> None:
    params = FAST | {"num_workers": num_workers} | ({"stuck_seconds": 0.1} if scenario == "stuck_worker" else {})
    plan = get(scenario).plan(params)
    collector = Collector()
    probed = build_loader(plan, sink=collector)
    got = _batches(probed, plan.epochs)
    probed.close()
    expected = _batches(build_loader(plan, DataLoader), plan.epochs)

    assert [len(epoch) for epoch in got] == [len(epoch) for epoch in expected]
    for got_epoch, expected_epoch in zip(got, expected, strict=True):
        for a, b in zip(got_epoch, expected_epoch, strict=True):
            assert torch.equal(a, b)
    assert check(collector.events) == []
    yields = sum(1 for e in collector.events if e["kind"] == "yield")
    assert yields == sum(len(epoch) for epoch in expected)
    assert collector.events[0]["kind"] == "run_start"
    assert collector.events[-1]["kind"] == "run_end"


def test_out_of_order_really_parks_results() -> None:
    collector = Collector()
    state = run_real("out_of_order", {"dataset_size": 32, "sample_ms": 3}, collector)
    buffered = [e for e in collector.events if e["kind"] == "parked"]
    assert buffered, "no result was parked in the reorder buffer"
    # a parked task waits for an earlier one; it is released from the buffer, in order
    assert all(e["waiting_for"] < e["idx"] for e in buffered)
    released = {e["idx"] for e in collector.events if e["kind"] == "yield" and e["from_parked"]}
    assert {e["idx"] for e in buffered} == released
    assert state.parked_high >= 1 and state.violations == []


def test_fetch_events_come_from_the_worker_before_arrival() -> None:
    collector = Collector()
    run_real("uniform", FAST | {"num_workers": 2}, collector)
    seen: dict[int, list[str]] = {}
    for e in collector.events:
        if e["kind"] in ("dispatch", "fetch_start", "fetch_end", "arrive", "yield"):
            seen.setdefault(e["idx"], []).append(e["kind"])
    assert all(kinds == ["dispatch", "fetch_start", "fetch_end", "arrive", "yield"] for kinds in seen.values())
    ends = [e for e in collector.events if e["kind"] == "fetch_end"]
    assert all(e["nbytes"] == 4 * 8 * 4 for e in ends[:-1])  # batch_size 4 of float32[8]
    assert all(0 < e["dt"] < 1 for e in ends)


class Cells(Dataset[torch.Tensor]):
    """A map-style dataset keyed by ``(row, column)`` tuples, drawn one at a time (``batch_size=None``)."""

    def __getitem__(self, key: tuple[int, int]) -> torch.Tensor:
        return torch.tensor(key)


def test_a_dispatch_names_a_tuple_index_as_the_sampler_drew_it() -> None:
    keys = [(row, column) for row in range(3) for column in range(4)]
    collector = Collector()
    loader = InstrumentedDataLoader(Cells(), sampler=keys, batch_size=None, num_workers=2, sink=collector)
    got = [tuple(sample.tolist()) for sample in loader]
    loader.close()
    dispatched = {e["idx"]: e["indices"] for e in collector.events if e["kind"] == "dispatch"}
    assert got == keys
    assert [tuple(dispatched[idx]) for idx in range(len(keys))] == keys


@pytest.mark.skipif("in_order" not in inspect.signature(DataLoader.__init__).parameters,
                    reason="in_order is a DataLoader argument from torch 2.6 on "
                           "(tests/probe/test_torch_protocol.py covers 2.4)")
def test_in_order_false_yields_as_results_arrive() -> None:
    collector = Collector()
    run_real("out_of_order", {"dataset_size": 32, "sample_ms": 3, "in_order": False}, collector)
    yields = [e["idx"] for e in collector.events if e["kind"] == "yield"]
    assert sorted(yields) == list(range(8))
    assert yields != sorted(yields), "in_order=False should release results as they arrive"
    assert not any(e["kind"] == "parked" for e in collector.events)
    assert check(collector.events) == []


def test_persistent_workers_survive_epochs() -> None:
    collector = Collector()
    run_real("persistent_epochs", FAST | {"epochs": 3}, collector)
    kinds = _kinds(collector.events)
    assert kinds.count("epoch_start") == 3 and kinds.count("epoch_end") == 3
    assert kinds.count("worker_start") == 4 and kinds.count("worker_exit") == 4
    assert kinds.index("worker_exit") > max(i for i, k in enumerate(kinds) if k == "yield")


def test_abandoned_persistent_epoch_is_recorded_and_next_epoch_is_clean() -> None:
    collector = Collector()
    plan = get("persistent_epochs").plan(FAST)
    loader = build_loader(plan, sink=collector)
    for i, _ in enumerate(loader):
        if i == 2:
            break
    full = [b.clone() for b in loader]
    loader.close()
    assert len(full) == 10
    ends = [e for e in collector.events if e["kind"] == "epoch_end"]
    assert [e["abandoned"] for e in ends] == [True, False]
    assert check(collector.events) == []


@pytest.mark.parametrize("num_workers", [0, 2])
def test_epoch_end_counts_the_batches_of_finished_and_abandoned_epochs(num_workers: int) -> None:
    collector = Collector()
    loader = InstrumentedDataLoader(torch.utils.data.TensorDataset(torch.arange(20.0)), batch_size=2,
                                    num_workers=num_workers, sink=collector)
    for i, _ in enumerate(loader):  # the iterator is dropped mid-epoch
        if i == 2:
            break
    assert len(list(loader)) == 10
    loader.close()
    ends = [(e["batches"], e["abandoned"]) for e in collector.events if e["kind"] == "epoch_end"]
    assert ends == [(3, True), (10, False)]
    assert check(collector.events) == []


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_workers_report_through_their_ring_under_every_start_method(context: str) -> None:
    # The ring travels pickled (Ring.__reduce__) when workers are not forked.
    collector = Collector()
    loader = InstrumentedDataLoader(torch.utils.data.TensorDataset(torch.arange(8.0)), batch_size=2, num_workers=1,
                                    multiprocessing_context=context, sink=collector)
    assert len(list(loader)) == 4
    loader.close()
    ends = [e for e in collector.events if e["kind"] == "fetch_end"]
    assert [e["idx"] for e in ends] == [0, 1, 2, 3] and all(e["nbytes"] == 8 and e["dt"] >= 0 for e in ends)
    assert check(collector.events) == []


class Exploding(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == 9:
            raise ValueError(f"corrupt sample {index}")
        return torch.tensor([index])


def _raise_from(loader: Any) -> BaseException:
    with pytest.raises(Exception) as info:
        for _ in loader:
            pass
    return info.value


@pytest.mark.parametrize("num_workers", [0, 2])
def test_dataset_error_is_torchs_own_and_recorded(num_workers: int) -> None:
    vanilla = _raise_from(DataLoader(Exploding(), batch_size=4, num_workers=num_workers))
    collector = Collector()
    loader = InstrumentedDataLoader(Exploding(), batch_size=4, num_workers=num_workers, sink=collector)
    probed = _raise_from(loader)
    loader.close("error")
    assert type(probed) is type(vanilla) is ValueError
    assert str(probed) == str(vanilla)
    errors = [e for e in collector.events if e["kind"] == "error"]
    assert len(errors) == 1
    assert errors[0]["idx"] == 2 and errors[0]["type"] == "ValueError"
    assert "corrupt sample 9" in errors[0]["traceback"]


class Slow(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(1.0 if index == 0 else 0)
        return torch.tensor([index])


def test_timeout_is_torchs_own_and_recorded_with_what_workers_were_doing() -> None:
    collector = Collector()
    loader = InstrumentedDataLoader(Slow(), batch_size=2, num_workers=2, timeout=0.3, sink=collector)
    error = _raise_from(loader)
    loader.close("error")
    assert isinstance(error, RuntimeError) and "timed out after 0.3 seconds" in str(error)
    timeouts = [e for e in collector.events if e["kind"] == "timeout"]
    assert timeouts and timeouts[0]["seconds"] == 0.3
    assert timeouts[0]["workers"][0]["idx"] == 0  # worker 0 was still fetching task 0
    assert timeouts[0]["workers"][0]["worker"] == 0


def test_generic_subscription_and_vanilla_attributes() -> None:
    loader = InstrumentedDataLoader[torch.Tensor](Exploding(), batch_size=3, sink=lambda events: None)
    assert isinstance(loader, DataLoader) and len(loader) == 6 and loader.batch_size == 3
    loader.close()


class ReplicatedStream(torch.utils.data.IterableDataset[torch.Tensor]):
    """Every worker yields the whole stream (a common mistake torch warns about once len() was asked)."""

    def __len__(self) -> int:
        return 4

    def __iter__(self) -> Any:
        return iter(torch.arange(4.0))


def test_the_probe_asking_len_does_not_trigger_torchs_iterable_length_warning() -> None:
    # Found by running torch's own test_dataloader.py through the probe (bench/torch_suite).
    loader = InstrumentedDataLoader(ReplicatedStream(), num_workers=2, sink=lambda events: None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        count = 0
        for _ in loader:  # not list(loader): list() asks len() itself, as a size hint
            count += 1
    loader.close()
    assert count == 8
    assert loader._IterableDataset_len_called is None


@pytest.mark.parametrize("num_workers", [0, 2])
def test_batch_values_are_sampled_only_when_asked(num_workers: int) -> None:
    collector = Collector()
    dataset = torch.utils.data.TensorDataset(torch.arange(40.0))
    loader = InstrumentedDataLoader(dataset, batch_size=2, num_workers=num_workers, sink=collector)
    iterator = iter(loader)
    for _ in range(2):
        next(iterator)
    # described on the probe's tick
    wait_for(lambda: loader.flush() or collector.state.batch_samples, timeout=5, what="a described batch")
    assert not any(b.get("values") for b in collector.state.batch_samples)
    assert "values" not in str(collector.state.batch_samples[0]["structure"])  # structure and sizes only
    loader.ask_values()
    for _ in iterator:  # the workers describe the next batch they finish, with values
        pass
    loader.close()
    asked = [b for b in collector.state.batch_samples if b.get("values")]
    assert asked, "asking gives a batch described with its values"
    leaf = asked[0]["structure"]["items"][0]  # TensorDataset batches are [tensor]
    assert leaf["type"] == "Tensor" and len(leaf["values"]) == 2 and leaf["values"][0] >= 0


class Rows(Dataset[torch.Tensor]):
    """Items are tensors, so in-process batches are plain tensors: torch's fast path, recorded inline."""

    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.full((2,), float(index))


def test_in_process_tensor_batches_give_each_batch_its_five_events_and_values_when_asked() -> None:
    collector = Collector()
    loader = InstrumentedDataLoader(Rows(), batch_size=2, sink=collector)
    iterator = iter(loader)
    for _ in range(5):  # past the first three, which are described
        next(iterator)
    loader.ask_values()
    rest = list(iterator)
    loader.close()
    assert len(rest) == 3
    per_batch = {kind: [e for e in collector.events if e["kind"] == kind]
                 for kind in ("dispatch", "fetch_start", "fetch_end", "arrive", "yield")}
    assert all(len(events) == 8 for events in per_batch.values())
    assert [e["indices"] for e in per_batch["dispatch"]] == [[2 * i, 2 * i + 1] for i in range(8)]
    assert {e["nbytes"] for e in per_batch["fetch_end"]} == {2 * 2 * 4}  # two rows of two float32
    assert all(e["wait"] >= e2["dt"] >= 0 for e, e2 in zip(per_batch["yield"], per_batch["fetch_end"], strict=True))
    asked = [b for b in collector.state.batch_samples if b.get("values")]
    assert [b["idx"] for b in asked] == [5], "the batch after the ask is described with its values"


class LengthBatches(torch.utils.data.Sampler[list[int]]):
    """A custom batch sampler that draws its batches itself (no inner sampler)."""

    batch_size = 2

    def __iter__(self) -> Any:
        return iter([[0, 1], [2, 3]])

    def __len__(self) -> int:
        return 2


def test_config_names_the_sampler_that_draws_the_indices_not_torchs_unused_default() -> None:
    # DataLoader.__init__ builds a SequentialSampler even when a batch_sampler is given (the HF
    # Trainer, accelerate): the indices come from the batch sampler's own sampler.
    from accelerate.data_loader import BatchSamplerShard
    from torch.utils.data import BatchSampler, DistributedSampler, RandomSampler, SequentialSampler

    from loaderscope.probe.loader import loader_config

    data = torch.arange(8.0)
    shuffled = BatchSampler(RandomSampler(data), batch_size=2, drop_last=False)
    cases = {
        "RandomSampler": DataLoader(data, batch_sampler=shuffled),
        "DistributedSampler": DataLoader(data, batch_sampler=BatchSampler(
            DistributedSampler(data, num_replicas=2, rank=0), batch_size=2, drop_last=False)),
        "LengthBatches": DataLoader(data, batch_sampler=LengthBatches()),
        "SequentialSampler": DataLoader(data, batch_size=2),
    }
    # accelerate's prepare() wraps the user's batch sampler in a BatchSamplerShard
    cases["RandomSampler (accelerate)"] = DataLoader(data, batch_sampler=BatchSamplerShard(shuffled, 1, 0))
    for expected, loader in cases.items():
        assert isinstance(loader.sampler, SequentialSampler)  # what torch shows, used or not
        assert loader_config(loader)["sampler"] == expected.split()[0], expected
    assert loader_config(cases["RandomSampler"])["batch_sampler"] == "BatchSampler"


class Billions(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 1 << 30  # a web-scale index: a byte per index would be 1 GiB per epoch

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([index])


class FirstFew(torch.utils.data.DistributedSampler[int]):
    def __iter__(self) -> Any:
        return iter(range(self.rank, 64, self.num_replicas))

    def __len__(self) -> int:
        return 32


def test_a_dataset_past_the_shard_checks_length_builds_no_digest() -> None:
    collector = Collector()
    dataset = Billions()
    loader = InstrumentedDataLoader(dataset, batch_size=8, sampler=FirstFew(dataset, num_replicas=2, rank=0),
                                    sink=collector)
    assert len(list(loader)) == 4
    loader.close("done")
    end = next(e for e in collector.events if e["kind"] == "epoch_end")
    assert end["batches"] == 4 and "shard" not in end  # no job table reads a digest of 2^30 counts

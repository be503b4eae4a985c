"""The contract's generated files: checked in, and a drift fails `python -m loaderscope.contract --check`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from loaderscope.contract import columns, generate, generated
from loaderscope.contract.columns import ColumnError, Field, column_map
from loaderscope.contract.events import REQUIRED, STRUCTS

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("module", ["loaderscope.contract", "loaderscope.model.wording"])
def test_the_checked_in_files_are_what_their_tables_generate(module: str) -> None:
    done = subprocess.run([sys.executable, "-m", module, "--check"], cwd=ROOT, capture_output=True,
                          text=True, env={"PYTHONPATH": str(ROOT / "backend")}, check=False)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("name", [path.name for path in generate.OUTPUTS])
def test_a_stale_file_fails_the_check_with_the_command_that_fixes_it(name: str, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Every generated file, the page's types and the reference included: a field declared and not
    regenerated fails CI."""
    outputs = {tmp_path / path.name: render for path, render in generate.OUTPUTS.items()}

    def main(argv: list[str]) -> int:
        return generated.main(argv, outputs, "backend/loaderscope/contract/", generate.COMMAND, root=tmp_path)
    assert main(["--write"]) == 0 and main(["--check"]) == 0
    target = tmp_path / name
    assert "waiting_for" in target.read_text()
    target.write_text(target.read_text().replace("waiting_for", "waiting"))
    assert main(["--check"]) == 1
    said = capsys.readouterr().err
    assert f"{name} out of date" in said and generate.COMMAND in said


def test_the_generated_files_are_the_ones_ci_checks() -> None:
    assert {path.relative_to(ROOT).as_posix() for path in generate.OUTPUTS} == {
        "frontend/js/model/contract.gen.js", "frontend/js/model/types.gen.js", "docs/reference/events.md",
        "docs/events.schema.json"}


FETCH = {"idx": Field("int", True), "worker": Field("int", True), "epoch": Field("int", False),
         "dt": Field("number", False), "nbytes": Field("number", False), "pickled": Field("number", False)}


def test_each_field_of_a_frequent_kind_gets_a_column_or_keeps_its_row_whole() -> None:
    assert columns.frequent()["fetch_end"] == {"idx": "idx", "worker": "worker", "epoch": "epoch", "dt": "a",
                                               "nbytes": "b", "pickled": "c", "stop": "bool"}
    # the experiment: one more optional number, and the columns are taken
    more = column_map({"fetch_end": FETCH | {"queue_len": Field("number", False)}})
    assert "queue_len" not in more["fetch_end"] and more["fetch_end"]["pickled"] == "c"
    shared = column_map({"dispatch": {"idx": Field("int", True), "indices": Field("array", False),
                                      "n": Field("number", False)},
                         "fetch_start": {"idx": Field("int", True), "n": Field("number", False),
                                         "b_only": Field("number", False)}})
    assert shared["dispatch"] == {"idx": "idx", "indices": "indices", "n": "a"}
    assert shared["fetch_start"] == {"idx": "idx", "n": "a", "b_only": "b"}  # one column per name, in every kind


@pytest.mark.parametrize(("kinds", "said"), [
    ({"fetch_end": FETCH | {"queue_len": Field("number", True)}},
     "frequent kind fetch_end: its required field 'queue_len' has no column left"),
    ({"fetch_end": FETCH | {"label": Field("string", True)}}, "its required field 'label' has no column left"),
    ({"fetch_end": {k: v for k, v in FETCH.items() if k != "idx"}}, "it needs a required integer 'idx'"),
    ({"fetch_end": FETCH, "pin_end": {"idx": Field("int", True), "dt": Field("int", False)}},
     "'dt' is typed int and number"),
    ({"fetch_end": FETCH | {"epoch": Field("number", False)}}, "'epoch' must be an integer"),
])
def test_the_generator_refuses_a_frequent_kind_the_table_cannot_hold(kinds: dict[str, dict[str, Field]],
                                                                     said: str) -> None:
    with pytest.raises(ColumnError, match=said):
        column_map(kinds)


def test_the_page_gets_every_kind_with_its_required_fields() -> None:
    kinds = generate.kinds()
    assert kinds.keys() == STRUCTS.keys()
    for kind, names in REQUIRED.items():
        assert [name for name, rule in kinds[kind].items() if rule["required"]] == list(names)
    assert kinds["dispatch"]["worker"] == {"type": "int", "nullable": False, "min": 0, "max": 4095, "required": True}


def test_every_field_a_real_probe_sends_is_declared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An undeclared field sends a real run's frames down the slow, one-event-at-a-time check."""
    import orjson
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    import loaderscope
    from loaderscope import events
    from loaderscope.traces import jsonl as trace

    with loaderscope.watch(DataLoader(TensorDataset(torch.arange(32.0)), batch_size=4, num_workers=2),
                           logdir=tmp_path) as loader:
        for _ in range(2):
            list(loader)
    [path] = tmp_path.rglob("*.trace.jsonl")
    _, recorded = trace.read_trace(path)
    assert {"run_start", "dispatch", "fetch_end", "yield", "epoch_end"} <= {e["kind"] for e in recorded}

    def slow(data: bytes, slice_events: int) -> object:
        raise AssertionError("the one-pass decode refused a real run's frame: a field the contract does not declare")

    monkeypatch.setattr(events, "_decode_slowly", slow)
    decoded = events.decode_message(orjson.dumps(recorded))
    assert not isinstance(decoded, dict)
    assert sum(map(len, decoded)) == len(recorded)

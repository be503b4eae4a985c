"""watch(): a training script's own DataLoader, streamed to a real dashboard that may go away."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import loaderscope
from loaderscope import discovery as dashboard
from loaderscope.events import MAX_FRAME_BYTES
from tests.conftest import wait_for
from tests.squares import Squares


class LibraryLoader(DataLoader[torch.Tensor]):
    """Stands for a loader class a framework builds for you, with methods of its own."""

    def describe(self) -> str:
        return f"{len(self)} batches"


def _runs(server: Any) -> list[dict[str, Any]]:
    with server.client() as http:
        return http.get("/api/runs").json()


def test_watch_streams_a_library_loader_without_changing_what_it_yields(server: Any) -> None:
    expected = [b.clone() for b in LibraryLoader(Squares(), batch_size=8, shuffle=False, num_workers=2)]
    loader = loaderscope.watch(LibraryLoader(Squares(), batch_size=8, num_workers=2), url=server.page_url,
                               name="train.py")
    assert isinstance(loader, LibraryLoader) and loader.describe() == "8 batches"
    with loader:
        got = [b.clone() for b in loader]
    assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True)) and len(got) == len(expected)
    run_id = loader._probe_transport.run
    run = wait_for(lambda: next((r for r in _runs(server) if r["id"] == run_id and r["status"] == "done"), None))
    assert run["batches"] == 8 and run["dropped"] == 0
    with server.client() as http:
        detail = http.get(f"/api/runs/{run_id}").json()
    assert detail["config"]["num_workers"] == 2


def test_training_survives_the_dashboard_dying(start_server: Any) -> None:
    live = start_server()
    loader = loaderscope.watch(DataLoader(Squares(48, delay=0.005), batch_size=2, num_workers=2), url=live.page_url)
    batches = 0
    iterator = iter(loader)
    sink = loader._probe_transport  # opened at the first iter(): a loader never iterated leaves no run
    for _ in iterator:
        batches += 1
        if batches == 4:
            wait_for(lambda: sink.sent > 0)
            os.kill(live.process.pid, signal.SIGKILL)  # the dashboard is gone mid-training
            wait_for(lambda: not sink.connected.is_set(), what="the uplink to notice")
    loader.close()
    assert batches == 24  # the last 20 came while the uplink could not reach the dashboard
    assert not sink.connected.is_set()
    assert sink.sent > 0 and len(sink.buffer) + sink.dropped > 0  # what could not be sent is accounted for


@pytest.mark.slow
def test_a_frame_the_dashboard_refuses_is_said_once_and_the_rest_goes_on(
        start_server: Any, capfd: pytest.CaptureFixture[str]) -> None:
    """Three loaders in turn on a fresh dashboard, each refused one frame: the refusal crosses the end of
    training in some (the sink then reconnects once more to send what came after it). The probe clips
    what it records itself (an error's text: test_an_error_with_a_huge_message_reaches_the_dashboard_clipped);
    the event over a frame's 2 MiB is put on the loader's own recorder here."""
    live = start_server()
    reason = f"is over this dashboard's limit of {MAX_FRAME_BYTES:,} bytes; send smaller frames"
    for _ in range(3):
        loader = loaderscope.watch(DataLoader(Squares(48), batch_size=4, num_workers=2), url=live.page_url)
        got = []
        with loader:
            for batch in loader:
                got.append(batch.tolist())
                if len(got) == 4:
                    loader._probe.note("note", text="x" * 3_000_000)
        assert got == [batch.tolist() for batch in DataLoader(Squares(48), batch_size=4)]
        run_id = loader._probe_transport.run
        run = wait_for(
            lambda: (r := live.run(run_id))["status"] == "done" and r,  # noqa: B023 (called within the iteration)
            what="the rest of the run")
        err = capfd.readouterr().err
        assert err.count(reason) == 1 and err.count("refused a frame of 1 event: ") == 1, err[-3000:]
        assert "did not reach" not in err and "failed" not in err
        assert run["batches"] == 12 and run["dropped"] == 1  # the note, and nothing else


@pytest.mark.parametrize("resend_events", [None, 0])
def test_a_restarted_dashboard_gets_the_rest_of_the_run_and_counts_the_drops(start_server: Any,
                                                                             resend_events: int | None) -> None:
    first = start_server()
    port, token = first.port, first.token
    loader = loaderscope.watch(DataLoader(Squares(60, delay=0.02), batch_size=2, num_workers=2), url=first.page_url)
    second = None
    iterator = iter(loader)
    sink = loader._probe_transport
    if resend_events is not None:
        sink.resend_limit = resend_events  # what the producer no longer holds when the new dashboard asks
    for batches, _ in enumerate(iterator, start=1):
        if batches == 5:
            wait_for(lambda: sink.sent > 0)
            first.stop()  # the dashboard goes away...
        if batches == 12:
            second = start_server(port=port, token=token)  # ...and comes back on the same address
    loader.close()
    assert batches == 30 and second is not None
    run = wait_for(lambda: next((r for r in _runs(second) if r["id"] == sink.run and r["status"] == "done"), None))
    if resend_events is None:  # the new dashboard (it holds nothing) gets the frames the producer still holds
        assert run["batches"] == 30 and run["dropped"] == 0 == sink.unread
    else:
        assert 0 < run["batches"] <= 30  # the rest of the run, with its end (the lost events may hold no yield)...
        # ...and the events the dead dashboard took unread, counted on both sides (none, if it read them all)
        assert run["dropped"] == sink.unread
    with second.client() as http:
        detail = http.get(f"/api/runs/{sink.run}").json()
    assert detail["config"]["num_workers"] == 2  # run_start was sent again to the new dashboard


def test_watch_starts_a_dashboard_when_none_is_given(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("LOADERSCOPE_URL", raising=False)
    monkeypatch.delenv("LOADERSCOPE_TOKEN", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # the per-user state file goes here, not in $HOME
    monkeypatch.setattr(dashboard, "DEFAULT_URL", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setattr(dashboard, "_ours", None)
    loader = loaderscope.watch(DataLoader(Squares(16), batch_size=4))
    started = dashboard._ours
    assert started is not None
    try:
        for _ in loader:
            pass
        loader.close()
        headers = {"Authorization": f"Bearer {started.token}"}
        runs = wait_for(lambda: [r for r in httpx.get(f"{started.url}/api/runs", headers=headers).json()
                                  if r["batches"] == 4])
        assert runs
    finally:
        os.kill(started.pid, signal.SIGTERM)
        wait_for(lambda: not dashboard._running(started.pid), what="the background dashboard to stop")


def test_a_dashboard_that_does_not_confirm_the_end_is_said(monkeypatch: pytest.MonkeyPatch,
                                                          capfd: pytest.CaptureFixture[str]) -> None:
    """A dashboard far behind answers the closing handshake late: the tail may be unread, so say so."""
    import asyncio
    import threading

    from websockets.asyncio.server import serve

    from loaderscope.probe import transport

    monkeypatch.setattr(transport, "CLOSE_CONFIRM", 0.5)
    # a bare websocket server, not a dashboard: it has no proof of the token to give (transport.py)
    monkeypatch.setattr(transport.StreamSink, "_proven", lambda self: None)
    ready, stop = threading.Event(), threading.Event()
    port: list[int] = []

    async def busy(ws: Any) -> None:  # says hello, then never reads: a dashboard stuck behind
        await ws.send('{"run": "r", "next_seq": 1}')
        while not stop.is_set():
            await asyncio.sleep(0.05)

    async def main() -> None:
        async with serve(busy, "127.0.0.1", 0, max_queue=1, compression=None) as server:
            port.append(server.sockets[0].getsockname()[1])
            ready.set()
            while not stop.is_set():
                await asyncio.sleep(0.05)

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    assert ready.wait(10)
    sink = transport.StreamSink(f"http://127.0.0.1:{port[0]}", "some-token-of-sufficient-length")
    try:
        for _ in range(20):
            sink.frame(b"[" + b"0" * 1000 + b"]", 1)
        wait_for(lambda: sink.sent == 20)
        sink.close(timeout=1.0)
    finally:
        stop.set()
        thread.join(5)
    assert sink.unconfirmed
    err = capfd.readouterr().err
    assert "did not confirm" in err and "LOADERSCOPE_LOGDIR" in err
    assert err.count("loaderscope:") == 1


def test_a_dashboard_that_keeps_up_confirms_the_end(server: Any, capfd: pytest.CaptureFixture[str]) -> None:
    loader = loaderscope.watch(DataLoader(Squares(16), batch_size=4, num_workers=0), url=server.page_url)
    with loader:
        assert len(list(loader)) == 4
    sink = loader._probe_transport
    assert sink.sent > 0 and not sink.unconfirmed
    assert "did not confirm" not in capfd.readouterr().err


class Huge(Dataset[torch.Tensor]):
    """Fails on its second batch with a 3 MB message (the repr of a batch, say): past a frame's 2 MiB."""

    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == 5:
            raise ValueError("bad sample: " + "7" * 3_000_000)
        return torch.tensor([index])


@pytest.mark.parametrize("num_workers", [0, 1])
def test_an_error_with_a_huge_message_reaches_the_dashboard_clipped(server: Any, num_workers: int) -> None:
    def raised(loader: Any) -> BaseException:
        with pytest.raises(ValueError) as info:
            list(loader)
        return info.value

    vanilla = raised(DataLoader(Huge(), batch_size=4, num_workers=num_workers))
    loader = loaderscope.watch(DataLoader(Huge(), batch_size=4, num_workers=num_workers), url=server.page_url)
    with loader:
        probed = raised(loader)
    assert str(probed) == str(vanilla)  # training sees torch's whole message: only the event is clipped
    run_id = loader._probe_transport.run
    wait_for(lambda: next((r for r in _runs(server) if r["id"] == run_id and r["status"] == "done"), None))
    with server.client() as http:
        events = http.get(f"/api/runs/{run_id}/events").json()["events"]
    error = next(e for e in events if e["kind"] == "error")
    assert error["type"] == "ValueError" and "bad sample: 777" in error["message"][:40]
    assert "characters left out by loaderscope" in error["message"] and len(error["message"]) < 5_000
    assert "Huge.__getitem__" in error["traceback"] or "__getitem__" in error["traceback"]
    assert len(error["traceback"]) < 70_000

"""``serve --logdir`` on a directory others can write: what is in it never makes the dashboard write
through a link, read outside the logdir, block, leave files behind, or answer 5xx.

Another local user is real: as root (CI), ``setpriv --reuid 4242`` runs the commands of a second
user who can write the team logdir. The traces are a real DataLoader's events
(``tests.server.test_logdir.real_run``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from loaderscope.server.logdir.index import SIDECAR_VERSION
from loaderscope.traces.jsonl import write_trace
from tests.conftest import wait_for
from tests.logdirs import BATCHES, runs, trace_bytes, write
from tests.other_user import REQUEST_LIMIT, as_other_user, needs_root
from tests.server.producers import batches


def named(logdir: Path, spelling: str) -> str:
    """``--logdir`` as the user gives it: a path, or a ``file://`` URL (the same directory, and the same
    defences: through fsspec a file:// logdir followed links)."""
    return f"file://{logdir}" if spelling == "url" else str(logdir)


SPELLINGS = pytest.mark.parametrize("spelling", ["path", "url"], ids=["path", "file-url"])


@needs_root
@SPELLINGS
def test_a_planted_link_at_the_temporary_name_never_gets_a_sidecar_written_through_it(
        start_server: Any, tmp_path: Path, team_logdir: Path, recorded: list[dict[str, Any]], spelling: str) -> None:
    victim = tmp_path / "private.key"
    victim.write_bytes(b"mine alone\n")
    victim.chmod(0o600)
    cache = tmp_path / "cache"
    server = start_server(logdir=named(team_logdir, spelling), logdir_poll=0.1, env={"XDG_CACHE_HOME": str(cache)})
    pid = server.process.pid
    # the other user plants links at the sidecar's name and at a predictable temporary name, then drops a trace
    planted = team_logdir / "evil.trace.jsonl.idx.json"
    as_other_user("ln", "-s", str(victim), str(planted))
    as_other_user("ln", "-s", str(victim), str(team_logdir / f".evil.trace.jsonl.idx.json.{pid}.tmp"))
    as_other_user("sh", "-c", f"cat > {team_logdir / 'evil.trace.jsonl'}", stdin=trace_bytes(tmp_path, recorded))
    listed = wait_for(lambda: runs(server).get("evil.trace.jsonl"), what="the planted trace listed")
    assert listed["status"] == "done" and listed["batches"] == BATCHES
    assert victim.read_bytes() == b"mine alone\n"  # indexed, and nothing written through the link
    mine = server.start_run("uniform", mode="sim", num_workers=2, dataset_size=16)
    server.wait_status(mine["id"])
    wait_for(lambda: len(list((cache / "loaderscope" / "index").glob("*.idx.json"))) == 2,
             what="both sidecars kept in the user's own cache")
    assert victim.read_bytes() == b"mine alone\n"
    assert list(team_logdir.glob("*.idx.json")) == [planted], "no sidecar in a directory others can write"
    assert planted.is_symlink()
    assert oct((cache / "loaderscope" / "index").stat().st_mode & 0o777) == "0o700"
    server.stop()
    again = start_server(logdir=named(team_logdir, spelling), env={"XDG_CACHE_HOME": str(cache)})
    assert "2 runs (2 from their index, 0 indexed)" in again.output()  # the cache is read back
    assert victim.read_bytes() == b"mine alone\n"


def inotify_watches(pid: int) -> int:
    """The inotify watches process ``pid`` holds: a line ``inotify wd:`` each in its inotify fds' fdinfo."""
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            if os.readlink(fd) == "anon_inode:inotify":
                info = Path(f"/proc/{pid}/fdinfo/{fd.name}").read_text()
                count += sum(line.startswith("inotify wd:") for line in info.splitlines())
        except OSError:
            continue  # closed meanwhile
    return count


def drop_trace(path: Path, data: bytes) -> None:
    """The other user writes a trace at ``path``, making its directories."""
    as_other_user("sh", "-c", f"mkdir -p {path.parent} && cat > {path}", stdin=data)


@needs_root
@pytest.mark.slow
def test_another_users_empty_directories_take_no_watch_and_past_the_cap_it_polls(
        start_server: Any, tmp_path: Path, team_logdir: Path, recorded: list[dict[str, Any]]) -> None:
    data = trace_bytes(tmp_path, recorded)
    as_other_user("bash", "-c", f"mkdir -p {team_logdir}/empty/{{0..1999}}/deeper")  # 4,001 directories, no trace
    for job in range(6):
        drop_trace(team_logdir / "jobs" / f"j{job}" / "deep" / "r0.trace.jsonl", data)
    holding = 1 + 1 + 6 + 6  # the root, jobs/, jobs/jN/ and jobs/jN/deep/: a trace in or below each
    uncapped = start_server(logdir=str(team_logdir), logdir_poll=0.1)
    capped = start_server(logdir=str(team_logdir), logdir_poll=0.1, logdir_watches=4)
    for server in (uncapped, capped):
        wait_for(lambda server=server: len(runs(server)) == 6, what="the six traces listed")
    assert inotify_watches(uncapped.process.pid) == holding  # none for the 4,001 empty directories
    assert inotify_watches(capped.process.pid) == 4
    assert "14 directories hold traces, more than the 4 inotify watches it may take" in capped.output()
    assert "4 are watched, the other 10 polled every 0.1 s" in capped.output()
    # a trace that appears later in a deep directory beyond the cap (polled), and in a new deep one
    drop_trace(team_logdir / "jobs" / "j5" / "deep" / "later.trace.jsonl", data)
    drop_trace(team_logdir / "new" / "a" / "b" / "c" / "x.trace.jsonl", data)
    for server in (uncapped, capped):
        listed = wait_for(lambda server=server: len(runs(server)) == 8 and runs(server), what="both later traces")
        assert listed["jobs/j5/deep/later.trace.jsonl"]["status"] == "done"
        assert listed["new/a/b/c/x.trace.jsonl"]["status"] == "done"
    assert inotify_watches(uncapped.process.pid) == holding + 4 and inotify_watches(capped.process.pid) == 4
    assert "Traceback" not in uncapped.output() + capped.output()


@needs_root
def test_a_trace_whose_last_line_says_seq_0_is_counted_and_a_sweep_refused_unread(
        start_server: Any, tmp_path: Path, team_logdir: Path) -> None:
    events = [{**e, "seq": n} for n, e in enumerate(batches(12_000))]  # 60,002 events
    events.append({"kind": "run_end", "t": 13.0, "reason": "done", "seq": 0})  # the last line lies
    data = write_trace(tmp_path / "made.trace.jsonl", events, run="liar").read_bytes()
    server = start_server(logdir=str(team_logdir), env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    drop_trace(team_logdir / "liar.trace.jsonl", data)
    with server.client() as http:
        run = wait_for(lambda: next((r for r in http.get("/api/runs").json() if r.get("path") == "liar.trace.jsonl"),
                                    None), what="the other user's trace listed")
        assert run["events"] == 60_003 and run["last_event_age"] is None  # counted, not read
        answer = http.post(f"/api/runs/{run['id']}/sweeps", json={"grid": {"num_workers": list(range(36))}})
        assert answer.status_code == 413 and "60,003 events" in answer.json()["detail"], answer.text
        again = next(r for r in http.get("/api/runs").json() if r["id"] == run["id"])
    assert again["last_event_age"] is None, "the file was read to refuse a sweep its index rules out"


def test_sidecars_are_written_under_random_names_that_never_follow_a_link(tmp_path: Path) -> None:
    from loaderscope.server.logdir.storage import LocalStorage

    logdir = tmp_path / "logs"
    logdir.mkdir()
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    for pid in range(os.getpid() - 5, os.getpid() + 5):
        (logdir / f".a.trace.jsonl.idx.json.{pid}.tmp").symlink_to(victim)
    (logdir / "a.trace.jsonl.idx.json").symlink_to(victim)  # even the final name: replaced, not followed
    LocalStorage(str(logdir)).write_atomic(str(logdir / "a.trace.jsonl.idx.json"), b"{}")
    assert victim.read_bytes() == b"keep"
    assert (logdir / "a.trace.jsonl.idx.json").read_bytes() == b"{}"
    assert not (logdir / "a.trace.jsonl.idx.json").is_symlink()


def test_a_sidecar_is_never_written_through_a_directory_swapped_for_a_link(tmp_path: Path) -> None:
    from loaderscope.server.logdir.storage import LocalStorage

    logdir, private = tmp_path / "logs", tmp_path / "private"
    (logdir / "job" / "sub").mkdir(parents=True)
    (private / "sub").mkdir(parents=True)
    storage = LocalStorage(str(logdir))
    (logdir / "job").rename(logdir / "was")  # someone who can write the logdir swaps job/ for a link out
    (logdir / "job").symlink_to(private)
    with pytest.raises(OSError, match="outside the logdir"):
        storage.write_atomic(str(logdir / "job" / "sub" / "r.trace.jsonl.idx.json"), b"{}")
    assert list(private.rglob("*")) == [private / "sub"]


@SPELLINGS
def test_a_file_that_resolves_outside_the_logdir_is_refused_everywhere(
        start_server: Any, tmp_path: Path, recorded: list[dict[str, Any]], spelling: str) -> None:
    outside = write(tmp_path / "elsewhere" / "secret.trace.jsonl", recorded)
    logdir = tmp_path / "logs"
    (logdir / "sub").mkdir(parents=True)
    (logdir / "out.trace.jsonl").symlink_to(outside)
    write(logdir / "sub" / "real.trace.jsonl", recorded)
    (logdir / "inside.trace.jsonl").symlink_to(logdir / "sub" / "real.trace.jsonl")  # a link within: fine
    server = start_server(logdir=named(logdir, spelling), logdir_poll=0.1)
    listed = runs(server)
    out = listed["out.trace.jsonl"]
    assert out["status"] == "unreadable" and "outside the logdir" in out["problem"]
    assert listed["inside.trace.jsonl"]["status"] == "done"
    with server.client() as http:
        detail = http.get(f"/api/runs/{out['id']}").json()
        events = http.get(f"/api/runs/{out['id']}/events").json()
        jsonl = http.get(f"/api/runs/{out['id']}/trace")
        chrome = http.get(f"/api/runs/{out['id']}/trace", params={"format": "chrome"})
    assert detail["status"] == "unreadable" and detail["config"] == {}
    assert events["events"] == [] and events["status"] == "unreadable"
    for answer in (jsonl, chrome):
        assert answer.status_code == 410 and b"run_start" not in answer.content
    with server.connect(f"/ws/runs/{out['id']}?after=-1") as ws:
        hello = orjson.loads(ws.recv(timeout=10))
        assert hello["type"] == "hello" and hello["last_seq"] == -1
    # a file that was readable and is then replaced by a link out is refused from then on
    real = logdir / "sub" / "real.trace.jsonl"
    real.unlink()
    real.symlink_to(outside)
    run_id = listed["sub/real.trace.jsonl"]["id"]
    with server.client() as http:
        answer = http.get(f"/api/runs/{run_id}/trace")
    assert answer.status_code == 410 and "outside the logdir" in answer.json()["detail"]
    assert server.alive()


@needs_root
@SPELLINGS
def test_a_trace_another_user_swaps_for_a_link_to_a_private_file_is_never_served(
        start_server: Any, tmp_path: Path, team_logdir: Path, recorded: list[dict[str, Any]], spelling: str) -> None:
    private = tmp_path / "id_ed25519"
    private.write_bytes(b"PRIVATE KEY " * 4096)
    private.chmod(0o600)
    server = start_server(logdir=named(team_logdir, spelling), logdir_poll=0.1,
                          env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    trace = team_logdir / "shared.trace.jsonl"
    as_other_user("sh", "-c", f"cat > {trace}", stdin=trace_bytes(tmp_path, recorded))
    listed = wait_for(lambda: runs(server).get("shared.trace.jsonl"), what="the other user's trace listed")
    with server.client() as http:
        assert http.get(f"/api/runs/{listed['id']}/trace").status_code == 200  # read whole: its run holds it
        as_other_user("ln", "-sfn", str(private), str(trace))  # the other user swaps it for a link
        jsonl = http.get(f"/api/runs/{listed['id']}/trace")
        chrome = http.get(f"/api/runs/{listed['id']}/trace", params={"format": "chrome"})
        events = http.get(f"/api/runs/{listed['id']}/events", params={"after": 10})
    assert jsonl.status_code == 410 and "outside the logdir" in jsonl.json()["detail"], jsonl.text[:200]
    for answer in (jsonl, chrome, events):
        assert b"PRIVATE" not in answer.content
    assert server.alive()


def test_dangling_and_looping_links_answer_with_a_reason_never_a_cut_response(
        start_server: Any, tmp_path: Path, recorded: list[dict[str, Any]]) -> None:
    logdir = tmp_path / "logs"
    path = write(logdir / "was.trace.jsonl", recorded)
    server = start_server(logdir=str(logdir), logdir_poll=0.1)
    was = runs(server)["was.trace.jsonl"]
    assert server.run(was["id"])  # read once: the run holds the file's events
    for target in (tmp_path / "deleted.trace.jsonl", path):  # dangling, then a link to itself (a loop)
        path.unlink()
        path.symlink_to(target)
        with server.client() as http:
            answer = http.get(f"/api/runs/{was['id']}/trace")
            chrome = http.get(f"/api/runs/{was['id']}/trace", params={"format": "chrome"})
        assert answer.status_code == 410 and "cannot be read" in answer.json()["detail"], answer.text
        assert chrome.status_code == 410
    (logdir / "loop.trace.jsonl").symlink_to(logdir / "loop.trace.jsonl")
    looping = wait_for(lambda: runs(server).get("loop.trace.jsonl"), what="the looping link listed")
    assert looping["status"] == "unreadable" and "symbolic links" in looping["problem"]
    with server.client() as http:
        assert http.get(f"/api/runs/{looping['id']}/trace").status_code == 410
    assert server.alive()


@pytest.mark.parametrize("watch", [True, False], ids=["inotify", "polling"])
def test_fifos_are_refused_with_the_reason_and_never_block_the_scan_or_a_read(
        start_server: Any, tmp_path: Path, recorded: list[dict[str, Any]], watch: bool) -> None:
    logdir = tmp_path / "logs"
    logdir.mkdir()
    os.mkfifo(logdir / "pipe.trace.jsonl")  # present at start: the dashboard must still start
    server = start_server(logdir=str(logdir), logdir_poll=0.1, logdir_watch=watch)
    pipe = runs(server)["pipe.trace.jsonl"]
    assert pipe["status"] == "unreadable" and "FIFO" in pipe["problem"]
    with server.client() as http:  # at once: an unreadable run has nothing to wait for
        assert http.get(f"/api/runs/{pipe['id']}").json()["status"] == "unreadable"
        assert http.get(f"/api/runs/{pipe['id']}/events").json()["events"] == []
    os.mkfifo(logdir / "later.trace.jsonl")  # appearing later: new traces are still listed after it
    write(logdir / "after.trace.jsonl", recorded)
    listed = wait_for(lambda: {"later.trace.jsonl", "after.trace.jsonl"} <= set(runs(server)) and runs(server),
                      what="the later FIFO and the trace after it listed")
    assert listed["later.trace.jsonl"]["status"] == "unreadable"
    assert listed["after.trace.jsonl"]["status"] == "done"
    server.process.terminate()  # SIGTERM ends it
    assert server.process.wait(timeout=REQUEST_LIMIT) is not None


def test_a_sidecar_that_does_not_validate_is_treated_as_absent(
        start_server: Any, tmp_path: Path, recorded: list[dict[str, Any]]) -> None:
    logdir = tmp_path / "logs"
    bad = {"many": {"events": "many"}, "negative": {"events": -5}, "list": {"job": ["a"]}}
    for name, fields in bad.items():
        path = write(logdir / f"{name}.trace.jsonl", recorded)
        info = path.stat()
        index = {"size": info.st_size, "mtime_ns": info.st_mtime_ns, **fields}
        (logdir / f"{name}.trace.jsonl.idx.json").write_bytes(
            orjson.dumps({"format": "loaderscope-index", "version": SIDECAR_VERSION, "index": index}))
    (logdir / "zz.trace.jsonl.idx.json").write_bytes(b"[1, 2")
    server = start_server(logdir=str(logdir))
    assert "3 runs (0 from their index, 3 indexed)" in server.output()
    with server.client() as http:
        answer = http.get("/api/runs")
    assert answer.status_code == 200
    listed = {r["path"]: r for r in answer.json() if r["origin"] == "logdir"}
    for name in bad:
        assert (listed[f"{name}.trace.jsonl"]["events"], listed[f"{name}.trace.jsonl"]["batches"]) == (
            len(recorded), BATCHES)


def test_producers_that_send_nothing_leave_no_file_in_the_logdir(
        start_server: Any, tmp_path: Path, recorded: list[dict[str, Any]]) -> None:
    logdir = tmp_path / "logs"
    logdir.mkdir()
    server = start_server(logdir=str(logdir))
    for _ in range(5):
        with server.connect("/ws/ingest") as ws:
            assert orjson.loads(ws.recv(timeout=10))["type"] == "hello"
    with server.connect("/ws/ingest") as ws:
        run = orjson.loads(ws.recv(timeout=10))["run"]
        ws.send(orjson.dumps(recorded[:1]))
    wait_for(lambda: (logdir / f"{run}.trace.jsonl").exists(), what="the file of the run that sent an event")
    server.stop()
    assert [p.name for p in logdir.glob("*.trace.jsonl")] == [f"{run}.trace.jsonl"]

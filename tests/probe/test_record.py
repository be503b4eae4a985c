"""``loaderscope record -- COMMAND`` and ``$LOADERSCOPE_LOGDIR``: real commands, real DataLoader workers,
a script that never imports loaderscope; its traces read back from the logdir."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from loaderscope.model import conformance
from loaderscope.traces.jsonl import TraceError, read_trace, read_trace_tolerant
from tests.conftest import wait_for
from tests.recording import (
    DISTRIBUTED,
    FILE_NAME,
    JOB_NAME,
    NO_TORCH,
    PYTHON,
    TORCHRUN,
    TRAIN,
    consumed,
    environment,
    kill_recorded,
    only_trace,
    pin_warns,
    record,
    record_argv,
    script,
    torch_accelerator,
    traces,
    yields,
)


@pytest.mark.parametrize("workers", [0, 2])
def test_record_writes_a_conformant_trace_of_a_script_that_never_imports_loaderscope(
        tmp_path: Path, workers: int) -> None:
    done = record(tmp_path, PYTHON, script(tmp_path), f"workers={workers}")
    assert done.returncode == 0, done.stderr
    path, head, events = only_trace(tmp_path / "runs")
    assert yields(events) == consumed(done.stdout)[0] == 24  # two epochs of 12 batches
    assert [e["epoch"] for e in events if e["kind"] == "epoch_end"] == [0, 1]
    assert events[-1]["kind"] == "run_end" and events[-1]["reason"] == "done"
    assert events[0]["config"]["num_workers"] == workers
    name = FILE_NAME.fullmatch(path.name)
    assert name and name["loader"] == "DataLoader" and name["rank"] == "0" and name["run"] == head["run"]
    assert path.parent.parent == tmp_path / "runs" and JOB_NAME.fullmatch(path.parent.name)["command"] == "train"
    assert head["job"] == events[0]["job"] == path.parent.name
    assert head["name"] == events[0]["name"] == name["name"] == "loader"  # `loader = DataLoader(...)` in main()
    assert f"1 new trace in runs/{path.parent.name}" in done.stderr
    assert "open them with: loaderscope serve --logdir runs" in done.stderr
    assert "loaderscope" not in done.stdout  # the command's own output is its own


def test_the_commands_exit_status_is_records(tmp_path: Path) -> None:
    done = record(tmp_path, PYTHON, script(tmp_path), "then=exit3")
    assert done.returncode == 3, done.stderr
    _, _, events = only_trace(tmp_path / "runs")
    assert yields(events) == consumed(done.stdout)[0]
    end = events[-1]  # the loop ended, then the script exited 3: the run ends with that status, not `done`
    assert end["kind"] == "run_end" and end["reason"] == "error" and end["exitcode"] == 3
    assert end["error"] == {"type": "SystemExit", "message": "exit status 3"}


def test_a_script_that_dies_of_an_exception_ends_its_run_with_error(tmp_path: Path) -> None:
    done = record(tmp_path, PYTHON, script(tmp_path), "workers=2", "then=raise")
    assert done.returncode == 1 and "ValueError: bad batch" in done.stderr
    _, _, events = only_trace(tmp_path / "runs")
    assert yields(events) == 5
    end = events[-1]
    assert end["kind"] == "run_end" and end["reason"] == "error" and end["exitcode"] == 1
    assert end["error"] == {"type": "ValueError", "message": "bad batch"}


def as_from_a_terminal() -> None:
    """SIGINT and SIGQUIT at their defaults, as a terminal's shell starts a command. The suite may run with
    them ignored (a background job of a non-interactive shell), which record and its command would
    inherit and keep, as a shell's command does: a forwarded Ctrl-C would then stop nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def started(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[str], Callable[[], Path]]:
    """record running an endless slow script; and a wait for its trace to show a few batches."""
    process = subprocess.Popen(record_argv(tmp_path / "runs", PYTHON, script(tmp_path), "epochs=100000",
                                           "slow=0.02", *args),
                               cwd=tmp_path, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, preexec_fn=as_from_a_terminal, start_new_session=True)  # kill_recorded

    def trace_with_batches() -> Path:
        def ready() -> Path | None:
            assert process.poll() is None, process.communicate()
            for path in traces(tmp_path / "runs"):
                # a file whose header line is not written yet is a trace still being opened
                if b"\n" in path.read_bytes() and yields(read_trace_tolerant(path)[1]) >= 3:
                    return path
            return None

        return wait_for(ready, timeout=60, what="a trace with three batches")

    return process, trace_with_batches


@pytest.mark.parametrize("workers", [0, 2])
def test_ctrl_c_reaches_the_command_and_record_exits_as_a_shell_reports_it(tmp_path: Path, workers: int) -> None:
    process, trace_with_batches = started(tmp_path, f"workers={workers}")
    path = trace_with_batches()
    process.send_signal(signal.SIGINT)  # to record alone: it forwards it
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "KeyboardInterrupt" in err
    _, events, truncated = read_trace_tolerant(path)
    assert conformance.check(events) == []
    assert truncated or events[-1]["reason"] == "stopped"
    assert yields(events) == int(re.findall(r"consumed (\d+)", out)[-1])


def test_a_killed_process_leaves_a_readable_truncated_trace(tmp_path: Path) -> None:
    process, trace_with_batches = started(tmp_path, "workers=2")
    path = trace_with_batches()
    err = kill_recorded(process, int(FILE_NAME.fullmatch(path.name)["pid"]))  # type: ignore[index]
    assert process.returncode == 128 + signal.SIGKILL, err
    head, events, truncated = read_trace_tolerant(path)
    assert truncated and head["run"] == events[0]["run"]
    assert yields(events) >= 3 and conformance.check(events) == []


def run_ids(output: str) -> set[str]:
    return set(re.findall(r"run id (\S+)", output))


def test_torchrun_ranks_write_one_trace_each_under_one_job(tmp_path: Path) -> None:
    done = record(tmp_path, TORCHRUN, "--nproc-per-node", "2", "--standalone", script(tmp_path, DISTRIBUTED),
                  timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    found = traces(tmp_path / "runs")
    assert len(found) == 2 and found[0].parent == found[1].parent, found
    by_rank = {}
    for path in found:
        head, events = read_trace(path)
        assert conformance.check(events) == []
        assert head["world_size"] == 2 and head["job"] == path.parent.name
        by_rank[head["rank"]] = yields(events)
    assert by_rank == {0: 8, 1: 8}
    assert sorted(consumed(done.stdout)) == [8, 8]
    # the launcher's id names the job (--standalone: a UUID torchrun makes), and record says where it went
    assert run_ids(done.stdout) == {found[0].parent.name}
    assert f"2 new traces in runs/{found[0].parent.name}" in done.stderr


def test_torchrun_ranks_share_one_job_named_by_torchruns_run_id_without_record(tmp_path: Path) -> None:
    """$LOADERSCOPE_LOGDIR alone (no record to name the job): the ranks land in one job folder, named
    by the id torchrun gives the job (what the cluster's other tools know it by)."""
    env = environment() | {"LOADERSCOPE_LOGDIR": str(tmp_path / "runs")}
    done = subprocess.run([TORCHRUN, "--nproc-per-node", "2", "--standalone", script(tmp_path, DISTRIBUTED)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    found = traces(tmp_path / "runs")
    assert len(found) == 2 and found[0].parent == found[1].parent, found
    assert run_ids(done.stdout) == {found[0].parent.name}
    heads = [read_trace(path)[0] for path in found]
    assert {head["job"] for head in heads} == {found[0].parent.name}
    assert {head["name"] for head in heads} == {"loader"} and sorted(head["rank"] for head in heads) == [0, 1]


def free_port() -> int:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        return int(listener.getsockname()[1])


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("how", ["record", "logdir"])
def test_two_torchrun_agents_are_one_job_named_by_their_rendezvous_id(tmp_path: Path, how: str) -> None:
    """A 2-node job, its two torchrun agents on loopback (one rendezvous id): every node's ranks land in
    one job, named by the rendezvous id, whether each node runs under ``record`` or with
    ``$LOADERSCOPE_LOGDIR``; ``loaderscope job`` on the logdir tables it as one job of two ranks."""
    logdir, train = tmp_path / "runs", script(tmp_path, DISTRIBUTED)
    agent = [TORCHRUN, "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
             "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--rdzv-id", "job-4242", "--max-restarts", "0"]
    env = environment() | {"GLOO_SOCKET_IFNAME": "lo"}
    if how == "logdir":
        env |= {"LOADERSCOPE_LOGDIR": str(logdir)}
    nodes = [subprocess.Popen((record_argv(logdir) if how == "record" else []) + [*agent, "--node-rank", str(node),
                                                                                  train],
                              cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for node in (0, 1)]
    outputs = [node.communicate(timeout=360) for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs
    assert sorted(consumed("".join(out for out, _ in outputs))) == [8, 8]
    assert [path.parent.name for path in traces(logdir)] == ["job-4242", "job-4242"]
    assert {read_trace(path)[0]["job"] for path in traces(logdir)} == {"job-4242"}
    table = subprocess.run([PYTHON, "-m", "loaderscope.cli", "job", str(logdir), "--json"], env=environment(),
                           capture_output=True, text=True, timeout=120)
    assert table.returncode == 0, table.stdout + table.stderr
    answer = json.loads(table.stdout)
    assert sorted((row["job"], row["rank"]) for row in answer["ranks"]) == [("job-4242", 0), ("job-4242", 1)]
    assert [(entry["job"], entry["ranks"]) for entry in answer["loaders"]] == [("job-4242", 2)]


@pytest.mark.parametrize(("given", "job"), [
    ({"SLURM_JOB_ID": "81234"}, "81234"),  # a SLURM job's id: the scheduler's, as its other metrics name it
    ({"SLURM_JOB_ID": "81234", "TORCHELASTIC_RUN_ID": "rdzv-7"}, "rdzv-7"),  # torchrun's, under SLURM
    ({"SLURM_JOB_ID": "81234", "LOADERSCOPE_JOB": "mine"}, "mine"),  # the user's, over both
    ({"TORCHELASTIC_RUN_ID": "none"}, None),  # torchrun without --rdzv-id: no id, the command's name
])
def test_the_launchers_id_names_the_job_unless_the_user_names_it(tmp_path: Path, given: dict[str, str],
                                                                 job: str | None) -> None:
    done = subprocess.run(record_argv(tmp_path / "runs", PYTHON, script(tmp_path), "epochs=1"), cwd=tmp_path,
                          env=environment() | given, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    path, head, _ = only_trace(tmp_path / "runs")
    assert head["job"] == path.parent.name
    if job is None:
        assert JOB_NAME.fullmatch(head["job"])["command"] == "train"
    else:
        assert head["job"] == job


def test_record_job_names_the_job_over_the_launchers(tmp_path: Path) -> None:
    done = subprocess.run([PYTHON, "-m", "loaderscope.record", "--logdir", str(tmp_path / "runs"),
                           "--job", "team-run-3",
                           "--", PYTHON, script(tmp_path), "epochs=1"], cwd=tmp_path,
                          env=environment() | {"SLURM_JOB_ID": "81234"}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    path, head, _ = only_trace(tmp_path / "runs")
    assert head["job"] == path.parent.name == "team-run-3"


def test_a_wrapper_script_names_the_job_by_the_program_it_runs(tmp_path: Path) -> None:
    wrapper = tmp_path / "launch.sh"
    wrapper.write_text(f"exec {PYTHON} {script(tmp_path)} \"$@\"\n")
    done = record(tmp_path, "bash", str(wrapper), "workers=0")
    assert done.returncode == 0, done.stderr
    path, head, _ = only_trace(tmp_path / "runs")
    assert JOB_NAME.fullmatch(path.parent.name)["command"] == "launch" and head["job"] == path.parent.name


def test_a_python_dash_c_program_names_the_job_by_python_whatever_its_text(tmp_path: Path) -> None:
    # the program's text is no file name: a long one (ENAMETOOLONG) once ended record in a traceback
    program = "import torch\n" + "# " + "x" * 5000 + "\n" + TRAIN.split("if __name__", 1)[0] + "main(workers=0)\n"
    done = record(tmp_path, PYTHON, "-c", program)
    assert done.returncode == 0, done.stderr
    path, head, _ = only_trace(tmp_path / "runs")
    assert JOB_NAME.fullmatch(path.parent.name)["command"] == Path(PYTHON).name


def test_python_dash_m_and_spawned_workers(tmp_path: Path) -> None:
    # a module, not a package's __main__.py: spawn cannot re-import a package's __main__ (multiprocessing's
    # _fixup_main_from_name skips it), with or without record
    script(tmp_path, name="trainer.py")
    done = record(tmp_path, PYTHON, "-m", "trainer", "workers=2", "context=spawn")
    assert done.returncode == 0, done.stderr
    path, head, events = only_trace(tmp_path / "runs")
    assert head["name"] == "loader" and JOB_NAME.fullmatch(path.parent.name)["command"] == "trainer"
    assert events[0]["config"]["multiprocessing_context"] == "spawn"
    assert len(traces(tmp_path / "runs")) == 1  # the spawned workers watched no loader of their own
    assert yields(events) == consumed(done.stdout)[0] == 24


def test_a_command_that_never_imports_torch_does_not_import_it_under_record(tmp_path: Path) -> None:
    done = record(tmp_path, PYTHON, "-c", NO_TORCH)
    assert done.returncode == 0 and "torch imported: False" in done.stdout
    assert traces(tmp_path / "runs") == [] and "no DataLoader was iterated" in done.stderr


def test_a_missing_command_is_named_with_the_shells_status(tmp_path: Path) -> None:
    done = record(tmp_path, "no-such-command-here")
    assert done.returncode == 127 and "no-such-command-here: command not found" in done.stderr


def test_the_environment_alone_records_a_plain_python_command(tmp_path: Path) -> None:
    """The launchers record cannot wrap (a SLURM batch line, a notebook kernel): LOADERSCOPE_LOGDIR=DIR."""
    env = environment() | {"LOADERSCOPE_LOGDIR": str(tmp_path / "runs")}
    done = subprocess.run([PYTHON, script(tmp_path), "workers=2"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    path, head, events = only_trace(tmp_path / "runs")
    assert path.parent.parent == tmp_path / "runs" and head["job"] == path.parent.name
    assert JOB_NAME.fullmatch(head["job"])["command"] == "train"  # the rule record follows: one for both
    assert yields(events) == consumed(done.stdout)[0] == 24


def test_an_unwritable_logdir_is_said_once_and_training_goes_on(tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    env = environment() | {"LOADERSCOPE_LOGDIR": str(blocked / "runs")}
    done = subprocess.run([PYTHON, script(tmp_path), "workers=2"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and consumed(done.stdout) == [24]
    assert done.stderr.count("loaderscope: cannot write the trace") == 1, done.stderr


def test_the_tolerant_reader_takes_a_torn_last_line_but_not_damage_before_it(tmp_path: Path) -> None:
    done = record(tmp_path, PYTHON, script(tmp_path))
    path, _, events = only_trace(tmp_path / "runs")
    lines = path.read_bytes().splitlines(keepends=True)
    assert read_trace_tolerant(path)[2] is False
    path.write_bytes(b"".join(lines[:-3]) + lines[-3][:20])
    head, kept, truncated = read_trace_tolerant(path)
    assert truncated and kept == events[:-3]
    path.write_bytes(b"".join(lines[:5]) + b"{not json\n" + b"".join(lines[5:]))
    with pytest.raises(TraceError, match="line 6"):
        read_trace_tolerant(path)
    assert done.returncode == 0


def test_a_subclass_that_never_calls_dataloaders_init_is_recorded_too(tmp_path: Path) -> None:
    stateful = ("from torchdata.stateful_dataloader import StatefulDataLoader\n"
                "loader = StatefulDataLoader(list(range(40)), batch_size=4, num_workers=2)\n"
                "print('consumed', sum(1 for _ in loader), 'in all', flush=True)\n")
    done = record(tmp_path, PYTHON, script(tmp_path, stateful, name="stateful.py"))
    assert done.returncode == 0, done.stderr
    path, _, events = only_trace(tmp_path / "runs")
    assert path.name.startswith("loader-StatefulDataLoader-rank0-")
    assert yields(events) == consumed(done.stdout)[0] == 10


def test_a_scripts_own_watch_still_gets_its_events_under_record(tmp_path: Path) -> None:
    own = ("import loaderscope, torch\n"
           "from torch.utils.data import DataLoader\n"
           "events = []\n"
           "loader = loaderscope.watch(DataLoader(list(range(40)), batch_size=4), sink=events.extend)\n"
           "print('consumed', sum(1 for _ in loader), 'in all', flush=True)\n"
           "loader.close()\n"
           "print('own sink yields', sum(e['kind'] == 'yield' for e in events), flush=True)\n")
    done = record(tmp_path, PYTHON, script(tmp_path, own, name="own.py"))
    assert done.returncode == 0, done.stderr
    assert "own sink yields 10" in done.stdout
    _, _, events = only_trace(tmp_path / "runs")
    assert yields(events) == 10


# torch warns with stacklevel=2 from an iterator's __init__ when pin_memory finds no accelerator
WARNS = '''
import sys, warnings
from torch.utils.data import DataLoader

def pinned():
    return DataLoader(list(range(8)), batch_size=4, pin_memory=True, num_workers=int(sys.argv[2]))

if sys.argv[1] == "origins":
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        consumed = sum(1 for _ in pinned())
    print("origins", sorted({(w.filename.rsplit("/", 1)[-1], w.category.__name__) for w in caught}))
else:
    print("consumed", sum(1 for _ in pinned()), "in all")
'''


def both(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """The command vanilla, then recorded."""
    command = [PYTHON, *args]
    vanilla = subprocess.run(command, cwd=tmp_path, env=environment(), capture_output=True, text=True, timeout=120)
    return vanilla, record(tmp_path, *command)


@pytest.mark.skipif(torch_accelerator() or not pin_warns(), reason="pin_memory warns only without an accelerator")
@pytest.mark.parametrize("workers", [0, 2])
def test_torchs_warnings_keep_their_origin_under_record(tmp_path: Path, workers: int) -> None:
    vanilla, recorded = both(tmp_path, script(tmp_path, WARNS, name="warns.py"), "origins", str(workers))
    assert recorded.returncode == vanilla.returncode == 0, recorded.stderr
    line = next(line for line in vanilla.stdout.splitlines() if line.startswith("origins"))
    assert line == "origins [('dataloader.py', 'UserWarning')]"
    assert line in recorded.stdout.splitlines()


@pytest.mark.skipif(torch_accelerator() or not pin_warns(), reason="pin_memory warns only without an accelerator")
@pytest.mark.slow
def test_warning_filters_on_torchs_module_work_as_without_record(tmp_path: Path) -> None:
    path = script(tmp_path, WARNS, name="warns.py")
    vanilla, recorded = both(tmp_path, "-W", "error::UserWarning:torch.utils.data.dataloader", path, "run", "0")
    assert vanilla.returncode == recorded.returncode == 1
    for done in (vanilla, recorded):
        frames = re.findall(r'File "([^"]+)"', done.stderr)
        assert frames[-1].endswith("torch/utils/data/dataloader.py") and "pin_memory" in done.stderr
        assert frames[0].endswith("warns.py"), done.stderr
    vanilla, recorded = both(tmp_path, "-W", "ignore::UserWarning:torch.utils.data.dataloader", path, "run", "0")
    assert vanilla.returncode == recorded.returncode == 0
    assert consumed(vanilla.stdout) == consumed(recorded.stdout) == [2]
    assert "pin_memory" not in vanilla.stderr + recorded.stderr

"""◆ ``loaderscope record -- COMMAND``: run a training command with every DataLoader it builds watched.

Nothing wraps the command: it runs as our child in the same process group, with the same stdin,
stdout, stderr and working directory, and an environment that differs only in ``LOADERSCOPE_*``
variables. Those make each Python process of the command (torchrun's ranks, spawned workers
included) watch its DataLoaders (``autowatch.py``, started by ``loaderscope_auto.pth``) and write
each run to ``LOGDIR/<job>/`` (``probe/logfile.py``). The parent only waits: it forwards the signals
sent to it, exits with the command's status (128+N for a death by signal N, as a shell reports it),
and then says where the traces are and the one command that opens them.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shlex
import signal
import site
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from loaderscope.traces.formats import FORMAT_ENV, FORMATS, SUFFIXES
from loaderscope.traces.paths import JOB_ENV, RECORD_JOB_ENV, job_name

DEFAULT_LOGDIR = "loaderscope-runs"
STARTUP_HOOK = "loaderscope_auto.pth"
# Signals a user or a scheduler sends to stop a job; the command gets them as it would without us.
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
# si_code of a signal the kernel raised: a terminal's Ctrl-C or Ctrl-\\ reaches the whole foreground
# process group, the command included, so forwarding it would deliver it twice.
SI_KERNEL = 0x80


class RecordError(Exception):
    """A reason the command cannot be recorded, with the fix; printed as one line, exit status 2."""


def add_record_command(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``loaderscope record`` for the ``loaderscope`` command's sub-parsers (``args.func(args)`` runs it)."""
    parser = subparsers.add_parser(
        "record", help="run a training command with every DataLoader watched, traces written to a logdir",
        description="Run COMMAND with every torch DataLoader it builds watched, without editing it. Each "
                    "loader run is written to LOGDIR/<job>/ as a trace; `loaderscope serve --logdir LOGDIR` "
                    "shows them. Example: loaderscope record -- torchrun --nproc-per-node 2 train.py")
    configure(parser)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--logdir", default=None,
                        help=f"where traces go (default: $LOADERSCOPE_LOGDIR, else ./{DEFAULT_LOGDIR})")
    parser.add_argument("--format", default=None, choices=FORMATS, dest="trace_format",
                        help="trace format: jsonl (JSON lines) or parquet (columnar, needs loaderscope[columnar]; "
                             "default: $LOADERSCOPE_FORMAT, else jsonl)")
    parser.add_argument("--url", default=None,
                        help="also stream live to this dashboard (http://host:port/?token=...)")
    parser.add_argument("--name", default=None,
                        help="the job's and every run's name (default: the job is named by the script or module, "
                             "each loader by the variable or function that built it)")
    parser.add_argument("--job", default=None,
                        help="the job's id, the same on every node (default: $LOADERSCOPE_JOB, else the launcher's: "
                             "torchrun's --rdzv-id or $SLURM_JOB_ID, else a name of the command and its start)")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS...]")
    parser.set_defaults(func=cmd_record)


def cmd_record(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    try:
        if not command:
            raise RecordError("give the command to record after --, e.g. loaderscope record -- python train.py")
        return record(command, logdir=args.logdir, url=args.url, name=args.name, job=args.job,
                      trace_format=args.trace_format)
    except RecordError as exc:
        print(f"loaderscope record: {exc}", file=sys.stderr, flush=True)
        return 2


def record(command: list[str], *, logdir: str | None = None, url: str | None = None,
           name: str | None = None, job: str | None = None, trace_format: str | None = None) -> int:
    """Run ``command`` recorded; its exit status. Raises RecordError when it cannot be recorded."""
    from loaderscope.traces.jsonl import chosen_format  # here: every other command starts without the schema

    check_startup_hook()
    try:
        fmt = chosen_format(trace_format)
    except ValueError as exc:
        raise RecordError(str(exc)) from None
    root = Path(logdir or os.environ.get("LOADERSCOPE_LOGDIR") or DEFAULT_LOGDIR).resolve()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RecordError(f"cannot create {root} ({exc.strerror or exc}): pass a writable --logdir") from None
    # The job is named where the ranks run (paths.this_job): a launcher's id is only in their
    # environment (torchrun sets it in each worker's), and it is what every node's ranks share. This
    # process names it only when told to (--job), and offers a name for a command no launcher names.
    env = {**os.environ, "LOADERSCOPE_RECORD": "1", "LOADERSCOPE_LOGDIR": str(root), FORMAT_ENV: fmt,
           RECORD_JOB_ENV: job_name(name or command_name(command), time.time(), secrets.token_hex(8))}
    if job:
        env[JOB_ENV] = job
    if name:  # every run named so; without it each loader is named from the code that built it
        env["LOADERSCOPE_NAME"] = name
    if url:
        env["LOADERSCOPE_URL"] = url
    say(f"recording the DataLoaders of `{shlex.join(command)}` into {shown(root)}")
    before = traces_in(root, SUFFIXES[fmt])
    status = run_forwarding_signals(command, env)
    written = sorted(set(traces_in(root, SUFFIXES[fmt])) - set(before))
    for directory in sorted({path.parent for path in written}):
        count = sum(1 for path in written if path.parent == directory)
        say(f"{count} new trace{'s' if count != 1 else ''} in {shown(directory)}")
    if written:
        say(f"open them with: loaderscope serve --logdir {shlex.quote(shown(root))}")
    else:
        say("no DataLoader was iterated, so there is no trace. If the command iterates one, check that it "
            f"runs the Python loaderscope is installed in ({sys.executable})")
    return status


def traces_in(root: Path, suffix: str) -> list[Path]:
    """The traces in ``root``'s job directories (``LOGDIR/<job>/NAME<suffix>``), by name: a record
    says which appeared while its command ran (on a shared logdir, another job's may be among them)."""
    try:
        return [path for job in root.iterdir() if job.is_dir() and not job.is_symlink()
                for path in job.glob(f"*{suffix}")]
    except OSError:
        return []


def check_startup_hook() -> None:
    """The command's Python processes watch their loaders through loaderscope_auto.pth: it must be there."""
    places = [*site.getsitepackages(), site.getusersitepackages()]
    if not any((Path(place) / STARTUP_HOOK).is_file() for place in places):
        raise RecordError(f"{STARTUP_HOOK} is missing from site-packages ({', '.join(places)}), so the command's "
                          "DataLoaders cannot be watched: reinstall loaderscope (pip install --force-reinstall "
                          "loaderscope, or pip install -e . in a checkout)")


def command_name(command: Sequence[str]) -> str:
    """What the job is called: the script's stem (``train.py`` → ``train``), the ``-m`` module, the
    script a wrapper runs (``bash train.sh`` → ``train``), else the program's name. torchrun's and
    python's own options are skipped that way."""
    code = {position + 1 for position, word in enumerate(command) if word == "-c"}  # a program's text, no name
    for position, word in enumerate(command):
        if word == "-m" and position + 1 < len(command):
            return command[position + 1]
        if word.endswith(".py") and position not in code:
            return Path(word).stem
    script = next((word for position, word in enumerate(command) if position and position not in code
                   and not word.startswith("-") and _is_file(word)), None)
    return Path(script).stem if script else Path(command[0]).name


def _is_file(word: str) -> bool:
    try:
        return Path(word).is_file()
    except OSError:  # a word too long to be a file name (ENAMETOOLONG)
        return False


def run_forwarding_signals(command: list[str], env: dict[str, str]) -> int:
    """Run ``command`` to its end, forwarding the signals sent to us; its status as a shell reports it."""
    waited = {*FORWARDED, signal.SIGCHLD}
    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, waited)  # nothing may arrive unwaited for
    try:
        try:
            # setsigmask=(): the command starts with no signal blocked, whatever we block to wait.
            pid = os.posix_spawnp(command[0], command, env, setsigmask=())
        except FileNotFoundError:
            say(f"{command[0]}: command not found")
            return 127
        except PermissionError:
            say(f"{command[0]}: permission denied")
            return 126
        return _wait(pid, waited)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)


def _wait(pid: int, waited: set[signal.Signals]) -> int:
    while True:
        # The timeout only guards against a missed SIGCHLD; waitpid below is what ends the loop.
        info = signal.sigtimedwait(waited, 1.0)
        if info is not None and info.si_signo != signal.SIGCHLD and info.si_code != SI_KERNEL:
            try:
                os.kill(pid, info.si_signo)
            except ProcessLookupError:
                pass
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            return 128 - code if code < 0 else code


def shown(path: Path) -> str:
    """``path`` relative to the working directory when it lies inside it: shorter to read and retype."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def say(message: str) -> None:
    # stderr: the command's stdout may be data a pipeline reads
    print(f"loaderscope: {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="loaderscope record", description=__doc__.splitlines()[0])
    configure(parser)
    return cmd_record(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

"""`loaderscope doctor` run with sudo on another user's hung process: what that user controls (the
file names in its frames, the name given to --out in a directory they can write) must not make
doctor read, block on or overwrite anything that user could not.

The other user is real: a target process of uid 4242 (CI runs as root) runs the system's Python (the
other user need not read our virtual environment) and compiles code under file names it chooses
(``compile(src, "/path", "exec")``), so that its frames name them. doctor runs as root, as `sudo
loaderscope doctor PID` does.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from loaderscope.doctor.sample import EXIT_NO_LOADER
from loaderscope.traces.jsonl import read_trace
from tests.conftest import wait_for
from tests.doctor.hangs import reading

OTHER = 4242
PYTHON = "/usr/bin/python3"
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    os.geteuid() != 0 or not Path(PYTHON).exists() or shutil.which("setpriv") is None,
    reason="playing another local user needs root, setpriv and the system's /usr/bin/python3")]

SECRET = "root:$6$loaderscope-secret-hash$:19000:0:99999:7:::"

# The frame stands on line LINE of VICTIM: code compiled under that name, sleeping on that line.
CLAIMS_A_FILE = '''\
import sys, time
MARK, VICTIM, LINE = sys.argv[3], sys.argv[1], int(sys.argv[2])


def mark():
    with open(MARK, "a") as f:
        f.write("hang\\n")


exec(compile("\\n" * (LINE - 1) + "mark(); time.sleep(3600)\\n", VICTIM, "exec"))  # ENTRY
'''

# Three frames under names that must not be read: a FIFO (innermost: reading it blocks until a
# writer comes), a large regular file, and /dev/zero (endless).
CLAIMS_SPECIAL_FILES = '''\
import sys, time
FIFO, BIG, MARK = sys.argv[1:4]


def mark():
    with open(MARK, "a") as f:
        f.write("hang\\n")


g = globals()
exec(compile("def hang():\\n    mark(); time.sleep(3600)\\n", FIFO, "exec"), g)
exec(compile("def via_big():\\n    hang()\\n", BIG, "exec"), g)
exec(compile("via_big()\\n", "/dev/zero", "exec"), g)  # ENTRY
'''


class Target:
    """A script of user 4242 in a directory of its own; ended (with its session) on exit."""

    def __init__(self, home: Path, source: str, *argv: str) -> None:
        self.script = home / "target.py"
        self.script.write_text(source)
        self.marker = home / "mark"
        self.proc = subprocess.Popen([PYTHON, str(self.script), *argv, str(self.marker)], cwd=home,
                                     user=OTHER, group=OTHER, extra_groups=[], start_new_session=True,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def wait(self) -> None:
        def ready() -> bool:
            assert self.proc.poll() is None, self.proc.communicate()[1].decode()[-2000:]
            return self.marker.exists()
        wait_for(ready, timeout=60, what="the target's hang")

    def line(self, tag: str) -> int:
        return next(n for n, text in enumerate(self.script.read_text().splitlines(), 1) if f"# {tag}" in text)

    def end(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.communicate(timeout=60)


@pytest.fixture
def home() -> Iterator[Path]:
    """A directory of user 4242 that it can reach (pytest's tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="loaderscope-other-"))
    path.chmod(0o755)
    os.chown(path, OTHER, OTHER)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def target(home: Path) -> Iterator[Any]:
    started: list[Target] = []

    def start(source: str, *argv: str) -> Target:
        started.append(Target(home, source, *argv))
        started[-1].wait()
        return started[-1]

    yield start
    for t in started:
        t.end()


def doctor(*args: str, timeout: float = 120) -> tuple[int, dict[str, Any], str]:
    """doctor as root (sudo's), with --json; (exit code, its JSON, its stderr)."""
    done = subprocess.run([sys.executable, "-m", "loaderscope.cli", "doctor", *args, "--json"],
                          capture_output=True, timeout=timeout, check=False)
    assert b"Traceback" not in done.stderr, done.stderr.decode()
    return done.returncode, orjson.loads(done.stdout), done.stdout.decode() + done.stderr.decode()


def victim_file(tmp_path: Path) -> tuple[Path, int]:
    """A file only root can read (a shadow file), and the line its secret is on."""
    victim = tmp_path / "shadow"
    victim.write_text("\n".join(["root:x:0:", "daemon:*:19000:0:99999:7:::", SECRET, "bin:*:19000:0:99999:7:::"])
                      + "\n")
    victim.chmod(0o600)
    return victim, 3


def test_a_frame_naming_a_file_its_user_cannot_read_is_not_quoted(target: Any, tmp_path: Path) -> None:
    victim, line = victim_file(tmp_path)
    t = target(CLAIMS_A_FILE, str(victim), str(line))
    out_file = tmp_path / "snap.jsonl"
    rc, out, text = doctor(str(t.proc.pid), "--duration", "1", "--out", str(out_file))
    assert rc == EXIT_NO_LOADER, text
    assert SECRET not in text and "secret-hash" not in out_file.read_text()
    inner = out["training"]["stack"][-1]
    assert (inner["file"], inner["line"], inner["code"]) == (str(victim), line, "")
    # the target's own script, which its user can read, is still quoted (read as that user)
    entry = next(f for f in out["training"]["stack"] if f["file"] == str(t.script))
    assert entry["line"] == t.line("ENTRY") and entry["code"].startswith("exec(compile(")


def test_frames_naming_a_fifo_dev_zero_or_a_huge_file_are_never_read(target: Any, home: Path) -> None:
    fifo, big = home / "fifo", home / "big.py"
    os.mkfifo(fifo, 0o666)
    with open(big, "wb") as f:
        f.truncate(64 << 20)  # 64 MiB of NUL bytes, no newline: one endless first line
    big.chmod(0o644)
    t = target(CLAIMS_SPECIAL_FILES, str(fifo), str(big))
    rc, out, text = doctor(str(t.proc.pid), "--duration", "1", timeout=60)  # before: blocked on the FIFO for good
    assert rc == EXIT_NO_LOADER, text
    stack = {f["file"]: f for f in out["training"]["stack"]}
    assert {name: stack[name]["code"] for name in (str(fifo), str(big), "/dev/zero")} == \
        {str(fifo): "", str(big): "", "/dev/zero": ""}
    assert stack[str(t.script)]["code"].startswith("exec(compile(")
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_ctrl_c_ends_doctor_at_once_while_it_reads(target: Any, home: Path) -> None:
    fifo, big = home / "fifo", home / "big.py"
    os.mkfifo(fifo, 0o666)
    big.write_text("\n")
    t = target(CLAIMS_SPECIAL_FILES, str(fifo), str(big))
    run = subprocess.Popen([sys.executable, "-m", "loaderscope.cli", "doctor", str(t.proc.pid), "--duration", "60"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: run.poll() is not None or reading(run.pid), timeout=60, what="doctor's first read")
        run.send_signal(signal.SIGINT)
        out, err = run.communicate(timeout=20)  # before: KeyboardInterrupt, then joined a thread blocked on the FIFO
    finally:
        run.kill()
        run.wait()
    assert run.returncode == 130, err.decode()
    assert err.decode().strip() == "loaderscope doctor: interrupted" and out == b""


def test_out_onto_a_symlink_another_user_planted_leaves_its_target_alone(target: Any, tmp_path: Path) -> None:
    team = Path(tempfile.mkdtemp(prefix="loaderscope-team-"))  # a directory every user can write, no sticky bit
    team.chmod(0o777)
    try:
        victim = tmp_path / "keys"
        victim.write_text("precious\n")
        victim.chmod(0o600)
        out_file = team / "stuck.jsonl"
        subprocess.run(["setpriv", f"--reuid={OTHER}", f"--regid={OTHER}", "--clear-groups", "ln", "-s", str(victim),
                        str(out_file)], check=True, capture_output=True)
        t = target(CLAIMS_A_FILE, str(team / "absent.py"), "1")
        rc, out, text = doctor(str(t.proc.pid), "--duration", "1", "--out", str(out_file))
        assert rc == EXIT_NO_LOADER, text
        assert victim.read_text() == "precious\n" and stat.S_IMODE(victim.stat().st_mode) == 0o600
        assert not out_file.is_symlink() and out["snapshot"] == str(out_file)
        head, events = read_trace(out_file)
        assert head["mode"] == "doctor" and events[-1]["kind"] == "run_end"
        assert sorted(p.name for p in team.iterdir()) == ["stuck.jsonl"], "a temporary file was left behind"
    finally:
        shutil.rmtree(team, ignore_errors=True)

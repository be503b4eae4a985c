"""Soak: one producer floods the dashboard while a second run and its viewer must stay responsive.

    .venv/bin/python bench/flood.py            # 20 s of flood, a table of figures
    .venv/bin/python bench/flood.py --quick    # 5 s
    .venv/bin/python bench/flood.py --json     # the figures as JSON (tests/server/test_flood_soak.py)
    .venv/bin/python bench/flood.py --attack heads   # instead: half-sent request heads, no token (slowloris)
    .venv/bin/python bench/flood.py --attack pings   # instead: pings on an ingest socket, pongs never read

The flooder sends, in a loop, a compact frame of 60,000 batch rows (300,000 events, at the frame cap), a frame holding
one 1.5 MB event and a frame of 10,000 unknown-kind events. Meanwhile a steady producer sends 100
events every 20 ms to its own run, one viewer follows that run, and /api/health is timed every 20 ms.
Reported: health latency p50 / p99 / max, the steady run's events produced and seen by its viewer,
the viewer's largest gap between messages, and the server's peak RSS.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
from websockets.sync.client import connect

URL_LINE = re.compile(r"loaderscope dashboard: (http://[^/\s]+)/\?token=(\S+)")


def start_server(directory: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    token = secrets.token_urlsafe(24)
    log_path = directory / "server.log"
    code = ("from loaderscope.server.web.dashboard import serve; "
            f"serve(port=0, data_dir={str(directory)!r}, log_level='warning')")
    env = {**os.environ, "LOADERSCOPE_TOKEN": token, "XDG_RUNTIME_DIR": str(directory), "PYTHONUNBUFFERED": "1"}
    with log_path.open("wb") as log:
        process = subprocess.Popen([sys.executable, "-c", code], stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        match = URL_LINE.search(log_path.read_text(errors="replace"))
        if match:
            return process, match.group(1), token
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(log_path.read_text(errors="replace"))


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def flood_payloads() -> list[bytes]:
    rows = [["batch", 1, i, 1, 1, 0, 0, None] for i in range(60_000)]  # ~1.8 MB: at the frame cap
    return [orjson.dumps({"rows": rows, "seq": 0, "t0": 0.0}),
            orjson.dumps([{"kind": "note", "t": 1, "blob": "x" * (3 << 19)}]),
            orjson.dumps([{"kind": "mystery", "t": 1, "i": i} for i in range(10_000)])]


HALF_HEAD = b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
PING = bytes([0x89, 0x80 | 125]) + b"\0\0\0\0" + b"p" * 125  # a masked client ping (zero key)


def slowloris(address: tuple[str, int], stop: threading.Event, figures: dict[str, Any]) -> None:
    """Half-sent request heads, as fast as they connect, each kept open (up to 15,000 at once)."""
    held: list[socket.socket] = []
    while not stop.is_set():
        try:
            sock = socket.create_connection(address, timeout=2)
            sock.sendall(HALF_HEAD)
            held.append(sock)
            figures["attack_connections"] += 1
        except OSError:
            figures["attack_refused"] += 1
            time.sleep(0.01)
        if len(held) > 15_000:
            held.pop(0).close()
    for sock in held:
        sock.close()


def ping_flood(address: tuple[str, int], token: str, stop: threading.Event, figures: dict[str, Any]) -> None:
    """Pings on one ingest socket whose pongs are never read; counts the MiB the server took."""
    key = base64.b64encode(os.urandom(16)).decode()
    sock = socket.create_connection(address, timeout=10)
    sock.sendall((f"GET /ws/ingest HTTP/1.1\r\nHost: {address[0]}:{address[1]}\r\nUpgrade: websocket\r\n"
                  f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                  f"Authorization: Bearer {token}\r\n\r\n").encode())
    sock.settimeout(0.5)
    burst = PING * 500
    while not stop.is_set():
        try:
            sock.sendall(burst)
            figures["attack_mib"] += len(burst) / (1 << 20)
        except TimeoutError:
            figures["attack_stalled_s"] += 0.5  # the server stopped reading us
        except OSError:
            break
    sock.close()


def run(seconds: float, attack: str = "frames") -> dict[str, Any]:
    directory = Path(tempfile.mkdtemp(prefix="loaderscope-flood-"))
    process, url, token = start_server(directory)
    ws_url, headers = "ws" + url[4:], {"Authorization": f"Bearer {token}"}
    stop = threading.Event()
    figures: dict[str, Any] = {"flood_frames": 0, "steady_sent": 0, "steady_seen": 0, "viewer_max_gap_s": 0.0,
                               "peak_rss_mb": 0.0, "health_errors": 0}
    latencies: list[float] = []
    payloads = flood_payloads()

    def flooder() -> None:
        with connect(f"{ws_url}/ws/ingest?run=flood", additional_headers=headers, max_size=None) as ws:
            ws.recv(timeout=10)
            ws.send(orjson.dumps([{"kind": "run_start", "t": 0, "mode": "real", "config": {}}]))
            while not stop.is_set():
                ws.send(payloads[figures["flood_frames"] % len(payloads)])
                figures["flood_frames"] += 1

    def steady() -> None:
        with connect(f"{ws_url}/ws/ingest?run=steady", additional_headers=headers, max_size=None) as ws:
            ws.recv(timeout=10)
            while not stop.is_set():
                ws.send(orjson.dumps([{"kind": "step", "t": 1, "batch": i} for i in range(100)]))
                figures["steady_sent"] += 100
                time.sleep(0.02)
            ws.send(orjson.dumps([{"kind": "run_end", "t": 2, "reason": "done"}]))
            figures["steady_sent"] += 1

    def viewer() -> None:
        with httpx.Client(timeout=30, headers=headers) as http:  # the steady producer names the run first
            while http.get(f"{url}/api/runs/steady").status_code == 404:
                time.sleep(0.02)
        with connect(f"{ws_url}/ws/runs/steady?after=-1", additional_headers=headers, max_size=None) as ws:
            last = time.monotonic()
            while True:
                message = orjson.loads(ws.recv(timeout=60))
                now = time.monotonic()
                figures["viewer_max_gap_s"] = max(figures["viewer_max_gap_s"], now - last) if not stop.is_set() \
                    else figures["viewer_max_gap_s"]
                last = now
                if isinstance(message, list):
                    figures["steady_seen"] += len(message)
                elif message.get("type") == "end":
                    return

    def health() -> None:
        # a new connection per poll under a heads attack: what it holds is the server's sockets
        limits = httpx.Limits(max_keepalive_connections=0 if attack == "heads" else 20)
        with httpx.Client(timeout=30, limits=limits) as http:
            while not stop.is_set():
                start = time.perf_counter()
                try:
                    http.get(f"{url}/api/health").raise_for_status()
                except httpx.HTTPError:
                    figures["health_errors"] += 1
                latencies.append(time.perf_counter() - start)
                figures["peak_rss_mb"] = max(figures["peak_rss_mb"], rss_mb(process.pid))
                time.sleep(0.02)

    threads = [threading.Thread(target=f, daemon=True) for f in (steady, viewer, health)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    address = (url.split("//")[1].rsplit(":", 1)[0], int(url.rsplit(":", 1)[1]))
    figures.update(attack=attack, attack_connections=0, attack_refused=0, attack_mib=0.0, attack_stalled_s=0.0)
    target: Any = {"frames": lambda: flooder(), "heads": lambda: slowloris(address, stop, figures),
                   "pings": lambda: ping_flood(address, token, stop, figures)}[attack]
    flood = threading.Thread(target=target, daemon=True)
    flood.start()
    time.sleep(seconds)
    stop.set()
    for t in (*threads, flood):
        t.join(60)
    with httpx.Client(timeout=30, headers=headers) as http:
        figures["steady_stored"] = http.get(f"{url}/api/runs/steady").json()["events"]
        flooded = http.get(f"{url}/api/runs/flood")
        figures["flood_stored"] = flooded.json()["events"] if flooded.status_code == 200 else 0
    figures["server_alive"] = process.poll() is None
    process.terminate()
    process.wait(15)
    latencies.sort()
    figures["health_samples"] = len(latencies)
    figures["health_p50_ms"] = 1000 * latencies[len(latencies) // 2]
    figures["health_p99_ms"] = 1000 * latencies[int(len(latencies) * 0.99)]
    figures["health_max_ms"] = 1000 * latencies[-1]
    shutil.rmtree(directory, ignore_errors=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--quick", action="store_true", help="5 s of flood")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--attack", choices=("frames", "heads", "pings"), default="frames",
                        help="frames: the producer flood above; heads: half-sent request heads; pings: a ping flood")
    args = parser.parse_args()
    figures = run(5.0 if args.quick else args.seconds, args.attack)
    if args.json:
        print(json.dumps(figures))
        return
    for key, value in figures.items():
        print(f"{key:>24}: {value:,.1f}" if isinstance(value, float) else f"{key:>24}: {value}")


if __name__ == "__main__":
    main()

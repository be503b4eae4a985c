"""What one dashboard launch is configured with: address, token, limits, where traces go."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from loaderscope.proof import is_loopback

# Limits keep one browser tab or one producer from exhausting the machine.
MEMORY_EVENTS = 100_000  # events per run kept in memory; older ones are read back from the trace file
MAX_LAG = 50_000  # a subscriber further behind than this is told to resync over REST
# Events per websocket frame sent to viewers: ~25 KiB stays under the transport's 64 KiB write
# high-water mark, so a send rarely waits for a drain; measured 1.1-2x the rate of 1000-event frames.
FRAME_EVENTS = 250
MAX_ACTIVE_RUNS = 4  # run processes at once
# Runs held in memory (besides logdir runs): past it an ended run is forgotten (its trace file stays) or a
# disconnected one moves to disk (parked: listed, resumable), the source holding the most going first.
MAX_RUNS = 200
# Runs parked on disk, listed with their summary (~45 KiB of server RSS each, bench/parked.py): past it the
# source parking the most loses its longest gone (delisted; its trace stays).
MAX_PARKED = 1000
MAX_RUN_EVENTS = 50_000_000  # a producer sending more is cut off
STOP_GRACE = 3.0  # seconds a run has to stop by itself before its process group gets SIGTERM
KILL_GRACE = 2.0  # seconds between SIGTERM and SIGKILL
LOGDIR_POLL = 0.5  # seconds between looks at the logdir and at each followed file (polling works on NFS)
# A trace without run_end that has not grown for this long shows as "truncated". Producers flush at
# least every second while a loader runs, but a training loop in a long validation or checkpoint
# writes nothing: 30 s keeps those "running" while a killed job is named within half a minute.
SILENT_AFTER = 30.0
# inotify watches one logdir may take (a directory holding traces takes one; at most a quarter of the
# user's fs.inotify.max_user_watches, which all their programs share): directories beyond it are polled.
LOGDIR_WATCHES = 8192
# Connections: with max_active_runs, under the 200 runs held in memory, so live runs can never hold every
# slot, and under uvicorn's and the OS's own limits (each viewer costs a task and a socket). One source
# (a local uid, else an address) may hold 64 of the 96: a 64-rank job streams whole, and 32 slots stay
# for everyone else.
MAX_PRODUCERS = 96
MAX_SOURCE_PRODUCERS = 64
MAX_VIEWERS = 256  # viewer websockets in all
MAX_RUN_VIEWERS = 64  # viewer websockets per run
# A disconnected watch() run may come back (its producer retries): it is not forgotten for this long.
RECONNECT_GRACE = 600.0
# A client has this long to send a request head, and this many may be sending one at once (past it
# the oldest is closed): half-sent heads held the server's sockets (server/security/protocols.py).
HEAD_TIMEOUT = 10.0
MAX_HEADS = 256
# Websocket keepalive (uvicorn's defaults); a peer that keeps sending is alive whether or not its pong
# has been read yet (server/security/protocols.py).
PING_INTERVAL = 20.0
PING_TIMEOUT = 20.0
MAX_RUN_BYTES = 1 << 30  # a run's trace file; a producer writing more is cut off (1008)
# Traces of a temporary data directory: those of forgotten runs are deleted beyond the newest
# KEEP_FORGOTTEN, and forgotten runs' files go first once all of them pass DISK_BYTES.
KEEP_FORGOTTEN = 16
DISK_BYTES = 4 << 30


@dataclass
class ServerConfig:
    """Everything create_app needs; serve() fills it from its arguments."""

    token: str
    port: int = 8000
    host: str = "127.0.0.1"
    data_dir: Path | None = None  # where run traces and logs go; None keeps runs in memory only
    remove_data_dir: bool = False  # a temporary data_dir of this launch: removed at server exit
    logdir: str | None = None  # list and follow every trace under this path or fsspec URL (a local one is data_dir)
    logdir_poll: float = LOGDIR_POLL
    logdir_watch: bool = True  # a local logdir's changes come from inotify (False: polled, as a network one is)
    logdir_watches: int = LOGDIR_WATCHES
    silent_after: float = SILENT_AFTER
    allow_origins: tuple[str, ...] = ()  # extra origins allowed to open websockets / send requests
    allowed_hosts: tuple[str, ...] = ()  # extra Host names accepted besides loopback names
    ingest_url: str = ""  # where run processes send their events (set once the port is bound)
    memory_events: int = MEMORY_EVENTS
    max_lag: int = MAX_LAG
    frame_events: int = FRAME_EVENTS
    max_active_runs: int = MAX_ACTIVE_RUNS
    max_runs: int = MAX_RUNS
    max_run_events: int = MAX_RUN_EVENTS
    max_run_bytes: int = MAX_RUN_BYTES
    max_producers: int = MAX_PRODUCERS
    max_source_producers: int = MAX_SOURCE_PRODUCERS
    max_parked: int = MAX_PARKED
    max_viewers: int = MAX_VIEWERS
    max_run_viewers: int = MAX_RUN_VIEWERS
    reconnect_grace: float = RECONNECT_GRACE
    head_timeout: float = HEAD_TIMEOUT
    max_heads: int = MAX_HEADS
    ping_interval: float = PING_INTERVAL
    ping_timeout: float = PING_TIMEOUT
    keep_forgotten: int = KEEP_FORGOTTEN
    disk_bytes: int = DISK_BYTES
    stop_grace: float = STOP_GRACE
    kill_grace: float = KILL_GRACE
    frontend_dir: Path | None = None
    use_launcher: bool = True  # fork runs from a preloaded process (fast) rather than start interpreters

    @property
    def remote(self) -> bool:
        """Bound to a non-loopback address: Host names are then not limited to loopback."""
        return not is_loopback(self.host)

    @property
    def cookie_name(self) -> str:
        # Cookies ignore ports: two dashboards on one host must not overwrite each other's token.
        return f"loaderscope_token_{self.port}"

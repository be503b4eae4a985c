"""py-spy-shaped dumps built by hand for the doctor's pure model and verdict: frames, threads, a main
thread waiting in torch's ``_try_get_data``, a worker, a recording of samples."""

from __future__ import annotations

from typing import Any

WORKER_PY = "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/worker.py"
FETCH_PY = "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/fetch.py"
LOADER_PY = "/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py"


def _f(name: str, file: str, line: int, code: str = "", **loc: Any) -> dict[str, Any]:
    return {"name": name, "filename": file, "line": line, "code": code,
            "locals": [{"name": k, "repr": str(v)} for k, v in loc.items()]}


def _thread(tid: int, *frames: dict[str, Any], name: str = "MainThread") -> dict[str, Any]:
    return {"os_thread_id": tid, "thread_name": name, "frames": list(frames)}  # innermost first, as py-spy


def _recording(main: list[dict[str, Any]], workers: dict[int, dict[str, Any]], times: int = 3) -> dict[str, Any]:
    procs = ({"100": {"state": "S", "cpu": 0, "comm": "python", "threads": main}}
             | {str(k): v for k, v in workers.items()})
    return {"pid": 100, "clk_tck": 100, "samples": [{"t": i * 0.5, "procs": procs} for i in range(times)]}


WAITING = [_thread(100, _f("Queue.get", "/usr/lib/python3.11/multiprocessing/queues.py", 113),
                   _f("_MultiProcessingDataLoaderIter._try_get_data", LOADER_PY, 1291),
                   _f("_MultiProcessingDataLoaderIter._next_data", LOADER_PY, 1505),
                   _f("<module>", "/home/me/train.py", 30, "for b in loader:"))]


def _worker(wid: int, *inner: dict[str, Any], state: str = "S", wchan: str = "futex_wait_queue",
            code: str = "data = fetcher.fetch(index)", **loc: Any) -> dict[str, Any]:
    loop = _f("_worker_loop", WORKER_PY, 374, code, worker_id=wid, **loc)
    above = _f("Popen._launch", "/usr/lib/python3.11/multiprocessing/popen_fork.py", 71)
    pid = 200 + wid
    return {"state": state, "cpu": 0, "comm": "pt_data_worker", "wchan": {str(pid): wchan},
            "threads": [_thread(pid, *inner, loop, above)]}

"""The doctor's pure model and verdict (``loaderscope.doctor.model``, ``verdict``) on dumps of the shape
py-spy records (tests/doctor/dumps.py): no process, no py-spy."""

from __future__ import annotations

from loaderscope.doctor import model, verdict
from tests.doctor.dumps import FETCH_PY, WAITING, _f, _recording, _thread, _worker


def test_model_reads_a_lock_wait_in_a_forked_worker() -> None:
    inner = [_f("Data.__getitem__", "/home/me/data.py", 12, "with LOCK:", i=8),
             _f("_MapDatasetFetcher.fetch", FETCH_PY, 54, "data = [self.dataset[idx] for idx in x]",
                possibly_batched_index=[8, 9, 10, 11], idx=8)]
    rec = _recording(WAITING, {200: _worker(0, code="r = index_queue.get(timeout=MP_STATUS_CHECK_INTERVAL)"),
                               201: _worker(1, *inner, idx=2, index=[8, 9, 10, 11])})
    p = model.build(rec)
    assert p.training.place == "next" and p.start_method == "fork"
    v = verdict.decide(p)
    assert (v.cause, v.worker, v.task, v.indices, v.sample) == ("fork_lock", 1, 2, [8, 9, 10, 11], 8)
    assert v.where == {"file": "/home/me/data.py", "line": 12, "function": "Data.__getitem__", "code": "with LOCK:"}
    assert "sample 1 (index 8)" in v.text and "data.py:12" in v.text and "waited at least 1.0 s" in v.text


def test_torchs_own_seeding_import_held_at_fork_is_named_in_numpy() -> None:
    """The hang loaderscope's own writer thread once caused (tests/probe/test_fork_safety.py): torch's worker
    loop seeds numpy.random, whose import another thread of the main process had begun at fork."""
    importing = _f("_lock_unlock_module", "<frozen importlib._bootstrap>", 224)
    importing["locals"] = [{"name": "name", "repr": '"numpy.random"'}]  # py-spy's repr of the str argument
    inner = [_f("_ModuleLock.acquire", "<frozen importlib._bootstrap>", 120, tid=1), importing,
             _f("__getattr__", "/venv/lib/python3.11/site-packages/numpy/__init__.py", 718,
                "import numpy.random as random", attr="'random'")]
    rec = _recording(WAITING, {200: _worker(0, *inner, code="np.random.seed(np_seed)")})
    v = verdict.decide(model.build(rec))
    assert (v.cause, v.worker, v.task) == ("import_fork_lock", 0, None)
    assert "to import numpy.random at __init__.py:718 in __getattr__" in v.text and "while starting" in v.text
    assert v.advice.startswith("import numpy.random in the main thread")
    assert "waiting to import numpy.random, while starting" in verdict.describe_worker(model.build(rec).workers[0])


def test_a_sleep_on_a_with_line_is_no_lock_without_a_futex() -> None:
    inner = [_f("Data.__getitem__", "/home/me/data.py", 12, "with open(p) as f:", i=8),
             _f("_MapDatasetFetcher.fetch", FETCH_PY, 54, "", possibly_batched_index=[8], idx=8)]
    rec = _recording(WAITING, {201: _worker(1, *inner, wchan="pipe_read", idx=2, index=[8])})
    assert verdict.decide(model.build(rec)).cause == "stuck_sample"


def test_a_zombie_worker_is_a_dead_worker_and_idle_workers_a_lost_task() -> None:
    idle = "r = index_queue.get(timeout=MP_STATUS_CHECK_INTERVAL)"
    rec = _recording(WAITING, {200: _worker(0, code=idle),
                               201: {"state": "Z", "cpu": 0, "comm": "pt_data_worker", "exitcode": -9}})
    v = verdict.decide(model.build(rec))
    assert v.cause == "dead_worker" and "signal 9" in v.text
    rec = _recording(WAITING, {200: _worker(0, code=idle), 201: _worker(1, code=idle)})
    assert verdict.decide(model.build(rec)).cause == "all_idle"


def test_a_collective_is_not_a_dataloader_problem() -> None:
    main = [_thread(100, _f("all_reduce", "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py",
                            2800),
                    _f("step", "/home/me/train.py", 40, "dist.all_reduce(loss)"))]
    v = verdict.decide(model.build(_recording(main, {})))
    assert v.cause == "collective" and v.text.startswith("not a DataLoader problem: this rank waits for another rank")
    assert v.where is not None and v.where["line"] == 40


def test_a_pin_thread_stuck_pinning_holds_up_next() -> None:
    pin_py = "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/pin_memory.py"
    pin = _thread(101, _f("pin_memory", pin_py, 57, "return data.pin_memory()"),
                  _f("_pin_memory_loop", pin_py, 34, "data = pin_memory(data, device)"), name="Thread-1")
    idle = "r = index_queue.get(timeout=MP_STATUS_CHECK_INTERVAL)"
    v = verdict.decide(model.build(_recording([*WAITING, pin], {200: _worker(0, code=idle)})))
    assert v.cause == "pin_thread" and "pin-memory thread" in v.text and "pin_memory=False" in v.advice


def test_the_job_names_the_rank_outside_the_collective() -> None:
    c10d = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
    waiting = [_thread(100, _f("barrier", c10d, 4000), _f("main", "/home/me/train.py", 50, "dist.barrier()"))]
    inner = [_f("Data.__getitem__", "/home/me/data.py", 7, "time.sleep(60)"),
             _f("_MapDatasetFetcher.fetch", FETCH_PY, 54, "", possibly_batched_index=[5], idx=5)]
    loading = _recording(WAITING, {201: _worker(1, *inner, wchan="hrtimer_nanosleep", idx=5, index=[5])})
    ranks = [(r, 100 + r, p, verdict.decide(p)) for r, p in ((0, model.build(_recording(waiting, {}))),
                                                            (1, model.build(loading)))]
    line, advice, culprit = verdict.decide_job(ranks)
    assert culprit == 1
    assert line.startswith("rank 1 (pid 101) is not in the collective that rank(s) 0 wait in (barrier)")
    assert "stuck: worker 1" in line and "data.py:7" in line and advice == ranks[1][3].advice
    both = [(r, pid, ranks[0][2], ranks[0][3]) for r, pid in ((0, 100), (1, 101))]
    assert verdict.decide_job(both) == ("every rank waits in a collective (rank 0: barrier; rank 1: barrier): "
                                        "they wait for each other or for a rank outside this job", None, None)

"""A discrete-event simulator of torch's DataLoader protocol, on a virtual clock.

It follows torch 2.x ``_MultiProcessingDataLoaderIter`` line by line where the protocol is decided:
``_reset`` (priming ``prefetch_factor × num_workers`` tasks, ``_ResumeIteration`` for persistent
workers), ``_try_put_index`` (round-robin over active workers; with ``in_order=False`` only to a
worker below ``max_tasks // active``), ``_next_data`` (skip tasks of exhausted workers, park
out-of-order results in ``_task_info``), ``_process_data`` (one ``_try_put_index`` per yielded batch)
and ``_worker_loop`` (FIFO index queue, ``iteration_end`` for exhausted iterables). With
``num_workers=0`` it follows ``_SingleProcessDataLoaderIter``: fetch in ``next()``, in the main process.

Pure and sans-I/O: no torch, no clock, no threads. Costs and the random generator are injected;
``advance(until)`` runs the event queue and returns the ◆ events it produced (``mode: "sim"``).
"""

from __future__ import annotations

import heapq
import itertools
import math
import statistics
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from loaderscope.events import Event, Kind, clip_indices
from loaderscope.sim.costs import TaskCosts
from loaderscope.sim.records import Info, Result, SimConfig, Task, Worker

# Steps closer than this in virtual time count as simultaneous: float sums of equal costs differ in
# the last bit, and simultaneity is then settled by the rule in ``Simulator._at``, not by rounding noise.
TIME_QUANTUM_DIGITS = 9
STUCK_MEDIAN_FACTOR = 20  # probe/liveness.py StuckRule: stuck after 10 s or 20x the median fetch, whichever is larger
FIRST_PID = 1000  # simulated workers get pids from here on, in spawn order (reproducible)
# The same frame shape as a real worker's stack (probe/stacks.py), so every consumer reads it alike.
SIMULATED_STACK = [{"file": "<simulated>", "line": 0, "function": "Dataset.__getitem__",
                    "code": "(simulated stall: the cost model's stall for this task)", "user": True}]


class Simulator:
    """The protocol on a virtual clock. Drive it with ``advance(until)`` or ``run()``.

    Args:
        cfg: the loader and its sampler order.
        costs: the compiled cost model (``TaskCosts``).
        max_events: stop the run (reason "stopped", ``truncated``) once this many events exist.
    """

    def __init__(
        self,
        cfg: SimConfig,
        costs: TaskCosts,
        *,
        max_events: int | None = None,
        barrier: Callable[[Simulator], None] | None = None,
    ) -> None:
        if cfg.loader.num_workers < 0 or cfg.loader.max_tasks < 1:
            raise ValueError(f"need num_workers >= 0 and prefetch_factor >= 1, got {cfg.loader.num_workers}, "
                             f"{cfg.loader.prefetch_factor}")
        self.cfg = cfg
        self.costs = costs
        self.now = 0.0
        self.done = False
        self._max_events = max_events
        # Called at each yield instead of scheduling the next next() a step later: a job of ranks
        # (sim.job) starts every rank's next step only once all ranks delivered this one.
        self._barrier = barrier
        self._heap: list[tuple[float, int, int, Callable[..., None], tuple[Any, ...]]] = []
        self._order = itertools.count()
        self._out: list[Event] = []
        self._seq = 0
        self._pids = itertools.count(FIRST_PID)
        self._workers: list[Worker] = []
        self._fetch_times: list[float] = []
        self._stats = {"batches": 0, "skipped": 0, "parked": 0, "parked_high": 0, "consumer_wait": 0.0}
        self._epoch = -1
        self._reset_iterator_state()
        self._at(0.0, self._start_run)

    # --- driving -----------------------------------------------------------------------------------

    def advance(self, until: float | None = None) -> list[Event]:
        """Run every scheduled step up to virtual time ``until`` (all, if None); return new events."""
        heap = self._heap
        while heap and not self.done and (until is None or heap[0][0] <= until):
            self.step()
        return self.take()

    def run(self) -> list[Event]:
        """Every event of the run.

        Raises:
            RuntimeError: if the event queue empties before the run ends (a simulator bug).
        """
        events = self.advance(None)
        if not self.done:
            raise RuntimeError(f"simulation stalled at t={self.now:.6f}: nothing scheduled and the run not over")
        return events

    @property
    def next_time(self) -> float:
        """Virtual time of the next scheduled step (infinity once the run is over or idle)."""
        return self._heap[0][0] if self._heap and not self.done else math.inf

    def step(self) -> None:
        """Run the next scheduled step alone (a job interleaves its ranks' steps in time order)."""
        t, _, _, handler, args = heapq.heappop(self._heap)
        self.now = t
        handler(*args)
        if self._max_events is not None and self._seq >= self._max_events and not self.done:
            self._finish("stopped", truncated=True)

    def take(self) -> list[Event]:
        """The events produced since the last ``take`` or ``advance``."""
        out, self._out = self._out, []
        return out

    def resume_at(self, t: float) -> None:
        """The training loop calls ``next()`` again at ``t`` (after a job's step barrier)."""
        self._at(t, self._consumer_next)

    def _at(self, t: float, handler: Callable[..., None], *args: Any, worker: int = -1) -> None:
        """Schedule ``handler(*args)`` at virtual time ``t``.

        Times are kept to the nanosecond. Simultaneous steps run main process first, then workers
        by id (torch starts them in id order, so with equal work the lower id is ahead), then in the
        order they were scheduled.
        """
        heapq.heappush(self._heap, (round(t, TIME_QUANTUM_DIGITS), worker, next(self._order), handler, args))

    def _emit(self, kind: str, **fields: Any) -> None:
        event = {"seq": self._seq, "t": self.now, "run": self.cfg.run_id, "rank": self.cfg.rank, "kind": kind}
        event.update(fields)
        self._out.append(event)
        self._seq += 1

    # --- run and epoch life ------------------------------------------------------------------------

    def _start_run(self) -> None:
        cfg = self.cfg
        self._emit(Kind.RUN_START, mode="sim", scenario=cfg.scenario, config=dict(cfg.config), torch=None,
                   host="simulator", **cfg.extra_start)
        if cfg.loader.num_workers == 0 and cfg.loader.timeout > 0:
            # torch's _SingleProcessDataLoaderIter asserts this when the loader is iterated
            self._fail("AssertionError", "_SingleProcessDataLoaderIter requires timeout == 0")
            return
        self._begin_epoch(0)

    def _begin_epoch(self, epoch: int) -> None:
        """``iter(loader)``: a new iterator that starts its workers, or ``_reset`` of the persistent one."""
        self._epoch = epoch
        if self.cfg.loader.num_workers == 0:
            self._workers = [Worker(0, 0, alive=False)]  # the main process is the fetcher
            self._epoch_reset()
        elif not self._workers or not self.cfg.loader.persistent_workers:
            self._spawn_workers()
        else:
            self._resume_workers()
            self._epoch_reset()

    def _spawn_workers(self) -> None:
        """torch's iterator starts its workers one after another, then primes them (``_reset``)."""
        self._workers = [Worker(w, next(self._pids)) for w in range(self.cfg.loader.num_workers)]
        for worker in self._workers:
            self._at(self.now + (worker.wid + 1) * self.costs.spawn, self._worker_spawned, worker)
        self._at(self.now + self.cfg.loader.num_workers * self.costs.spawn, self._epoch_reset)

    def _epoch_reset(self) -> None:
        """``_reset``: fresh cursors, the cycle back at worker 0, the prefetch window primed."""
        batches = {"batches": len(self.cfg.batches[self._epoch])} if self.cfg.dataset_kind == "map" else {}
        self._emit(Kind.EPOCH_START, epoch=self._epoch, **batches)
        self._reset_iterator_state()
        if self.cfg.loader.num_workers:  # the single-process iterator primes nothing: it fetches in next()
            for _ in range(self.cfg.loader.max_tasks):
                self._try_put_index()
        self._at(self.now, self._consumer_next)  # the training loop's first next() of the epoch

    def _resume_workers(self) -> None:
        # _ResumeIteration: every worker's queue holds only tasks it drops unfetched, so the
        # round trip costs no virtual time; each worker builds a fresh fetcher (shard restarts).
        for worker in self._workers:
            worker.queue.clear()
            worker.iteration_end = False
            worker.shard_pos = 0

    def _end_epoch(self) -> None:
        """StopIteration from ``next()``; non-persistent workers are shut down with it.

        Emitted in the real probe's order: ``epoch_end``, then the workers' ``worker_exit``.
        """
        self._emit(Kind.EPOCH_END, epoch=self._epoch, batches=self._yielded_in_epoch, abandoned=False)
        if not self.cfg.loader.persistent_workers:
            self._exit_workers()
        if self._epoch + 1 < self.cfg.epochs:
            self._at(self.now + self.costs.epoch_gap, self._begin_epoch, self._epoch + 1)  # eval, checkpoints
        else:
            self._exit_workers()  # persistent workers live until the loader goes away
            self._finish("done")

    def _exit_workers(self) -> None:
        for worker in self._workers:
            if worker.alive:
                worker.alive = False
                self._emit(Kind.WORKER_EXIT, worker=worker.wid, pid=worker.pid, exitcode=0)

    def _finish(self, reason: str, **fields: Any) -> None:
        wall = self.now
        stats = dict(self._stats, epochs=self._epoch + 1, wall=wall,
                     batches_per_s=self._stats["batches"] / wall if wall > 0 else 0.0,
                     input_bound=self._stats["consumer_wait"] / wall if wall > 0 else 0.0)
        self._emit(Kind.RUN_END, reason=reason, stats=stats, **fields)
        self.done = True
        self._heap.clear()

    def _fail(self, error_type: str, message: str, **fields: Any) -> None:
        """An exception reaches the training loop: the run ends with it, as torch would raise it."""
        self._emit(Kind.ERROR, type=error_type, message=message, traceback=None, **fields)
        for worker in self._workers:
            if worker.alive:
                worker.alive = False
                self._emit(Kind.WORKER_EXIT, worker=worker.wid, pid=worker.pid, exitcode=None)
        self._finish("error")

    # --- the main process: _reset, _try_put_index, _next_data, _process_data ----------------------------

    def _reset_iterator_state(self) -> None:
        n = self.cfg.loader.num_workers
        self._send_idx = 0
        self._rcvd_idx = 0
        self._task_info: dict[int, Info] = {}
        self._tasks_outstanding = 0
        self._workers_status = [True] * n
        self._active = n
        self._workers_num_tasks = [0] * n
        self._cycle = 0  # itertools.cycle(range(num_workers)), reset to worker 0 every epoch
        self._batch_pos = 0  # the sampler iterator
        self._data_queue: deque[Result] = deque()  # result queue, after the pin thread if any
        self._pin_queue: deque[Result] = deque()
        self._pin_busy = False
        self._parked = 0  # results waiting in _task_info (the reorder buffer)
        self._blocked = False  # main process waiting in _get_data
        self._wait_token = 0
        self._called_at = 0.0
        self._yielded_in_epoch = 0

    def _next_index(self) -> Sequence[Any] | None:
        """The batch sampler's next batch of indices; None for StopIteration."""
        if self.cfg.dataset_kind == "iterable":
            # _InfiniteConstantSampler under a BatchSampler; without a batch_size, one sample per "batch"
            return [None] * (self.cfg.loader.batch_size or 1)
        batches = self.cfg.batches[self._epoch]
        if self._batch_pos >= len(batches):
            return None
        self._batch_pos += 1
        return batches[self._batch_pos - 1]

    def _try_put_index(self) -> None:
        max_tasks = self.cfg.loader.max_tasks
        if self._tasks_outstanding >= max_tasks:
            raise AssertionError("Number of outstanding tasks exceeded maximum allowed tasks")
        index = self._next_index()
        if index is None:
            return
        worker = self._pick_worker(max_tasks)
        if worker is None:
            return  # torch drops the index it took from the sampler here, as we do
        idx = self._send_idx
        self._task_info[idx] = Info(worker)
        self._workers_num_tasks[worker] += 1
        self._tasks_outstanding += 1
        self._send_idx += 1
        shown, n = clip_indices(index if isinstance(index, list) else list(index))
        self._emit(Kind.DISPATCH, idx=idx, worker=worker, epoch=self._epoch, indices=shown, n=n)
        self._workers[worker].queue.append(Task(self._epoch, idx, index))
        self._worker_kick(self._workers[worker])

    def _pick_worker(self, max_tasks: int) -> int | None:
        """The next active worker of the cycle (with capacity, when ``in_order=False``)."""
        n = self.cfg.loader.num_workers
        for _ in range(n):
            worker = self._cycle
            self._cycle = (self._cycle + 1) % n
            if self._workers_status[worker]:
                if self.cfg.loader.in_order or self._workers_num_tasks[worker] < max_tasks // self._active:
                    return worker
        return None

    def _consumer_next(self) -> None:
        """The training loop calls ``next()``."""
        self._called_at = self.now
        if self.cfg.loader.num_workers == 0:
            self._single_next()
        else:
            self._next_data()

    def _next_data(self) -> None:
        while True:
            if not self._advance_rcvd_idx():
                self._end_epoch()
                return
            info = self._task_info[self._rcvd_idx]
            if info.data is not None:
                del self._task_info[self._rcvd_idx]
                self._parked -= 1
                self._rcvd_idx += 1
                self._process_data(info.data, from_parked=True)
                return
            if not self._data_queue:
                self._block()
                return
            result = self._data_queue.popleft()
            if self.costs.get > 0:  # unpickling the batch keeps the main process busy
                self._at(self.now + self.costs.get, self._got, result)
                return
            if self._take_result(result):
                return

    def _got(self, result: Result) -> None:
        if not self._take_result(result):
            self._next_data()

    def _advance_rcvd_idx(self) -> bool:
        """Skip tasks whose worker is exhausted and has no data for them; False when none is left."""
        while self._rcvd_idx < self._send_idx:
            info = self._task_info.get(self._rcvd_idx)
            if info is not None:
                if info.data is not None or self._workers_status[info.worker]:
                    return True
                del self._task_info[self._rcvd_idx]
                self._stats["skipped"] += 1
                self._emit(Kind.SKIP, idx=self._rcvd_idx, worker=info.worker, epoch=self._epoch)
            self._rcvd_idx += 1
        return False

    def _take_result(self, result: Result) -> bool:
        """One ``_get_data()`` that succeeded; True when it produced the batch for this ``next()``."""
        self._tasks_outstanding -= 1
        self._emit(Kind.ARRIVE, idx=result.idx, worker=result.worker, epoch=result.epoch)
        if result.stop:
            self._worker_exhausted(result.worker)
            self._try_put_index()
            return False
        if result.idx != self._rcvd_idx:
            if not self.cfg.loader.in_order:
                del self._task_info[result.idx]
                self._process_data(result, from_parked=False)
                return True
            self._task_info[result.idx].data = result
            self._park(result)
            return False
        del self._task_info[result.idx]
        self._rcvd_idx += 1
        self._process_data(result, from_parked=False)
        return True

    def _park(self, result: Result) -> None:
        self._stats["parked"] += 1
        self._parked += 1
        self._stats["parked_high"] = max(self._stats["parked_high"], self._parked)
        self._emit(Kind.PARKED, idx=result.idx, worker=result.worker, epoch=result.epoch,
                   waiting_for=self._rcvd_idx)

    def _worker_exhausted(self, wid: int) -> None:
        """``_IterableDatasetStopIteration`` received: the worker takes no more tasks this epoch."""
        self._workers_status[wid] = False
        self._active -= 1
        if not self.cfg.loader.persistent_workers:  # _mark_worker_as_unavailable: the worker gets None
            worker = self._workers[wid]
            worker.queue.append(None)
            self._worker_kick(worker)

    def _process_data(self, result: Result, *, from_parked: bool) -> None:
        self._workers_num_tasks[result.worker] -= 1
        self._try_put_index()
        self._yield(result.idx, result.worker, from_parked)

    def _yield(self, idx: int, worker: int, from_parked: bool) -> None:
        wait = self.now - self._called_at
        self._stats["batches"] += 1
        self._stats["consumer_wait"] += wait
        self._yielded_in_epoch += 1
        self._emit(Kind.YIELD, idx=idx, worker=worker, epoch=self._epoch, wait=wait, from_parked=from_parked)
        if self._barrier is not None:
            self._barrier(self)
        else:
            self._at(self.now + self.costs.step, self._consumer_next)

    def _block(self) -> None:
        """Wait in ``_get_data()``; with ``timeout > 0`` each wait is bounded."""
        self._blocked = True
        self._wait_token += 1
        if self.cfg.loader.timeout > 0:
            self._at(self.now + self.cfg.loader.timeout, self._timed_out, self._wait_token)

    def _deliver(self, result: Result) -> None:
        """A result lands on the queue the main process reads; wake it if it waits there."""
        self._data_queue.append(result)
        if self._blocked:
            self._blocked = False
            self._wait_token += 1
            self._next_data()

    def _timed_out(self, token: int) -> None:
        if self._blocked and token == self._wait_token:
            self._emit(Kind.TIMEOUT, seconds=self.cfg.loader.timeout)
            self._fail("RuntimeError", f"DataLoader timed out after {self.cfg.loader.timeout} seconds")

    # --- worker processes: _worker_loop ------------------------------------------------------------

    def _worker_spawned(self, worker: Worker) -> None:
        self._emit(Kind.WORKER_START, worker=worker.wid, pid=worker.pid)
        self._at(self.now + self.costs.startup_of(worker.wid), self._worker_ready, worker, worker=worker.wid)

    def _worker_ready(self, worker: Worker) -> None:
        """Booted: the worker's loop starts reading its index queue."""
        if worker.alive:  # else it was shut down before it finished starting
            worker.ready = True
            self._worker_kick(worker)

    def _worker_kick(self, worker: Worker) -> None:
        """The worker takes the next task from its index queue, if it is free to."""
        while worker.alive and worker.ready and worker.current is None and worker.queue:
            task = worker.queue.popleft()
            if task is None:
                worker.alive = False
                self._emit(Kind.WORKER_EXIT, worker=worker.wid, pid=worker.pid, exitcode=0)
                return
            if worker.iteration_end:
                continue  # torch drops it unfetched; the main process skips it later
            self._start_fetch(worker, task)

    def _start_fetch(self, worker: Worker, task: Task) -> None:
        samples, stop = self._samples_for(worker, task)
        dt = self.costs.fetch(samples, worker.wid) + self.costs.stall(task.epoch, task.idx)
        worker.current = task
        self._emit(Kind.FETCH_START, idx=task.idx, worker=worker.wid, epoch=task.epoch, n=len(task.samples))
        die_after = self.costs.dies(task.epoch, task.idx)
        if die_after is not None:
            self._at(self.now + die_after, self._worker_died, worker, task, worker=worker.wid)
            return
        self._watch_stuck(worker, task, dt)
        nbytes = 0 if stop else self.costs.nbytes(len(samples))
        result = Result(task.epoch, task.idx, worker.wid, nbytes, stop)
        self._at(self.now + dt, self._fetch_done, worker, result, dt, worker=worker.wid)

    def _samples_for(self, worker: Worker, task: Task) -> tuple[Sequence[Any], bool]:
        """The samples a fetch produces, and whether it ends the worker's iterable shard.

        Iterable fetchers pull up to ``batch_size`` samples; an empty pull (or a short one with
        ``drop_last``) raises StopIteration, yet the samples it did pull still cost their time.
        """
        if self.cfg.dataset_kind == "map":
            return task.samples, False
        sizes = self.cfg.shard_sizes
        start = sum(sizes[: worker.wid])
        size = sizes[worker.wid] if worker.wid < len(sizes) else 0
        take = min(len(task.samples), size - worker.shard_pos)
        samples = range(start + worker.shard_pos, start + worker.shard_pos + take)
        worker.shard_pos += take
        stop = take == 0 or (self.cfg.loader.drop_last and take < len(task.samples))
        if stop:
            worker.iteration_end = True
        return samples, stop

    def _watch_stuck(self, worker: Worker, task: Task, dt: float) -> None:
        if dt <= self.costs.stuck_after:
            return  # the threshold is at least stuck_after: only long fetches need the median
        median = statistics.median(self._fetch_times) if self._fetch_times else 0.0
        threshold = max(self.costs.stuck_after, STUCK_MEDIAN_FACTOR * median)
        if dt > threshold:
            self._at(self.now + threshold, self._worker_stuck, worker, task, threshold, worker=worker.wid)

    def _worker_stuck(self, worker: Worker, task: Task, elapsed: float) -> None:
        if worker.current is task:
            self._emit(Kind.WORKER_STUCK, worker=worker.wid, idx=task.idx, epoch=task.epoch, elapsed=elapsed,
                       stack=SIMULATED_STACK)

    def _fetch_done(self, worker: Worker, result: Result, dt: float) -> None:
        busy = self.costs.task_overhead > 0  # putting the result, taking the next index
        if not busy:
            worker.current = None
        self._fetch_times.append(dt)
        fields = {"stop": True} if result.stop else {}
        self._emit(Kind.FETCH_END, idx=result.idx, worker=worker.wid, epoch=result.epoch, dt=dt,
                   nbytes=result.nbytes, **fields)
        # multiprocessing/queues.py: a process's first Queue.put starts the feeder thread that pickles
        # and sends its results, in order: none of them leaves before it runs
        if worker.feeder_from is None:
            worker.feeder_from = self.now + self.costs.first_result
        transfer = max(0.0, worker.feeder_from - self.now) + self.costs.transfer
        if transfer > 0:
            self._at(self.now + transfer, self._result_queued, result)
        else:
            self._result_queued(result)
        if busy:
            self._at(self.now + self.costs.task_overhead, self._worker_free, worker, worker=worker.wid)
        else:
            self._worker_kick(worker)

    def _worker_free(self, worker: Worker) -> None:
        worker.current = None
        self._worker_kick(worker)

    def _result_queued(self, result: Result) -> None:
        """The result can be taken off the worker result queue: by the pin thread, if any, else by main."""
        if self.costs.pin_active:
            self._pin_queue.append(result)
            self._pin_kick()
        else:
            self._deliver(result)

    def _worker_died(self, worker: Worker, task: Task) -> None:
        # torch's SIGCHLD handler raises in the main process as soon as the worker is gone.
        worker.alive = False
        self._emit(Kind.WORKER_DIED, worker=worker.wid, pid=worker.pid, exitcode=-9, signal="SIGKILL",
                   idx=task.idx, epoch=task.epoch, holding=True)
        self._fail("RuntimeError", f"DataLoader worker (pid {worker.pid}) is killed by signal: Killed. ",
                   idx=task.idx, worker=worker.wid, epoch=task.epoch)

    # --- pin-memory thread -------------------------------------------------------------------------

    def _pin_kick(self) -> None:
        while not self._pin_busy and self._pin_queue:
            result = self._pin_queue.popleft()
            if result.stop:
                self._deliver(result)  # not a tensor: passed through unpinned
                continue
            self._pin_busy = True
            self._emit(Kind.PIN_START, idx=result.idx, worker=result.worker, epoch=result.epoch)
            dt = self.costs.pin(result.nbytes)
            self._at(self.now + dt, self._pin_done, result, dt)

    def _pin_done(self, result: Result, dt: float) -> None:
        self._pin_busy = False
        self._emit(Kind.PIN_END, idx=result.idx, worker=result.worker, epoch=result.epoch, dt=dt,
                   nbytes=result.nbytes, pinned=True)
        self._deliver(result)
        self._pin_kick()

    # --- num_workers=0: _SingleProcessDataLoaderIter -----------------------------------------------------

    def _single_next(self) -> None:
        index = self._next_index()
        if index is None:
            self._end_epoch()
            return
        idx = self._send_idx
        self._send_idx += 1
        task = Task(self._epoch, idx, index)
        shown, n = clip_indices(index if isinstance(index, list) else list(index))
        self._emit(Kind.DISPATCH, idx=idx, worker=0, epoch=self._epoch, indices=shown, n=n)
        worker = self._workers[0]
        samples, stop = self._samples_for(worker, task)
        dt = self.costs.fetch(samples, 0) + self.costs.stall(task.epoch, idx)
        worker.current = task
        self._emit(Kind.FETCH_START, idx=idx, worker=0, epoch=self._epoch, n=len(index))
        self._watch_stuck(worker, task, dt)
        nbytes = 0 if stop else self.costs.nbytes(len(samples))
        self._at(self.now + dt, self._single_fetched, Result(self._epoch, idx, 0, nbytes, stop), dt)

    def _single_fetched(self, result: Result, dt: float) -> None:
        self._workers[0].current = None
        self._fetch_times.append(dt)
        fields = {"stop": True} if result.stop else {}
        self._emit(Kind.FETCH_END, idx=result.idx, worker=0, epoch=result.epoch, dt=dt, nbytes=result.nbytes,
                   **fields)
        if result.stop:  # the fetcher's StopIteration ends the epoch from inside next()
            self._stats["skipped"] += 1
            self._emit(Kind.SKIP, idx=result.idx, worker=0, epoch=result.epoch)
            self._end_epoch()
        elif self.costs.pin_active:
            self._emit(Kind.PIN_START, idx=result.idx, worker=0, epoch=result.epoch)
            dt = self.costs.pin(result.nbytes)
            self._at(self.now + dt, self._single_pinned, result, dt)
        else:
            self._single_pinned(result, None)

    def _single_pinned(self, result: Result, dt: float | None) -> None:
        """In the main process, pinning happens inside ``next()``, before the batch is handed over."""
        if dt is not None:
            self._emit(Kind.PIN_END, idx=result.idx, worker=0, epoch=result.epoch, dt=dt, nbytes=result.nbytes,
                       pinned=True)
        self._emit(Kind.ARRIVE, idx=result.idx, worker=0, epoch=result.epoch)
        if self.costs.get > 0:  # the sampler and the hand-over, in the main process too
            self._at(self.now + self.costs.get, self._yield, result.idx, 0, False)
        else:
            self._yield(result.idx, 0, from_parked=False)

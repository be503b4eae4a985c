// The frequent kinds' own code (state.py's _dispatch … _pin_end, which stay in
// backend/loaderscope/model/state.py): written once over field readers, so reducer.js's compiled
// steps apply it to an event and fastpath.js to a packed row of an EventTable. Its own module so that
// both import it and neither imports the other's. Pure: no DOM, no I/O, no clock.

import { WHERE as Where, WORKER_STATUS as WorkerStatus } from './contract.gen.js';

/** @typedef {import('./reducer.js').LoaderState} LoaderState */
/** @typedef {import('./reducer.js').Task} Task */
/** @typedef {import('./reducer.js').Effect} Effect */
/** @typedef {import('./types.js').Indices} Indices */

export const MAX_KEPT = 1000; // notes, errors and violations kept per run (state.py MAX_KEPT)

/**
 * @param {number} idx @param {number} worker @param {Indices|null} indices @param {number} n
 * @param {number} dispatched @param {number} epoch
 * @returns {Task}
 */
export function newTask(idx, worker, indices, n, dispatched, epoch) {
  return {
    idx,
    worker,
    indices,
    n,
    dispatched,
    where: Where.INDEX_QUEUE,
    fetch_start: null,
    fetch_end: null,
    pin_start: null,
    pin_end: null,
    arrived: null,
    nbytes: null,
    epoch,
  };
}

/**
 * Take `value` out of `list` in place. Not splice (which makes an array of what it took) nor shift
 * (which hands the array's head room back, so the next push allocates): a queue that takes and
 * gives a task per event made a third of the garbage of applying a big trace.
 * @param {number[]} list @param {number} value
 */
export function remove(list, value) {
  const i = list.indexOf(value);
  if (i < 0) return;
  const last = list.length - 1;
  for (let j = i; j < last; j++) list[j] = list[j + 1]; // a loop: these lists are short, and copyWithin is a call
  list.pop();
}

// --- the frequent kinds' own code, written once over field readers: the same code applies an event
// (the live path, a field read from the object) and a packed row of an EventTable (a big trace's
// batch, read from the columns with no event built) -------------------------------------------------

/**
 * @typedef {(src: any, i: number) => any} Read a field of an event (`src`; `i` unused) or of row `i` of an EventTable
 *   (`src`)
 * @typedef {(name: string) => Read} Fields the reader of each field, resolved once per rule
 */

/** @type {Record<string, (field: Fields) => Effect>} */
export const HOT_CODE = {
  dispatch(field) {
    const idxOf = field('idx'),
      workerOf = field('worker'),
      indicesOf = field('indices'),
      nOf = field('n');
    return (s, e, i) => {
      const idx = idxOf(e, i);
      if (idx !== s.send_idx)
        s.keep(s.violations, `seq ${s.seq}: dispatch of task ${idx} but send_idx is ${s.send_idx}`);
      const indices = indicesOf(e, i) ?? null;
      s.tasks.set(
        idx,
        newTask(idx, workerOf(e, i), indices, nOf(e, i) ?? (indices ? indices.length : 0), s.t, s.epoch),
      );
      s.send_idx = idx + 1;
      s.outstanding_high = Math.max(s.outstanding_high, s.outstanding);
      if (s.outstanding > s.window)
        s.keep(s.violations, `seq ${s.seq}: ${s.outstanding} tasks outstanding, window is ${s.window}`);
    };
  },

  fetch_start(field) {
    const idxOf = field('idx'),
      workerOf = field('worker');
    return (s, e, i) => {
      const idx = idxOf(e, i);
      const w = s.worker(workerOf(e, i));
      w.current = idx;
      w.stuck = null;
      const task = s.tasks.get(idx);
      if (task !== undefined) task.fetch_start = s.t;
    };
  },

  fetch_end(field) {
    const idxOf = field('idx'),
      workerOf = field('worker'),
      dtOf = field('dt'),
      nbytesOf = field('nbytes');
    return (s, e, i) => {
      const idx = idxOf(e, i),
        nbytes = nbytesOf(e, i);
      const task = s.tasks.get(idx);
      const w = s.worker(workerOf(e, i));
      let dt = dtOf(e, i) ?? null;
      if (dt === null && task !== undefined && task.fetch_start !== null) dt = s.t - task.fetch_start;
      if (dt !== null) {
        w.fetch_times.push(dt);
        w.busy += dt;
      }
      w.nbytes += nbytes || 0;
      if (task !== undefined) w.samples += task.n;
      const episode = s.stuck_notes.get(w.id);
      if (episode !== undefined && episode[0].idx === idx) {
        // a stuck fetch that ended after all
        s.stuck_notes.delete(w.id);
        for (const note of episode) {
          note.recovered = dt ?? s.t - Number(note.t) + Number(note.elapsed);
        }
      }
      if (w.current === idx) {
        w.current = null;
        w.stuck = null;
        if (w.status === WorkerStatus.FETCHING || w.status === WorkerStatus.STUCK) w.status = WorkerStatus.IDLE;
      }
      // a worker's events may reach the stream after the pin thread's: never move a task back (hence not a table move)
      if (task !== undefined && (task.where === Where.INDEX_QUEUE || task.where === Where.FETCHING)) {
        task.where = Where.RESULT_QUEUE;
        task.fetch_end = s.t;
        task.nbytes = nbytes ?? null;
        s.result_queue.push(task.idx);
      }
    };
  },

  arrive(field) {
    const idxOf = field('idx');
    return (s, e, i) => {
      const task = /** @type {Task} */ (s.tasks.get(idxOf(e, i)));
      leaveResultQueue(s, task);
      task.arrived = s.t;
    };
  },

  parked() {
    return (s) => {
      s.parked_high = Math.max(s.parked_high, s.parked.length);
    };
  },

  yield(field) {
    const idxOf = field('idx'),
      waitOf = field('wait'),
      fromParkedOf = field('from_parked');
    return (s, e, i) => {
      const idx = idxOf(e, i),
        wait = waitOf(e, i);
      const task = s.tasks.get(idx);
      if (task === undefined || task.arrived === null)
        s.keep(s.violations, `seq ${s.seq}: yield of task ${idx} that has not arrived`);
      const inOrder = s.config.in_order ?? true;
      if (inOrder && idx !== s.rcvd_idx)
        s.keep(s.violations, `seq ${s.seq}: yield of task ${idx} while rcvd_idx is ${s.rcvd_idx}`);
      if (wait > 0 && !fromParkedOf(e, i) && s.parked.length) s.head_of_line_wait += parkedWait(s, wait);
      if (wait > 0 && task !== undefined && task.pin_start !== null) {
        // how much of the wait was pinning
        s.pin_wait += Math.max(0, Math.min(s.t, task.pin_end || s.t) - Math.max(s.t - wait, task.pin_start));
      }
      if (s.first_next_t === null) s.first_next_t = s.t - wait;
      if (s.epoch_batches === 0) s.startup_wait += wait;
      const others = s.pending_others;
      s.pending_others = 0;
      if (s.epoch_yield_t !== null) {
        // the step: the gap since the last batch, less other loaders' next()
        const gap = Math.max(0, s.t - wait - s.epoch_yield_t - others);
        s.step_gaps.push(gap);
        s.step_total += gap;
        s.other_wait += others;
        s.steps += s.pending_steps;
        s.step_h2d += s.pending_h2d;
        s.step_compute += s.pending_compute;
        s.step_h2d_pageable += s.pending_h2d_pageable;
      } else {
        s.between_others += others;
      }
      s.pending_steps = s.pending_h2d = s.pending_compute = s.pending_h2d_pageable = 0;
      if (s.consumer_note !== null) {
        // the loop was stuck in next(), and this batch ended the wait
        s.consumer_note.recovered = wait;
        s.consumer_note = null;
      }
      s.epoch_batches += 1;
      s.last_yield_t = s.epoch_yield_t = s.t;
      s.yield_order.push([s.epoch, idx]);
      if (s.yield_order.length > 2 * MAX_KEPT) s.yield_order.splice(0, MAX_KEPT); // keep the most recent
      s.release(idx);
      s.consumer_stuck = null;
    };
  },

  skip(field) {
    const idxOf = field('idx');
    return (s, e, i) => {
      const idx = idxOf(e, i);
      const task = s.tasks.get(idx);
      if (task !== undefined && task.arrived === null) {
        s.outstanding -= 1;
        leaveResultQueue(s, task);
      }
      s.release(idx);
    };
  },

  pin_start(field) {
    const idxOf = field('idx');
    return (s, e, i) => {
      const task = s.tasks.get(idxOf(e, i));
      if (task !== undefined && task.arrived === null) {
        remove(s.result_queue, task.idx);
        task.where = Where.PINNING;
        task.pin_start = s.t;
      }
    };
  },

  pin_end(field) {
    const idxOf = field('idx'),
      pinnedOf = field('pinned');
    return (s, e, i) => {
      if (pinnedOf(e, i) === false) s.unpinned += 1;
      const task = s.tasks.get(idxOf(e, i));
      if (task !== undefined && task.arrived === null) {
        task.where = Where.RESULT_QUEUE; // on the pinned-data queue, for the main process to take
        task.pin_end = s.t;
        s.result_queue.push(task.idx);
      }
    };
  },
};

/**
 * The reorder cost of one wait: the part of it after a later result had arrived and parked, which
 * in_order=False would have handed over at once (state.py _parked_wait).
 * @param {LoaderState} s @param {number} wait
 */
function parkedWait(s, wait) {
  let first = Infinity;
  for (const idx of s.parked) {
    const arrived = s.tasks.get(idx)?.arrived;
    if (arrived !== undefined && arrived !== null && arrived < first) first = arrived;
  }
  return first === Infinity ? 0 : Math.max(0, Math.min(wait, s.t - first));
}

/** @param {LoaderState} s @param {Task} task */
function leaveResultQueue(s, task) {
  remove(s.result_queue, task.idx);
  const w = s.workers.get(task.worker);
  if (w !== undefined) remove(w.queue, task.idx); // arrival seen before the worker's own events
}

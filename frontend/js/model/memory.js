// What the reducer keeps of `memory` samples, compactly: a name-by-name mirror of
// backend/loaderscope/model/memory.py (frontend/tests/reducer.test.js compares the two on the same streams).
// Per process the latest figures and the high-water marks, its copy-on-read growth, its RSS at each
// epoch's end; for the run the host's headroom, /dev/shm, the bytes of batches in flight and a
// decimated series for the page. A light sample (RSS and swap only) counts for what reads RSS; USS,
// PSS, shared, copy-on-read and the PSS sum come from full samples alone.

export const MAIN = -1; // the main process's key among the workers'
const MAX_POINTS = 512; // the series: halved (every other point kept) when full
const MAX_EPOCHS = 64; // RSS at epoch ends kept per process: the first and the most recent
const HOST_FIELDS = ['available', 'total', 'cgroup_limit', 'cgroup_usage', 'shm_used', 'shm_total', 'pinned'];

/**
 * @typedef {{key:number, pid:number, t:number, uss:number|null, pss:number|null, rss:number,
 *   shared:number|null, swap:number|null, high_uss:number, high_pss:number, high_rss:number, high_t:number,
 *   full_t:number, base_uss:number|null, base_shared:number|null, base_samples:number, grown:number, copied:number,
 *   copied_samples:number, epoch_rss:Array<[number, number]>}} Proc
 */

/**
 * @typedef {{available:number|null, total:number|null, cgroup_limit:number|null, cgroup_usage:number|null,
 *   shm_used:number|null, shm_total:number|null, pinned:number|null}} Host
 * @returns {Host}
 */
function emptyHost() {
  return {
    available: null,
    total: null,
    cgroup_limit: null,
    cgroup_usage: null,
    shm_used: null,
    shm_total: null,
    pinned: null,
  };
}

/** @param {number} key @param {number} pid @returns {Proc} */
function newProc(key, pid) {
  return {
    key,
    pid,
    t: 0,
    uss: null,
    pss: null,
    rss: 0,
    shared: null,
    swap: null,
    high_uss: 0,
    high_pss: 0,
    high_rss: 0,
    high_t: 0,
    full_t: 0,
    base_uss: null,
    base_shared: null,
    base_samples: 0,
    grown: 0,
    copied: 0,
    copied_samples: 0,
    epoch_rss: [],
  };
}

/** A producer's figure: an integer, else unknown (memory.py _int). @param {unknown} v @returns {number|null} */
function int(v) {
  return typeof v === 'number' && Number.isInteger(v) ? v : null;
}

/** @param {any} item */
function readable(item) {
  return (
    item !== null &&
    typeof item === 'object' &&
    !Array.isArray(item) &&
    int(item.pid) !== null &&
    int(item.rss) !== null
  );
}

/** @param {any} item */
function keyOf(item) {
  const worker = int(item.worker);
  return worker !== null ? worker : MAIN;
}

/** What the host has left: the smaller of MemAvailable and the cgroup's limit less its working set. @param {any} e */
export function headroom(e) {
  const room = [];
  if (e.available !== undefined && e.available !== null) room.push(e.available);
  if (
    e.cgroup_limit !== undefined &&
    e.cgroup_limit !== null &&
    e.cgroup_usage !== undefined &&
    e.cgroup_usage !== null
  ) {
    room.push(Math.max(0, e.cgroup_limit - e.cgroup_usage));
  }
  return room.length ? Math.min(...room) : null;
}

/** @param {Proc} proc @param {number} fetched */
function copyOnRead(proc, fetched) {
  if (proc.uss === null || proc.shared === null) return;
  if (proc.base_uss === null || proc.base_shared === null) {
    proc.base_uss = proc.uss;
    proc.base_shared = proc.shared;
    proc.base_samples = fetched;
    return;
  }
  const grown = proc.uss - proc.base_uss;
  if (grown > proc.grown) {
    proc.grown = grown;
    proc.copied_samples = fetched - proc.base_samples;
    proc.copied = Math.max(0, Math.min(grown, proc.base_shared - proc.shared));
  }
}

export class MemoryModel {
  constructor() {
    this.samples = 0;
    this.full_samples = 0;
    /** @type {string|null} */
    this.source = null;
    this.t = 0;
    this.full_t = 0;
    this.cost = 0;
    /** @type {Map<number, Proc>} */
    this.procs = new Map();
    /** @type {Host} the latest sample's host figures */
    this.host = emptyHost();
    /** @type {number|null} */
    this.headroom = null;
    /** @type {number|null} */
    this.headroom_low = null;
    this.headroom_low_t = 0;
    this.shm_high = 0;
    /** @type {number|null} */
    this.shm_free_low = null;
    this.total_pss = 0;
    this.total_high = 0;
    this.total_high_t = 0;
    this.in_flight = 0;
    this.in_flight_high = 0;
    this.in_flight_high_t = 0;
    this.in_flight_batches = 0;
    this.in_flight_pss = 0;
    // a light point's PSS sum, USS and shared: null
    /** @type {Array<[number, number|null, number, number|null, Array<[number, number|null, number|null, number]>]>} */
    this.series = [];
    this.stride = 1;
    this.light_stride = 1;
    /** @type {number|null} the epochs done at an epoch's end that no sample has followed yet */
    this.ended = null;
  }

  /**
   * One sample, with the bytes and batches in flight and each worker's samples fetched so far.
   * @param {any} e @param {[number, number]} inFlight @param {Map<number, number>} fetched
   */
  apply(e, inFlight, fetched) {
    const full = !e.light;
    this.samples += 1;
    this.source = e.source ?? null;
    this.t = e.t;
    this.cost += e.cost || 0;
    let total = 0;
    const sampled = (Array.isArray(e.procs) ? e.procs : []).filter(readable);
    for (const item of sampled) {
      const proc = this.proc(item, full);
      total += proc.pss || 0;
      if (full && proc.key !== MAIN) copyOnRead(proc, fetched.get(proc.key) ?? 0);
      if (this.ended !== null) {
        if (proc.epoch_rss.length >= MAX_EPOCHS) proc.epoch_rss.splice(1, 1);
        proc.epoch_rss.push([this.ended, proc.rss + (proc.swap || 0)]);
      }
    }
    this.ended = null;
    if (full) {
      this.full_samples += 1;
      this.full_t = this.t;
      this.total_pss = total;
      if (total > this.total_high) {
        this.total_high = total;
        this.total_high_t = this.t;
      }
    }
    this.hostFigures(e);
    this.in_flight = inFlight[0];
    if (inFlight[0] > this.in_flight_high) {
      this.in_flight_high = inFlight[0];
      this.in_flight_high_t = this.t;
      this.in_flight_batches = inFlight[1];
      this.in_flight_pss = this.total_pss;
    }
    this.point(sampled, full);
  }

  /** @param {any} item @param {boolean} full @returns {Proc} */
  proc(item, full) {
    const key = keyOf(item);
    let proc = this.procs.get(key);
    if (proc === undefined) {
      proc = newProc(key, item.pid);
      this.procs.set(key, proc);
    } else if (proc.pid !== item.pid) {
      // the worker's next process: its own base, its own epochs
      proc.pid = item.pid;
      proc.base_uss = proc.base_shared = null;
      proc.uss = proc.pss = proc.shared = null; // the last process's, until this one's full sample
      proc.epoch_rss = [];
    }
    proc.t = this.t;
    proc.rss = item.rss;
    const swap = int(item.swap);
    if (full || swap !== null) proc.swap = swap; // psutil's light sample has no swap: the full one's holds
    if (full) {
      proc.uss = int(item.uss);
      proc.pss = int(item.pss);
      proc.shared = int(item.shared);
      proc.full_t = this.t;
      proc.high_uss = Math.max(proc.high_uss, proc.uss || 0);
      proc.high_pss = Math.max(proc.high_pss, proc.pss || 0);
    }
    if (proc.rss > proc.high_rss) {
      proc.high_rss = proc.rss;
      proc.high_t = this.t;
    }
    return proc;
  }

  /** @param {any} e */
  hostFigures(e) {
    this.host = /** @type {Host} */ (Object.fromEntries(HOST_FIELDS.map((name) => [name, e[name] ?? null])));
    this.headroom = headroom(e);
    if (this.headroom !== null && (this.headroom_low === null || this.headroom < this.headroom_low)) {
      this.headroom_low = this.headroom;
      this.headroom_low_t = this.t;
    }
    const used = e.shm_used,
      size = e.shm_total;
    if (used !== undefined && used !== null && size !== undefined && size !== null) {
      this.shm_high = Math.max(this.shm_high, used);
      const free = size - used;
      this.shm_free_low = this.shm_free_low === null ? free : Math.min(this.shm_free_low, free);
    }
  }

  /**
   * Every stride-th full sample and every light_stride-th light one join the series; a full series keeps
   * every other point of the kind it holds more of, that kind's stride doubled.
   * @param {any[]} sampled @param {boolean} full
   */
  point(sampled, full) {
    const count = full ? this.full_samples : this.samples - this.full_samples;
    if ((count - 1) % (full ? this.stride : this.light_stride)) return;
    this.series.push([
      this.t,
      this.headroom,
      this.in_flight,
      full ? this.total_pss : null,
      sampled.map((item) => {
        const p = /** @type {Proc} */ (this.procs.get(keyOf(item)));
        return /** @type {[number, number|null, number|null, number]} */ (
          full ? [p.key, p.uss, p.shared, p.rss] : [p.key, null, null, p.rss]
        );
      }),
    ]);
    if (this.series.length >= MAX_POINTS) {
      const lights = this.series.filter((point) => point[3] === null).length;
      const halveFull = lights * 2 <= this.series.length;
      const kind = [0, 0]; // the points of each kind seen so far: every second one of the halved kind goes
      this.series = this.series.filter((point) => {
        const ofFull = point[3] !== null;
        kind[+ofFull] += 1;
        return ofFull !== halveFull || kind[+ofFull] % 2 === 1;
      });
      if (halveFull) this.stride *= 2;
      else this.light_stride *= 2;
    }
  }

  /**
   * `epochs` have ended: the next sample notes each process's RSS (with swap), what the epoch left.
   * @param {number} epochs
   */
  epochEnd(epochs) {
    this.ended = epochs;
  }

  /**
   * A dead worker's last sample and the host's headroom in the latest sample.
   * @param {number} worker
   * @param {unknown} pid
   */
  evidence(worker, pid) {
    const proc = this.procs.get(worker);
    if (proc === undefined || (pid !== undefined && pid !== null && pid !== proc.pid)) return null;
    return {
      t: proc.t,
      rss: proc.rss,
      uss: proc.uss,
      headroom: this.headroom,
      available: this.host.available ?? null,
      cgroup_limit: this.host.cgroup_limit ?? null,
    };
  }
}

/**
 * The mean growth of a process's RSS per epoch when it grew at every epoch end noted (at least three).
 * @param {Proc} proc
 */
export function leakPerEpoch(proc) {
  const marks = proc.epoch_rss;
  if (marks.length < 3 || marks.some((b, i) => i > 0 && b[1] <= marks[i - 1][1])) return null;
  const first = marks[0],
    last = marks[marks.length - 1];
  return (last[1] - first[1]) / (last[0] - first[0]);
}

/**
 * The loader's memory (PSS summed) per second over the second half of its sampled time, and the span sampled.
 * @param {MemoryModel} m
 */
export function trend(m) {
  const full = m.series.filter((p) => p[3] !== null); // a light point has no PSS
  if (!full.length) return /** @type {[number|null, number]} */ ([null, 0]);
  const firstT = full[0][0];
  const span = m.full_t - firstT;
  const middle = full.find((p) => p[0] >= firstT + span / 2);
  if (middle === undefined || m.full_t - middle[0] <= 0) return /** @type {[number|null, number]} */ ([null, span]);
  const pss = /** @type {number} */ (middle[3]);
  return /** @type {[number|null, number]} */ ([(m.total_pss - pss) / (m.full_t - middle[0]), span]);
}

/** @param {Proc} proc */
function procSummary(proc) {
  const marks = proc.epoch_rss;
  return {
    worker: proc.key === MAIN ? null : proc.key,
    pid: proc.pid,
    t: proc.t,
    uss: proc.uss,
    pss: proc.pss,
    rss: proc.rss,
    shared: proc.shared,
    swap: proc.swap,
    high_uss: proc.high_uss,
    high_pss: proc.high_pss,
    high_rss: proc.high_rss,
    high_t: proc.high_t,
    full_t: proc.full_t,
    grown: proc.grown,
    copied: proc.copied,
    copied_samples: proc.copied_samples,
    epochs: marks.length ? marks[marks.length - 1][0] - marks[0][0] : 0,
    epoch_first: marks.length ? marks[0][1] : null,
    epoch_last: marks.length ? marks[marks.length - 1][1] : null,
    leak_per_epoch: leakPerEpoch(proc),
  };
}

/**
 * The memory figures of the reducer's summary (null before the first sample; memory.py summary).
 * @param {MemoryModel} m
 */
export function memorySummary(m) {
  if (!m.samples) return null;
  const [rate, span] = trend(m);
  const main = m.procs.get(MAIN);
  return {
    source: m.source,
    samples: m.samples,
    full_samples: m.full_samples,
    t: m.t,
    cost: m.cost,
    main: main !== undefined ? procSummary(main) : null,
    workers: [...m.procs.entries()]
      .filter(([key]) => key !== MAIN)
      .sort((a, b) => a[0] - b[0])
      .map(([, p]) => procSummary(p)),
    ...m.host,
    headroom: m.headroom,
    headroom_low: m.headroom_low,
    headroom_low_t: m.headroom_low_t,
    shm_high: m.shm_high,
    shm_free_low: m.shm_free_low,
    total_pss: m.total_pss,
    total_high: m.total_high,
    total_high_t: m.total_high_t,
    in_flight: m.in_flight,
    in_flight_high: m.in_flight_high,
    in_flight_high_t: m.in_flight_high_t,
    in_flight_batches: m.in_flight_batches,
    in_flight_pss: m.in_flight_pss,
    growth_per_s: rate,
    trend_span: span,
    headroom_s: rate !== null && rate > 0 && m.headroom !== null ? m.headroom / rate : null,
  };
}

/**
 * The series' point in force at time t: the last one sampled at or before t (-1: none yet).
 * @param {MemoryModel['series']} series @param {number} t
 */
export function pointAt(series, t) {
  let lo = 0,
    hi = series.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (series[mid][0] <= t) lo = mid + 1;
    else hi = mid;
  }
  return lo - 1;
}

/**
 * Process `key`'s figures in the series' point `i` (null: not sampled in it).
 * @param {MemoryModel['series']} series @param {number} i @param {number} key
 * @returns {{t: number, uss: number|null, shared: number|null, rss: number}|null}
 */
export function procAt(series, i, key) {
  const point = series[i];
  const item = point?.[4].find((p) => p[0] === key);
  return item === undefined ? null : { t: point[0], uss: item[1], shared: item[2], rss: item[3] };
}

/**
 * The scale of the timeline's memory lanes: the highest RSS of any process in the series (0: none).
 * @param {MemoryModel['series']} series
 */
export function rssScale(series) {
  let top = 0;
  for (const point of series) for (const item of point[4]) top = Math.max(top, item[3]);
  return top;
}

/** The scale of the headroom lane: its highest value in the series (0: none). @param {MemoryModel['series']} series */
export function headroomScale(series) {
  let top = 0;
  for (const point of series) top = Math.max(top, point[1] ?? 0);
  return top;
}

/**
 * Process `key`'s figures in the last full point at or before `i` (null: none): what the USS track holds
 * through light points, which have RSS alone.
 * @param {MemoryModel['series']} series @param {number} i @param {number} key
 */
export function fullProcAt(series, i, key) {
  for (let j = i; j >= 0; j--) {
    if (series[j][3] === null) continue;
    const p = procAt(series, j, key);
    if (p !== null && p.uss !== null) return p;
  }
  return null;
}

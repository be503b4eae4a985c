// Two runs' memory side by side, for the compare view: each process's figures at its last sample and its
// high-water marks, the host's headroom and the loader's totals, and each run's memory verdicts in the
// run page's words. The figures are memorySummary's (the mirror of stats.summary()['memory']), as
// `loaderscope compare` prints them (cli/compare.py print_memory_pair); frontend/tests/memory-compare.test.js
// checks them against Python on the same events. Pure: no DOM.

import { memorySummary } from './memory.js';
import { findings, noteFinding } from './diagnosis.js';

/** The findings that are about memory (diagnosis.py's codes): the verdicts of its _memory_findings, /dev/shm. */
const MEMORY_CODES = new Set(['copy_on_read', 'memory_leak', 'headroom', 'shm_low', 'in_flight', 'shm_full']);
// a worker killed by these is a memory verdict too: the OOM killer's SIGKILL (with the worker's last
// figures as evidence), a full /dev/shm's SIGBUS
const MEMORY_SIGNALS = ['SIGKILL', 'SIGBUS'];

/** @typedef {NonNullable<ReturnType<typeof memorySummary>>} MemorySummary */
/** @typedef {MemorySummary['workers'][number]} ProcSummary */
/** @typedef {{uss: number|null, pss: number|null, rss: number}} Figures */
/** @typedef {{last: Figures, high: Figures}} ProcFigures */
/**
 * @typedef {{name: string, worker: number|null, a: ProcFigures|null, b: ProcFigures|null}} ProcRow
 * a process of either run (null: that run has no such process, or no memory samples)
 * @typedef {{key: HostKey, label: string, a: number|null, b: number|null}} HostRow
 * @typedef {'headroom'|'headroom_low'|'total_high'|'in_flight_high'|'shm_high'} HostKey
 * @typedef {{samples: number, source: string|null, verdicts: string[]}|null} MemorySide
 * null: the run has no memory samples
 * @typedef {{sides: [MemorySide, MemorySide], procs: ProcRow[], host: HostRow[]}} MemoryComparison
 */

/** @type {ReadonlyArray<[HostKey, string]>} the run's figures beside the processes' (memorySummary's keys) */
export const HOST_ROWS = [
  ['headroom', 'host headroom at the end'],
  ['headroom_low', 'host headroom at its lowest'],
  ['total_high', 'PSS of all processes, at its high'],
  ['in_flight_high', 'batches in flight, at the most'],
  ['shm_high', '/dev/shm used, at the fullest'],
];

/** @param {ProcSummary} p @returns {ProcFigures} */
function figures(p) {
  return { last: { uss: p.uss, pss: p.pss, rss: p.rss }, high: { uss: p.high_uss, pss: p.high_pss, rss: p.high_rss } };
}

/**
 * A run's figure for a host row; null when the run has no memory samples or its host did not give it
 * (/dev/shm's use is 0 in the summary when its size is unknown: said as unknown).
 * @param {MemorySummary|null} m @param {HostKey} key
 */
function hostFigure(m, key) {
  if (m === null || (key === 'shm_high' && !m.shm_total)) return null;
  return m[key];
}

/** A run's processes by name, the main process first: `main`, `worker 0`, … @param {MemorySummary|null} m */
function procsOf(m) {
  /** @type {Map<string, ProcSummary>} */
  const out = new Map();
  if (m === null) return out;
  for (const p of m.main ? [m.main, ...m.workers] : m.workers)
    out.set(p.worker === null ? 'main' : `worker ${p.worker}`, p);
  return out;
}

/**
 * The memory verdicts of a run, in the diagnosis's order and words (diagnosis.js findings()); the mirror
 * of diagnosis.py's memory_findings, which `loaderscope compare --format json|csv` gives.
 * @param {import('./reducer.js').LoaderState} s
 */
export function memoryVerdicts(s) {
  const killed = new Set(
    s.notes
      .filter((n) => n.kind === 'worker_died' && MEMORY_SIGNALS.includes(String(n.signal)))
      .map((n) => noteFinding(n)?.[1]),
  );
  return findings(s)
    .filter((f) => MEMORY_CODES.has(f.code) || (f.code === 'worker_died' && killed.has(f.text)))
    .map((f) => f.text);
}

/**
 * Both runs' memory: the processes of either (main first, then the workers by id), the host's rows, and
 * each run's sample count, source and verdicts.
 * @param {import('./reducer.js').LoaderState} a @param {import('./reducer.js').LoaderState} b
 * @returns {MemoryComparison}
 */
export function compareMemory(a, b) {
  const summaries = [memorySummary(a.memory), memorySummary(b.memory)];
  const [pa, pb] = summaries.map(procsOf);
  const order = (/** @type {string} */ name) => (name === 'main' ? -1 : Number(name.slice('worker '.length)));
  const names = [...new Set([...pa.keys(), ...pb.keys()])].sort((x, y) => order(x) - order(y));
  const procs = names.map((name) => {
    const [x, y] = [pa.get(name), pb.get(name)];
    return {
      name,
      worker: name === 'main' ? null : order(name),
      a: x === undefined ? null : figures(x),
      b: y === undefined ? null : figures(y),
    };
  });
  const host = HOST_ROWS.map(([key, label]) => ({
    key,
    label,
    a: hostFigure(summaries[0], key),
    b: hostFigure(summaries[1], key),
  }));
  const side = (/** @type {MemorySummary|null} */ m, /** @type {import('./reducer.js').LoaderState} */ s) =>
    m === null ? null : { samples: m.samples, source: m.source, verdicts: memoryVerdicts(s) };
  return { sides: [side(summaries[0], a), side(summaries[1], b)], procs, host };
}

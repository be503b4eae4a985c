// The advice on num_workers for a run (GET /api/runs/{id}/advice, backend/loaderscope/sim/advice.py):
// the smallest worker count at which the simulator fitted to the run says the training loop is fed.
// Its sentence word for word as backend/loaderscope/model/advicetext.py's advice_text says it, with Python's
// number formatting (frontend/tests/advice.test.js compares the two on the same advice).

import { pyFixed } from './diagnosis.js';

/**
 * The advice as the server answers it (sim.advice.Advice).
 * @typedef {{status: 'keep_up'|'limited'|'more'|'off'|'none', workers: number|null, batches_per_s: number|null,
 *   waiting: number|null, recorded_workers: number|null, recorded_batches_per_s: number|null,
 *   replayed_batches_per_s: number|null, error: number|null, setting: Record<string, unknown>,
 *   step_ms: number|null, rows: import('./sweep.js').SweepRow[], reason: string|null, memory?: string|null}} Advice
 */

/** Batches/s with two decimals below 10 (0.96, 9.58), one from 10 (95.8). @param {number} x */
const rate = (x) => pyFixed(x, x < 10 ? 2 : 1);
/** f'{x:.0%}'. @param {number} x */
const percent = (x) => `${pyFixed(x * 100, 0)}%`;
/** f'{x:+.1%}': Python keeps the sign of a negative number that rounds to zero. @param {number} x */
const signedPercent = (x) => `${x < 0 || Object.is(x, -0) ? '-' : '+'}${pyFixed(Math.abs(x) * 100, 1)}%`;

/** Whether the advice warns (no count keeps the loop fed, or no count at all). @param {Advice} a */
export const adviceWarns = (a) => a.status !== 'keep_up';

/**
 * The advice in one sentence, as advice_text says it: whose prediction it is, and what the simulator
 * leaves out (it gives each process a core of its own). @param {Advice} a
 */
export function adviceText(a) {
  if (a.status === 'off' || a.status === 'none') return `no advice on num_workers: ${a.reason}`;
  const workers = a.workers,
    r = rate(a.batches_per_s || 0);
  const waiting = `the training loop waiting ${percent(a.waiting || 0)} of the time after each epoch's first batch`;
  const recorded =
    `against ${rate(a.recorded_batches_per_s || 0)} batches/s recorded with ` +
    `num_workers=${a.recorded_workers} (its replay of that setting: ` +
    `${rate(a.replayed_batches_per_s || 0)}, ${signedPercent(a.error || 0)})`;
  const said =
    a.status === 'keep_up'
      ? `num_workers=${workers} would keep up: ${r} batches/s, ${waiting}, ${recorded}`
      : a.status === 'more'
        ? `even num_workers=${workers} would not keep up: ${r} batches/s and still rising, ` +
          `${waiting}, ${recorded}; it would take more workers than it tried, or cheaper samples`
        : `num_workers=${workers} comes within 2% of the fastest count it tried: ${r} ` +
          `batches/s, ${waiting}, ${recorded}; more workers would not make it faster`;
  const memory = a.memory ? `; but it would not fit in memory: ${a.memory}` : '';
  return `the simulator fitted to this run predicts ${said}, giving each process a core of its own${memory}`;
}

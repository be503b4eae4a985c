// The diagnosis: what a loader's state means, in plain words, most important first. A sentence-by-
// sentence mirror of backend/loaderscope/diagnosis.py, with Python's number formatting, so the page
// and the API say the same (frontend/tests/reducer.test.js compares them on the same streams).

import { summary, userFrame } from './reducer.js';
import { say } from './wording.gen.js';

/** @typedef {import('./reducer.js').LoaderState} LoaderState */
/** @typedef {ReturnType<typeof summary>} Stats */

/**
 * format(x, f'.{d}f') as Python prints it: like toFixed, except that an exact tie (11.25 to one
 * digit) goes to the even digit, as Python's correctly rounded formatting does.
 * @param {unknown} x a number (anything else prints as Python would not, but is shown) @param {number} d
 */
export function pyFixed(x, d) {
  const v = Number(x);
  if (!Number.isFinite(v)) return String(v);
  const long = Math.abs(v).toFixed(Math.min(100, d + 25));
  const cut = long.indexOf('.') + 1 + d;
  const rest = long.slice(cut);
  if (!/^50*$/.test(rest)) return v.toFixed(d);
  const kept = long.slice(0, d ? cut : cut - 1); // the truncated digits
  const last = Number(kept.replace('.', '').slice(-1));
  const down = last % 2 === 0;
  const out = down ? kept : (Math.abs(v) + 10 ** -d / 2).toFixed(d);
  return (v < 0 && Number(out) !== 0 ? '-' : '') + out;
}

const f1 = (/** @type {unknown} */ x) => pyFixed(x, 1);
const pct = (/** @type {number} */ x) => `${pyFixed(x * 100, 0)}%`;

/** @param {import('./types.js').Frame[]|null|undefined} stack */
function where(stack) {
  const frame = userFrame(stack);
  if (!frame) return '';
  const name = String(frame.file).split('/').pop();
  return ` at ${name}:${frame.line} in ${frame.function}: ${frame.code || '?'}`;
}

/** @param {{pos?: number|null, sample?: unknown}} n */
function sample(n) {
  if (n.sample === undefined || n.sample === null) return '';
  return `, sample ${(n.pos ?? 0) + 1} (index ${n.sample})`;
}

export const SHM_SIGNS = ['bus error', 'unable to write to file', 'no space left on device', 'sigbus', '/dev/shm'];

/** A note (stuck, died, timeout, …) as a finding, or null for a note that is none. @param {import('./types.js').LoaderEvent} note */
export function noteFinding(note) {
  const n = /** @type {import('./types.js').KnownEvent} */ (note); // a known kind's required fields were checked
  const kind = n.kind;
  if (kind === 'worker_died') {
    const how = n.signal || `exit code ${pyStr(n.exitcode)}`;
    const holding = n.idx !== undefined && n.idx !== null ? ` while fetching task ${n.idx}${sample(n)}` : '';
    const oom = n.signal === 'SIGKILL' ? " (SIGKILL is what the kernel's OOM killer sends: check memory)" : '';
    const shm = n.signal === 'SIGBUS' ? ' (SIGBUS in a worker usually means /dev/shm is full: enlarge it or use file_system sharing)' : '';
    return `worker ${n.worker} (pid ${pyStr(n.pid)}) died by ${how}${holding}${oom}${shm}`;
  }
  if (kind === 'worker_stuck') {
    return `stuck: worker ${n.worker} has been fetching task ${n.idx}${sample(n)} for ${f1(n.elapsed)} s ` +
      `(threshold ${f1(n.threshold ?? 0)} s)${where(n.stack)}`;
  }
  if (kind === 'consumer_stuck') {
    const held = n.held_by !== undefined && n.held_by !== null ? ` held by worker ${n.held_by}` : '';
    return `stuck: the training loop has waited ${f1(n.elapsed)} s inside next() for task ${pyStr(n.waiting_for)}${held}${where(n.stack)}`;
  }
  if (kind === 'timeout') {
    const busy = (n.workers || []).filter((w) => w.idx !== undefined && w.idx !== null)
      .map((w) => `worker ${w.worker} on task ${w.idx}${sample(w)} for ${f1(w.elapsed)} s`);
    const doing = busy.length ? busy.join('; ') : 'every worker was idle';
    return `timeout: no batch arrived within ${pyNum(n.seconds)} s; at that moment ${doing}`;
  }
  if (kind === 'run_end' && n.error) return `the script died of ${n.error.type}: ${n.error.message}`;
  if (kind === 'epoch_resume') {
    return `epoch ${n.epoch} resumed from a checkpoint at batch ${n.batch} (load_state_dict); ` +
      `${n.replayed ?? 0} batch(es) were fetched again to restore it`;
  }
  if (kind === 'probe_error') {
    return `loaderscope's probe failed in ${n.where} (${n.type}: ${n.message}); training went ` +
      'on, but this run may miss events';
  }
  return null;
}

/** str() of a JSON value as Python prints it (None, floats with a point). @param {unknown} v */
function pyStr(v) {
  if (v === undefined || v === null) return 'None';
  if (typeof v === 'number') return pyNum(v);
  return String(v);
}

/** JSON cannot tell 2.0 from 2, so a float that happens to be whole prints like an int here. @param {number} v */
function pyNum(v) {
  return String(v);
}

export const MIN_STEP = 0.002;
export const INPUT_BOUND = 0.2; // waiting for data more than this share of the time makes loading the bottleneck

const ms = (/** @type {number} */ seconds) => f1(seconds * 1000);

/** @param {Stats} stats @param {number} workers num_workers */
function inputBoundFinding(stats, workers) {
  const share = stats.input_bound, rate = stats.epoch_batches_per_s, steady = stats.input_bound_steady;
  const step = stats.step_time; // the training loop's own time per batch, within epochs
  const startup = stats.startup_wait >= 0.05 ? say('waited.startup', { startup: pyFixed(stats.startup_wait, 2) }) : '';
  let text = say('waited', {
    share: pct(share), wait: pyFixed(stats.consumer_wait, 2), wall: pyFixed(stats.epoch_wall, 2), startup,
  });
  if (stats.between_epochs >= 0.05) text += say('waited.outside', { outside: pyFixed(stats.between_epochs, 2) });
  if (steady <= INPUT_BOUND) {
    const after = share > INPUT_BOUND ? say('step_bound.after', { steady: pct(steady) }) : '';
    const per = step !== null ? say('step_bound.step', { step: ms(step) }) : '';
    return text + say('step_bound', { after, step: per, rate: f1(rate) });
  }
  const who = workers ? say('n.workers', { n: workers }) : say('loading_bound.main');
  text += say('loading_bound', { workers: who, rate: f1(rate) });
  const task = stats.median_task;
  if (step !== null && step >= MIN_STEP && task > 0) {
    const needed = Math.ceil(task / step);
    text += say('keep_up', {
      consume: f1(1 / step), task: ms(task), needed: say('n.workers', { n: needed }), step: ms(step),
    });
    if (needed <= workers) {
      text += say('keep_up.have');
      /** @type {Array<[string, number]>} */
      const signs = [['see.stragglers', stats.stragglers.length], ['see.reorder', stats.out_of_order]];
      const see = signs
        .filter(([, shown]) => shown).map(([key]) => say(key));
      if (see.length) text += say('keep_up.see', { what: see.join(', ') });
    }
  }
  return text;
}

/**
 * What cut the run short, if anything did: then its timings say nothing about the pipeline's pace.
 * @param {LoaderState} s @param {Stats} stats
 */
function failure(s, stats) {
  const kinds = new Set(s.notes.map((n) => n.kind));
  const why = [['died', kinds.has('worker_died')], ['stuck', kinds.has('worker_stuck')], ['error', stats.errors > 0],
    ['consumer_stuck', kinds.has('consumer_stuck')], ['timeout', kinds.has('timeout')]]
    .filter(([, seen]) => seen).map(([name]) => say(`why.${name}`));
  return why.length ? why.join(', ') : null;
}

/** @param {Stats} stats */
function peeksFinding(stats) {
  return say('peeks', {
    iterators: say('n.iterators', { n: stats.peeks }), batches: say('n.batches', { n: stats.peek_batches }),
    starts: say('n.starts', { n: stats.peek_worker_starts }), wait: pyFixed(stats.peek_wait, 2),
  });
}

export const PICKLE_HEAVY_BYTES = 1_000_000;

/** Findings in plain words, most important first (state.py diagnosis()). @param {LoaderState} s @returns {string[]} */
export function diagnosis(s) {
  const stats = summary(s);
  const findings = [];
  for (const err of s.errors) {
    const at = err.idx !== undefined && err.idx !== null
      ? ` in task ${err.idx} (worker ${pyStr(err.worker)}, samples ${pyList(err.indices)})` : '';
    findings.push(`error${at}: ${err.type}: ${err.message}`);
    const text = String(err.traceback || err.message).toLowerCase();
    if (SHM_SIGNS.some((sign) => text.includes(sign))) {
      findings.push("shared memory (/dev/shm) is exhausted: enlarge it (docker --shm-size) or call torch.multiprocessing.set_sharing_strategy('file_system')");
    }
  }
  for (const n of s.notes) {
    const text = noteFinding(n);
    if (text) findings.push(text);
  }
  if (stats.batches) {
    const why = failure(s, stats);
    findings.push(why ? say('no_verdict', { why }) : inputBoundFinding(stats, s.config.num_workers || 0));
  }
  if (stats.peeks) findings.push(peeksFinding(stats));
  for (const slow of stats.stragglers) {
    findings.push(say('straggler', {
      worker: slow.worker, factor: f1(slow.factor), median: pyFixed(slow.median * 1000, 0), others: pyFixed(slow.others * 1000, 0),
    }));
  }
  if (stats.out_of_order) {
    findings.push(say('reorder', {
      results: say('n.results', { n: stats.out_of_order }), high: stats.buffer_high, hol: pyFixed(stats.head_of_line_wait, 2),
    }));
  }
  if (s.config.pin_memory && !(s.config.pin_memory_active ?? false) && s.mode === 'real') {
    findings.push('pin_memory=True, but this machine has no accelerator, so torch silently turned pinning ' +
      'off: batches stay in pageable memory and no pin-memory thread runs');
  }
  const perBatch = stats.pickled_bytes / Math.max(stats.batches, 1);
  if (perBatch >= PICKLE_HEAVY_BYTES && s.mode !== 'sim' && (s.config.num_workers || 0) > 0) {
    findings.push(`batches cross from the workers as ${f1(perBatch / 1e6)} MB of pickled data per batch ` +
      `(numpy arrays or Python objects; pickling a sampled batch took ${f1(stats.pickle_s * 1000)} ms): ` +
      'return tensors from collate_fn so they travel through shared memory');
  }
  if (stats.pin_mb_per_s) {
    findings.push(`pinning: ${f1(stats.pin_bytes / 1e6)} MB copied to page-locked memory at ` +
      `${pyFixed(stats.pin_mb_per_s, 0)} MB/s; ${pct(stats.pin_wait_share)} of the consumer's wait ` +
      'was spent behind the pin thread');
  }
  const split = stats.consumer_split;
  if (split) {
    findings.push(`per batch the training loop waited ${pyFixed(split.wait * 1000, 2)} ms for data, copied to ` +
      `${pyStr(split.device)} in ${pyFixed(split.h2d * 1000, 2)} ms and computed ${pyFixed(split.compute * 1000, 2)} ms`);
    if (split.h2d_pageable && split.h2d > 0) {
      findings.push(`pinned memory pays: the same batch copied from pageable memory took ${pyFixed(split.h2d_pageable * 1000, 2)} ms, ` +
        `${f1(split.h2d_pageable / split.h2d)}× the pinned copy's ${pyFixed(split.h2d * 1000, 2)} ms`);
    }
  }
  if (s.unpinned) {
    findings.push(say('unpinned', { batches: say('n.batches', { n: s.unpinned }) }));
  }
  return findings;
}

/** @param {unknown} v */
function pyList(v) {
  if (v === undefined || v === null) return 'None';
  if (Array.isArray(v)) return `[${v.map((x) => (typeof x === 'string' ? `'${x}'` : pyStr(x))).join(', ')}]`;
  return pyStr(v);
}

// The diagnosis: what a loader's state means, in plain words, most important first. A sentence-by-
// sentence mirror of backend/loaderscope/model/diagnosis.py, with Python's number formatting, so the page
// and the API say the same (frontend/tests/reducer.test.js compares them on the same streams).

import { summary, userFrame } from './stats.js';
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

/**
 * A note (stuck, died, timeout, …) as [code, text], or null for a note that is none (diagnosis.py _note_finding).
 * @param {import('./types.js').LoaderEvent} note @returns {[string, string]|null}
 */
export function noteFinding(note) {
  // a known kind's required fields were checked
  const n = /** @type {import('./types.js').KnownEvent & {recovered?: number}} */ (note);
  const kind = n.kind;
  if (kind === 'worker_died') {
    const how = n.signal || `exit code ${pyStr(n.exitcode)}`;
    const holding = n.idx !== undefined && n.idx !== null ? ` while fetching task ${n.idx}${sample(n)}` : '';
    const oom = n.signal === 'SIGKILL' ? killed(n) : '';
    const shm =
      n.signal === 'SIGBUS'
        ? ' (SIGBUS in a worker usually means /dev/shm is full: enlarge it or use file_system sharing)'
        : '';
    return ['worker_died', `worker ${n.worker} (pid ${pyStr(n.pid)}) died by ${how}${holding}${oom}${shm}`];
  }
  if (kind === 'worker_stuck') {
    if (n.recovered !== undefined && n.recovered !== null) {
      return [
        'stuck_recovered',
        `recovered: worker ${n.worker} was stuck on task ${n.idx}${sample(n)}${past(n)}` +
          `${where(n.stack)}, then finished it: the fetch took ${f1(n.recovered)} s`,
      ];
    }
    const threshold = n.threshold !== undefined && n.threshold !== null ? ` (threshold ${f1(n.threshold)} s)` : '';
    return [
      'stuck',
      `stuck: worker ${n.worker} has been fetching task ${n.idx}${sample(n)} for ${f1(n.elapsed)} s` +
        `${threshold}${where(n.stack)}`,
    ];
  }
  if (kind === 'consumer_stuck') {
    const held = n.held_by !== undefined && n.held_by !== null ? ` held by worker ${n.held_by}` : '';
    const task = n.waiting_for !== undefined && n.waiting_for !== null ? ` for task ${n.waiting_for}` : '';
    if (n.recovered !== undefined && n.recovered !== null) {
      return [
        'consumer_stuck_recovered',
        `recovered: the training loop waited ${f1(n.recovered)} s inside next()${task}${held} ` +
          `(stuck${past(n)}${where(n.stack)}), then got its batch`,
      ];
    }
    return [
      'consumer_stuck',
      `stuck: the training loop has waited ${f1(n.elapsed)} s inside next()${task}${held}${where(n.stack)}`,
    ];
  }
  if (kind === 'timeout') {
    const busy = (n.workers || [])
      .filter((w) => w.idx !== undefined && w.idx !== null)
      .map((w) => `worker ${w.worker} on task ${w.idx}${sample(w)} for ${f1(w.elapsed)} s`);
    const doing = busy.length ? busy.join('; ') : 'every worker was idle';
    return ['timeout', `timeout: no batch arrived within ${pyNum(n.seconds)} s; at that moment ${doing}`];
  }
  if (kind === 'run_end' && n.error) return ['script_died', `the script died of ${n.error.type}: ${n.error.message}`];
  if (kind === 'epoch_resume') {
    return [
      'epoch_resume',
      `epoch ${n.epoch} resumed from a checkpoint at batch ${n.batch} (load_state_dict); ` +
        `${n.replayed ?? 0} batch(es) were fetched again to restore it`,
    ];
  }
  if (kind === 'probe_error') {
    return [
      'probe_error',
      `loaderscope's probe failed in ${n.where} (${n.type}: ${n.message}); training went ` +
        'on, but this run may miss events',
    ];
  }
  return null;
}

/**
 * " past the 10.0 s threshold", when the producer said its threshold (diagnosis.py _past).
 * @param {{threshold?: number|null}} n
 */
function past(n) {
  return n.threshold !== undefined && n.threshold !== null ? ` past the ${f1(n.threshold)} s threshold` : '';
}

/**
 * The notes to say, in order: a stuck fetch (or wait) the probe noted again every few seconds with a
 * fresh stack is one finding, its latest note (diagnosis.py _latest_notes).
 * @param {import('./types.js').LoaderEvent[]} notes
 */
function latestNotes(notes) {
  /** @param {import('./types.js').LoaderEvent} n */
  const key = (n) =>
    n.kind === 'worker_stuck'
      ? `worker ${n.worker} ${n.idx}`
      : n.kind === 'consumer_stuck'
        ? `consumer ${pyStr(n.waiting_for)}`
        : null;
  const keys = notes.map(key);
  return notes.filter((_, i) => keys[i] === null || !keys.slice(i + 1).includes(keys[i]));
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

// waiting (for data, or another loader) more than this share of the time is the bottleneck
export const INPUT_BOUND = 0.2;
// fewer batches tell nothing yet: the first ones are start-up and the pipeline filling
export const MIN_VERDICT_BATCHES = 8;

const ms = (/** @type {number} */ seconds) => f1(seconds * 1000);

/** Where the time inside this loader's epochs went, and what happened between them. @param {Stats} stats */
function timeFinding(stats) {
  const startup = stats.startup_wait >= 0.05 ? say('waited.startup', { startup: pyFixed(stats.startup_wait, 2) }) : '';
  let text = say('waited', {
    share: pct(stats.input_bound),
    wait: pyFixed(stats.consumer_wait, 2),
    wall: pyFixed(stats.epoch_wall, 2),
    startup,
  });
  if (stats.other_wait >= 0.05)
    text += say('waited.others', { others: pyFixed(stats.other_wait, 2), share: pct(stats.other_share) });
  if (stats.between_epochs >= 0.05) {
    const others =
      stats.between_others >= 0.05 ? say('waited.outside.others', { others: pyFixed(stats.between_others, 2) }) : '';
    text += say('waited.outside', { outside: pyFixed(stats.between_epochs, 2), others });
  }
  return text;
}

/**
 * What limits the loop inside this loader's epochs (diagnosis.py _verdict).
 * @param {Stats} stats @param {import('./types.js').LoaderConfig} config @returns {[string, string]}
 */
function verdict(stats, config) {
  const workers = config.num_workers || 0,
    rate = f1(stats.batches_per_s);
  /** @type {Record<string, number>} */
  const shares = {
    startup: stats.startup_share,
    others: stats.other_share,
    loading: stats.input_bound - stats.startup_share,
  };
  let biggest = 'startup';
  for (const name of ['others', 'loading']) if (shares[name] > shares[biggest]) biggest = name;
  if (shares[biggest] > INPUT_BOUND && biggest === 'startup') {
    const fix = !workers
      ? say('startup_bound.main')
      : !config.persistent_workers && stats.epochs + stats.peeks > 1
        ? say('startup_bound.persistent')
        : say('startup_bound.rebuilt');
    return [
      'startup_bound',
      say('startup_bound', {
        rate,
        share: pct(stats.startup_share),
        starts: say('n.starts', { n: stats.worker_starts }),
        fix,
      }),
    ];
  }
  if (shares[biggest] > INPUT_BOUND && biggest === 'others')
    return ['other_loaders_bound', say('others_bound', { rate, share: pct(stats.other_share) })];
  if (stats.input_bound_steady <= INPUT_BOUND) {
    const after =
      stats.input_bound > INPUT_BOUND ? say('step_bound.after', { steady: pct(stats.input_bound_steady) }) : '';
    const step = stats.step_time !== null ? say('step_bound.step', { step: ms(stats.step_time) }) : '';
    return ['step_bound', say('step_bound', { after, step, rate })];
  }
  const who = workers ? say('n.workers', { n: workers }) : say('loading_bound.main');
  return ['input_bound', say('loading_bound', { workers: who, rate })];
}

/**
 * What cut the run short, if anything did: then its timings say nothing about the pipeline's pace.
 * A stuck fetch or wait that recovered cut nothing short.
 * @param {LoaderState} s @param {Stats} stats
 */
function failure(s, stats) {
  const kinds = new Set(
    s.notes.filter((n) => /** @type {{recovered?: unknown}} */ (n).recovered === undefined).map((n) => n.kind),
  );
  const why = [
    ['died', kinds.has('worker_died')],
    ['stuck', kinds.has('worker_stuck')],
    ['error', stats.errors > 0],
    ['consumer_stuck', kinds.has('consumer_stuck')],
    ['timeout', kinds.has('timeout')],
  ]
    .filter(([, seen]) => seen)
    .map(([name]) => say(`why.${name}`));
  return why.length ? why.join(', ') : null;
}

/** @param {Stats} stats */
function peeksFinding(stats) {
  return say('peeks', {
    iterators: say('n.iterators', { n: stats.peeks }),
    batches: say('n.batches', { n: stats.peek_batches }),
    starts: say('n.starts', { n: stats.peek_worker_starts }),
    wait: pyFixed(stats.peek_wait, 2),
  });
}

export const PICKLE_HEAVY_BYTES = 1_000_000;

/** @typedef {{code: string, text: string}} Finding a finding and its cause code (diagnosis.py Finding) */

/**
 * The verdict on what limits the loop, once there is enough to tell.
 * @param {LoaderState} s
 * @param {Stats} stats
 * @returns {Finding[]}
 */
function paceFindings(s, stats) {
  const why = failure(s, stats);
  if (why) return [{ code: 'no_verdict', text: say('no_verdict', { why }) }];
  if (stats.batches < MIN_VERDICT_BATCHES) {
    return [
      {
        code: 'too_early',
        text: say('too_early', { batches: say('n.batches', { n: stats.batches }), least: MIN_VERDICT_BATCHES }),
      },
    ];
  }
  const [code, text] = verdict(stats, s.config);
  return [{ code, text: timeFinding(stats) + text }];
}

/** @param {LoaderState} s @returns {Finding[]} */
function errorFindings(s) {
  /** @type {Finding[]} */
  const found = [];
  for (const err of s.errors) {
    const at =
      err.idx !== undefined && err.idx !== null
        ? ` in task ${err.idx} (worker ${pyStr(err.worker)}, samples ${pyList(err.indices)})`
        : '';
    found.push({ code: 'error', text: `error${at}: ${err.type}: ${err.message}` });
    const text = String(err.traceback || err.message).toLowerCase();
    if (SHM_SIGNS.some((sign) => text.includes(sign))) {
      found.push({
        code: 'shm_full',
        text:
          'shared memory (/dev/shm) is exhausted: enlarge it (docker --shm-size) or call ' +
          "torch.multiprocessing.set_sharing_strategy('file_system')",
      });
    }
  }
  return found;
}

/** @param {number|null|undefined} v */
const mb = (v) => (v === undefined || v === null ? '?' : f1(v / 1e6));

/** What a SIGKILLed worker held at its last memory sample (diagnosis.py _killed). @param {any} n */
function killed(n) {
  const evidence = n.memory;
  if (!evidence) return " (SIGKILL is what the kernel's OOM killer sends: check memory)";
  return (
    " (SIGKILL is what the kernel's OOM killer sends: " +
    say('memory.killed', {
      ago: f1(Math.max(0, n.t - evidence.t)),
      rss: mb(evidence.rss),
      uss: mb(evidence.uss),
      headroom: mb(evidence.headroom),
    }) +
    ')'
  );
}

export const COPY_MIN = 8 * 2 ** 20; // diagnosis.py's thresholds
const LEAK_MIN = 2 ** 20;
const HEADROOM_HORIZON = 3600;
const HEADROOM_SPAN = 5;
const SHM_LOW = 0.1;
const IN_FLIGHT_SHARE = 0.5;
const IN_FLIGHT_MIN = 64 * 2 ** 20;

/**
 * What the memory samples show (diagnosis.py _memory_findings).
 * @param {LoaderState} s
 * @param {Stats} stats
 * @returns {Finding[]}
 */
function memoryFindings(s, stats) {
  const m = stats.memory;
  if (m === null) return [];
  const found = [];
  const workers = m.workers;
  const copied = workers.reduce((sum, w) => sum + w.copied, 0);
  if (workers.length && copied >= COPY_MIN * workers.length) {
    const grown = workers.reduce((sum, w) => sum + w.grown, 0);
    found.push({
      code: 'copy_on_read',
      text: say('memory.copy_on_read', {
        grown: mb(grown),
        per: mb(grown / workers.length),
        samples: workers.reduce((sum, w) => sum + w.copied_samples, 0).toLocaleString('en'), // Python's {:,}
        copied: mb(copied),
      }),
    });
  }
  for (const proc of m.main ? [m.main, ...workers] : workers) {
    if (proc.leak_per_epoch !== null && proc.leak_per_epoch >= LEAK_MIN) {
      const who = proc.worker === null ? 'the main process' : `worker ${proc.worker}`;
      const why = proc.worker !== null ? say('memory.leak.persistent', {}) : '';
      found.push({
        code: 'memory_leak',
        text: say('memory.leak', {
          who,
          rate: mb(proc.leak_per_epoch),
          epochs: proc.epochs,
          first: mb(proc.epoch_first),
          last: mb(proc.epoch_last),
          why,
        }),
      });
    }
  }
  const left = m.headroom_s;
  if (left !== null && left <= HEADROOM_HORIZON && m.trend_span >= HEADROOM_SPAN) {
    const perEpoch = stats.epochs ? stats.epoch_wall / stats.epochs : 0;
    const epochs = perEpoch > 0 ? say('memory.headroom.epochs', { epochs: f1(left / perEpoch) }) : '';
    found.push({
      code: 'headroom',
      text: say('memory.headroom', {
        rate: mb(m.growth_per_s),
        span: pyFixed(m.trend_span / 2, 0),
        headroom: mb(m.headroom),
        minutes: pyFixed(left / 60, 0),
        epochs,
      }),
    });
  }
  if (m.shm_free_low !== null && m.shm_total && m.shm_free_low < SHM_LOW * m.shm_total) {
    found.push({ code: 'shm_low', text: say('memory.shm', { free: mb(m.shm_free_low), total: mb(m.shm_total) }) });
  }
  const held = m.in_flight_high;
  if (held >= IN_FLIGHT_MIN && m.in_flight_pss && held >= IN_FLIGHT_SHARE * m.in_flight_pss) {
    found.push({
      code: 'in_flight',
      text: say('memory.in_flight', {
        held: mb(held),
        batches: say('n.batches', { n: m.in_flight_batches }),
        pss: mb(m.in_flight_pss),
        window: s.window,
      }),
    });
  }
  return found;
}

/**
 * How batches cross from the workers and to the device.
 * @param {LoaderState} s
 * @param {Stats} stats
 * @returns {Finding[]}
 */
function transferFindings(s, stats) {
  /** @type {Finding[]} */
  const found = [];
  if (s.config.pin_memory && !(s.config.pin_memory_active ?? false) && s.mode === 'real') {
    found.push({
      code: 'pin_inactive',
      text:
        'pin_memory=True, but this machine has no accelerator, so torch silently turned ' +
        'pinning off: batches stay in pageable memory and no pin-memory thread runs',
    });
  }
  const perBatch = stats.pickled_bytes / Math.max(stats.batches, 1);
  if (perBatch >= PICKLE_HEAVY_BYTES && s.mode !== 'sim' && (s.config.num_workers || 0) > 0) {
    found.push({
      code: 'pickle_heavy',
      text:
        `batches cross from the workers as ${f1(perBatch / 1e6)} MB of pickled data per ` +
        `batch (numpy arrays or Python objects; pickling a sampled batch took ${f1(stats.pickle_s * 1000)} ms): ` +
        'return tensors from collate_fn so they travel through shared memory',
    });
  }
  if (stats.pin_mb_per_s) {
    found.push({
      code: 'pinning',
      text:
        `pinning: ${f1(stats.pin_bytes / 1e6)} MB copied to page-locked memory at ` +
        `${pyFixed(stats.pin_mb_per_s, 0)} MB/s; ${pct(stats.pin_wait_share)} of the consumer's wait ` +
        'was spent behind the pin thread',
    });
  }
  const split = stats.consumer_split;
  if (split) {
    const step = split.step !== null ? say('split.step', { step: pyFixed(split.step * 1000, 2) }) : '';
    found.push({
      code: 'step_split',
      text: say('split', {
        wait: pyFixed(split.wait * 1000, 2),
        step,
        device: split.device ?? 'the device',
        h2d: pyFixed(split.h2d * 1000, 2),
        compute: pyFixed(split.compute * 1000, 2),
      }),
    });
    if (split.h2d_pageable && split.h2d > 0) {
      found.push({
        code: 'pinned_pays',
        text:
          `pinned memory pays: the same batch copied from pageable ` +
          `memory took ${pyFixed(split.h2d_pageable * 1000, 2)} ms, ` +
          `${f1(split.h2d_pageable / split.h2d)}× the pinned copy's ${pyFixed(split.h2d * 1000, 2)} ms`,
      });
    }
  }
  if (s.unpinned)
    found.push({ code: 'unpinned', text: say('unpinned', { batches: say('n.batches', { n: s.unpinned }) }) });
  return found;
}

/**
 * Findings with their cause codes, most important first (diagnosis.py findings()).
 * @param {LoaderState} s
 * @returns {Finding[]}
 */
export function findings(s) {
  const stats = summary(s);
  const found = errorFindings(s);
  for (const n of latestNotes(s.notes)) {
    const said = noteFinding(n);
    if (said) found.push({ code: said[0], text: said[1] });
  }
  if (stats.batches) found.push(...paceFindings(s, stats));
  if (stats.peeks) found.push({ code: 'peeks', text: peeksFinding(stats) });
  for (const slow of stats.stragglers) {
    found.push({
      code: 'straggler',
      text: say('straggler', {
        worker: slow.worker,
        factor: f1(slow.factor),
        median: pyFixed(slow.median * 1000, 0),
        others: pyFixed(slow.others * 1000, 0),
      }),
    });
  }
  if (stats.out_of_order) {
    found.push({
      code: 'reorder',
      text: say('reorder', {
        results: say('n.results', { n: stats.out_of_order }),
        high: stats.parked_high,
        hol: pyFixed(stats.head_of_line_wait, 2),
      }),
    });
  }
  found.push(...transferFindings(s, stats));
  found.push(...memoryFindings(s, stats));
  return found;
}

/**
 * Findings in plain words, most important first (diagnosis.py diagnosis()).
 * @param {LoaderState} s
 * @returns {string[]}
 */
export function diagnosis(s) {
  return findings(s).map((f) => f.text);
}

/** @param {unknown} v */
function pyList(v) {
  if (v === undefined || v === null) return 'None';
  if (Array.isArray(v)) return `[${v.map((x) => (typeof x === 'string' ? `'${x}'` : pyStr(x))).join(', ')}]`;
  return pyStr(v);
}

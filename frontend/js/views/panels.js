// DOM panels that change a few times a second: counters, notes, event log, diagnosis, worker detail.
// Each render compares with what it wrote last, so an unchanged panel costs nothing.

import { batchesPerS, inputBound, userFrame } from '../model/stats.js';
import { upperBound } from '../model/span-column.js';
import { fmtDuration } from '../model/time-window.js';
import { fmtIndices } from './pipeline-view.js';
import { pinStage, pinRate } from '../model/pin.js';

/** @typedef {import('../model/reducer.js').LoaderState} LoaderState */
/** @typedef {import('../model/types.js').Note} Note */

/**
 * Batches per second over the last `span` seconds before tNow (from the consumer row's yield times).
 * @param {import('../model/span-column.js').SpanColumn} consumer @param {number} tNow @param {number} [span]
 */
export function recentRate(consumer, tNow, span = 2) {
  const n = upperBound(consumer.end, consumer.n, tNow); // yields up to now (the playhead may be behind)
  if (n === 0) return 0;
  const from = tNow - span;
  const i = upperBound(consumer.end, n, from);
  const count = n - i;
  const first = consumer.end[0];
  const window = Math.min(span, tNow - first);
  return window > 0 ? count / window : 0;
}

/** 1234567 -> "1.23M", 45678 -> "45.7k": counts that must fit a small box. */
/** @param {number} n */
export function compact(n) {
  if (n < 1e4) return String(n);
  if (n < 1e6) return `${(n / 1e3).toFixed(n < 1e5 ? 1 : 0)}k`;
  return `${(n / 1e6).toFixed(2)}M`;
}

/**
 * "sample 2 of 4 (index 17)" for a stuck or dead worker's report, or ''.
 * @param {{idx?: number|null, pos?: number|null, sample?: unknown}|null|undefined} report
 * @param {LoaderState} [state]
 */
export function sampleText(report, state) {
  if (!report || report.sample === undefined || report.sample === null) return '';
  const task = report.idx === undefined || report.idx === null ? undefined : state?.tasks.get(report.idx);
  const n = task?.n || task?.indices?.length || null;
  return `sample ${(report.pos ?? 0) + 1}${n ? ` of ${n}` : ''} (index ${report.sample})`;
}

// The rate counter says which rate it shows: while a real run is live, its last 2 s; else the run's
// own batches/s as far as the playhead (summary()'s batches_per_s: the page, the CLI, the job table
// and compare give that one number).
const RATE_LABEL = { live: 'batches / s (last 2 s)', run: 'batches / s (run)' };

export class Counters {
  /** @param {HTMLElement} host */
  constructor(host) {
    this.host = host;
    /** @type {Map<string, {el: HTMLElement, v: HTMLElement, last: string}>} */
    this.cells = new Map();
    const defs = [
      ['rate', RATE_LABEL.run],
      ['batches', 'batches received'],
      ['cursors', 'send_idx / rcvd_idx'],
      ['outstanding', 'in flight / window'],
      ['buffer', 'reorder buffer (max)'],
      ['wait', 'training waited'],
      ['pin', 'pin memory MB/s'],
      ['epoch', 'epochs · events'],
    ];
    for (const [key, label] of defs) {
      const el = document.createElement('div');
      el.className = 'counter';
      el.dataset.counter = key;
      const v = document.createElement('div');
      v.className = 'v';
      const k = document.createElement('div');
      k.className = 'k';
      k.textContent = label;
      k.title = label; // the whole label when a narrow window cuts it
      el.append(v, k);
      host.append(el);
      this.cells.set(key, { el, v, last: '' });
    }
  }

  /** @param {string} key a counter's key @param {string} text @param {string} [cls] */
  set(key, text, cls = '') {
    const c = this.cells.get(key);
    if (!c) return;
    if (text.length > 9) cls = `${cls} long`;
    if (c.last !== text + cls) {
      c.v.textContent = text;
      c.el.className = `counter ${cls}`;
      c.last = text + cls;
    }
  }

  /** @param {string} key @param {string} label */
  label(key, label) {
    const c = this.cells.get(key);
    const k = /** @type {HTMLElement|undefined} */ (c?.el.querySelector('.k'));
    if (k && k.textContent !== label) k.textContent = k.title = label;
  }

  /**
   * @param {LoaderState} state
   * @param {import('../model/timeline-store.js').TimelineStore} timeline
   * @param {number} eventCount
   * @param {boolean} live following a real run as it happens
   */
  render(state, timeline, eventCount, live) {
    const s = { input_bound: inputBound(state) };
    const rate = live ? recentRate(timeline.consumer, state.t) : batchesPerS(state);
    this.label('rate', live ? RATE_LABEL.live : RATE_LABEL.run);
    this.set('rate', rate ? rate.toFixed(1) : '–'); // as the diagnosis, the job table and the CLI print it
    this.set('batches', String(state.batches));
    this.set('cursors', `${state.send_idx} / ${state.rcvd_idx}`);
    const win = state.window;
    this.set('outstanding', `${state.outstanding} / ${win}`, state.outstanding >= win && state.batches ? 'warn' : '');
    this.set('buffer', `${state.parked.length} (${state.parked_high})`, state.parked.length ? 'warn' : '');
    this.set(
      'wait',
      state.batches ? `${(s.input_bound * 100).toFixed(0)}%` : '–',
      s.input_bound > 0.5 ? 'bad' : s.input_bound > 0.2 ? 'warn' : '',
    );
    const pin = pinStage(state);
    const mbs = pinRate(state);
    const noRun = state.status === 'pending' && state.config.num_workers === undefined;
    if (noRun) this.set('pin', '–');
    else
      this.set(
        'pin',
        pin.mode === 'active' ? (mbs === null ? '–' : mbs >= 100 ? mbs.toFixed(0) : mbs.toFixed(1)) : pin.short,
        pin.mode === 'disabled' ? 'off' : state.unpinned ? 'warn' : '',
      );
    const pinCell = this.cells.get('pin');
    if (pinCell)
      pinCell.el.title = pin.why + (state.pin_bytes ? ` · ${(state.pin_bytes / 1e6).toFixed(1)} MB pinned` : '');
    // epochs of training begun, peeks left out (an iterator left after a look at a batch or two)
    this.set('epoch', `${state.epochs_done + (state.epoch_open ? 1 : 0)} · ${compact(eventCount)}`);
  }
}

/** @type {Record<string, (n: Note) => string>} */
const NOTE_TEXT = {
  gap: (n) => `events ${n.from}–${n.to} are missing: ${n.reason || 'the server no longer holds them'}`,
  invalid: (n) => `ignored an invalid event: ${n.reason}`,
  bad: (n) => String(n.reason),
  worker_stuck: (n) =>
    `worker ${n.worker} stuck on task ${n.idx}` +
    `${n.sample !== undefined && n.sample !== null ? `, sample ${(n.pos ?? 0) + 1} (index ${n.sample})` : ''} for ` +
    `${Number(n.elapsed).toFixed(1)} s${frameText(userFrame(n.stack))}`,
  worker_died: (n) =>
    `worker ${n.worker} (pid ${n.pid ?? '?'}) died: ${n.signal || `exit code ${n.exitcode}`}` +
    (n.idx !== undefined && n.idx !== null
      ? ` holding task ${n.idx}` +
        (n.sample !== undefined && n.sample !== null ? `, sample ${(n.pos ?? 0) + 1} (index ${n.sample})` : '')
      : ''),
  consumer_stuck: (n) =>
    `the training loop has waited ${Number(n.elapsed).toFixed(1)} s inside next() ` +
    `for task ${n.waiting_for ?? '?'}` +
    (n.held_by !== undefined && n.held_by !== null
      ? ` (worker ${n.held_by} holds it${n.has_data ? ', its data is ready' : ''})`
      : ''),
  timeout: (n) => `timeout: no batch within ${n.seconds} s${timeoutWorkers(n)}`,
  batch_info: (n) => `batch ${n.idx} of worker ${n.worker} described for the inspector`,
  error: (n) =>
    `${n.type}: ${n.message}${n.idx !== undefined && n.idx !== null ? ` (task ${n.idx}, worker ${n.worker})` : ''}`,
  violation: (n) => `protocol: ${n.text}`,
  doctor_verdict: (n) => `doctor: ${n.text}${n.advice ? `. What to do: ${n.advice}` : ''}`,
};

/** @param {import('../model/types.js').Frame|null} f */
function frameText(f) {
  if (!f) return '';
  return ` at ${String(f.file).split('/').pop()}:${f.line} (${f.code || f.function})`;
}

/** @param {Note} n */
function timeoutWorkers(n) {
  const busy = (n.workers || []).filter((w) => w.idx !== undefined && w.idx !== null);
  if (!n.workers) return '';
  if (!busy.length) return '; every worker was idle';
  const busyText = busy.map(
    (w) =>
      `worker ${w.worker} on task ${w.idx}` +
      (w.sample !== undefined && w.sample !== null ? ` (index ${w.sample})` : '') +
      (w.elapsed !== undefined ? ` for ${Number(w.elapsed).toFixed(1)} s` : ''),
  );
  return `; then: ${busyText.join(', ')}`;
}

/** @param {Note} n */
export function noteText(n) {
  const f = NOTE_TEXT[n.kind ?? n.type ?? ''];
  if (f) return f(n);
  const { seq, t, run, rank, kind, ...rest } = n;
  return `${kind ?? n.type}: ${JSON.stringify(rest).slice(0, 160)}`;
}

export class Notes {
  /** @param {HTMLElement} list @param {HTMLElement} count */
  constructor(list, count) {
    this.list = list;
    this.count = count;
    this.shown = 0;
  }

  /** @param {Note[]} items in order of arrival */
  render(items) {
    if (items.length === this.shown) return;
    if (items.length < this.shown) {
      this.list.replaceChildren();
      this.shown = 0;
    }
    const frag = document.createDocumentFragment();
    for (let i = this.shown; i < Math.min(items.length, 500); i++) {
      const n = items[i];
      const li = document.createElement('li');
      const kind = n.kind ?? n.type;
      li.className = n.unknown ? 'unknown' : (kind ?? '');
      li.textContent = (typeof n.t === 'number' ? `${fmtDuration(n.t)}  ` : '') + noteText(n);
      if (n.unknown) li.textContent = `unknown event kind "${n.kind}": ${noteText(n)}`;
      frag.append(li);
    }
    this.list.append(frag);
    this.shown = items.length;
    this.count.textContent = items.length ? `(${items.length})` : '';
  }
}

/** The last events before the cursor as text, newest last; unknown kinds are marked, never hidden. */
export class EventLog {
  /** @param {HTMLElement} pre @param {HTMLElement} count */
  constructor(pre, count) {
    this.pre = pre;
    this.countEl = count;
    this.key = '';
    // whether the log follows its newest line: kept by scrolling, not read at render, where
    // scrollHeight after the other panels' changes forced a layout of the whole page
    this.stick = true;
    pre.addEventListener('scroll', () => {
      this.stick = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 8;
    });
  }

  /**
   * @param {(i:number) => import('../model/types.js').LoaderEvent} eventAt event by row
   * @param {number} cursor rows [0, cursor) applied
   * @param {number} total rows loaded
   */
  render(eventAt, cursor, total) {
    const key = `${cursor}/${total}`;
    if (this.key === key) return;
    this.key = key;
    const lines = [];
    for (let i = Math.max(0, cursor - 60); i < cursor; i++) lines.push(eventLine(eventAt(i)));
    this.pre.textContent = lines.join('\n');
    // to the newest line at the next frame's start, when the layout is already done
    if (this.stick)
      requestAnimationFrame(() => {
        this.pre.scrollTop = this.pre.scrollHeight;
      });
    this.countEl.textContent = cursor === total ? `(${total})` : `(${cursor} of ${total})`;
  }
}

const SKIP_FIELDS = new Set([
  'seq',
  't',
  'run',
  'rank',
  'kind',
  'indices',
  'stack',
  'traceback',
  'config',
  'stats',
  'structure',
  'params',
]);

/** @param {import('../model/types.js').LoaderEvent} e */
export function eventLine(e) {
  const parts = [];
  for (const [k, v] of Object.entries(e)) {
    if (SKIP_FIELDS.has(k)) continue;
    const text =
      typeof v === 'number' && !Number.isInteger(v) ? v.toFixed(4) : typeof v === 'object' ? JSON.stringify(v) : v;
    parts.push(`${k}=${text}`);
  }
  if (e.indices) parts.push(`indices=${fmtIndices(e.indices, e.n)}`);
  return `#${e.seq} ${(+e.t).toFixed(4)} ${e.kind} ${parts.join(' ')}`;
}

/** @param {HTMLElement} ul @param {unknown} lines the diagnosis, one string a line @param {string} fallback */
export function renderDiagnosis(ul, lines, fallback) {
  const items = Array.isArray(lines) && lines.length ? lines : [fallback];
  const key = items.join('\n');
  if (ul.dataset.key === key) return;
  ul.dataset.key = key;
  ul.replaceChildren(
    ...items.map((text, i) => {
      const li = document.createElement('li');
      li.textContent = String(text);
      if (!Array.isArray(lines) || !lines.length) li.className = 'muted';
      else if (i === 0 && /error|died|stuck|timeout/.test(String(text))) li.className = 'error';
      return li;
    }),
  );
}

/**
 * A worker's numbers and its current task, as text.
 * @param {LoaderState} state
 * @param {number} wid
 * @param {number} [now]
 */
export function workerDetail(state, wid, now = state.t) {
  const w = state.workers.get(wid);
  if (!w) return '';
  const times = Float64Array.from(w.fetch_times).sort();
  const pct = (/** @type {number} */ q) =>
    times.length ? times[Math.min(times.length - 1, Math.round(q * (times.length - 1)))] : NaN;
  const lines = [];
  const task = w.current !== null ? state.tasks.get(w.current) : undefined;
  if (w.status === 'stuck' && w.stuck) {
    const s = w.stuck;
    const running = task && task.idx === s.idx && task.fetch_start !== null ? now - task.fetch_start : +s.elapsed;
    const sample = sampleText(s, state);
    lines.push(
      `STUCK on task ${s.idx}${sample ? `, ${sample}` : ''}`,
      `for ${running.toFixed(1)} s (reported stuck after ${(+(s.threshold ?? 0)).toFixed(1)} s)`,
      '',
    );
  }
  if (w.status === 'died') {
    const d = w.died;
    const sample = sampleText(d, state);
    lines.push(`DIED: ${w.signal ? `killed by ${w.signal}` : `exit code ${w.exitcode}`}`);
    if (d && d.idx !== undefined && d.idx !== null)
      lines.push(
        `while fetching task ${d.idx}${sample ? `, ${sample}` : ''}`,
        `samples ${fmtIndices(d.indices, 0) || '?'}`,
      );
    if (w.signal === 'SIGKILL') lines.push("(SIGKILL is what the kernel's OOM killer sends: check memory)");
    if (w.signal === 'SIGBUS') lines.push('(SIGBUS: /dev/shm is probably full)');
    lines.push('');
  }
  lines.push(
    `status   ${w.status}${w.signal ? ` (${w.signal})` : ''}${w.exitcode !== null ? ` exit ${w.exitcode}` : ''}`,
    `pid      ${w.pid ?? '?'}`,
    `tasks    ${times.length} fetched`,
    `fetch    p50 ${fmtDuration(pct(0.5))} · p95 ${fmtDuration(pct(0.95))} · max ` +
      `${fmtDuration(times.length ? times[times.length - 1] : NaN)}`,
    `bytes    ${w.nbytes}`,
    `queue    ${w.queue.length ? w.queue.join(' ') : '(empty)'}`,
  );
  if (task) lines.push(`fetching task ${task.idx}: samples ${fmtIndices(task.indices, task.n)}`);
  return lines.join('\n');
}

/**
 * Stack frames (outermost first) as list items; the user's own frames are marked so they stand out.
 * Accepts the probe's [{file, line, function, code, user}], plain strings, or a traceback string.
 * @param {StackFrame[]|string|null|undefined} stack
 * @returns {HTMLElement[]}
 */
export function stackItems(stack) {
  if (!stack) return [];
  const frames = typeof stack === 'string' ? stack.split('\n').filter(Boolean) : Array.isArray(stack) ? stack : [];
  const here = Array.isArray(stack) ? userFrame(stack.filter((f) => typeof f !== 'string')) : null;
  return frames.map((f) => {
    const li = document.createElement('li');
    if (typeof f === 'string') {
      li.textContent = f;
      return li;
    }
    const where = document.createElement('div');
    where.className = 'where';
    const file = shortPath(f.file ?? f.filename ?? '?');
    where.textContent = `${file}:${f.line ?? f.lineno ?? '?'} in ${f.function ?? f.name ?? '?'}`;
    where.title = String(f.file ?? '');
    li.append(where);
    if (f.code) {
      const code = document.createElement('code');
      code.textContent = f.code;
      li.append(code);
    }
    if (f.user) li.className = 'user';
    if (f === here) {
      li.classList.add('here');
      li.dataset.testid = 'user-frame';
      li.setAttribute('data-testid', 'user-frame');
      const tag = document.createElement('span');
      tag.className = 'here-tag';
      tag.textContent = f.user ? 'your code is here' : 'innermost frame';
      li.prepend(tag);
    }
    return li;
  });
}

/**
 * A frame as the probe sends it, or as another producer names its fields (Python's `traceback`
 * names: filename, lineno, name), or a line of text.
 * @typedef {string | (Partial<import('../model/types.js').Frame> & {filename?: string, lineno?: number,
 *   name?: string})} StackFrame
 */

/** @param {string} p */
function shortPath(p) {
  const parts = String(p).split('/');
  return parts.length > 2 ? `…/${parts.slice(-2).join('/')}` : p;
}

/** What needs attention now, most serious first: dead and stuck workers, a stuck consumer, timeouts, errors. */
/** @param {LoaderState} state @param {number} [now] @returns {{worker: number|null, text: string}[]} */
export function alarms(state, now = state.t) {
  const out = [];
  for (const w of state.workers.values()) {
    if (w.status !== 'died') continue;
    const d = w.died;
    const held =
      d && d.idx !== undefined && d.idx !== null
        ? ` while fetching task ${d.idx}` +
          `${d.sample !== undefined && d.sample !== null ? `, ${sampleText(d, state)}` : ''}`
        : '';
    out.push({
      worker: w.id,
      text: `worker ${w.id} died (${w.signal ? `killed by ${w.signal}` : `exit code ${w.exitcode}`})${held}`,
    });
  }
  for (const w of state.workers.values()) {
    if (w.status === 'stuck' && w.stuck) {
      const sample = sampleText(w.stuck, state);
      const f = userFrame(w.stuck.stack);
      out.push({
        worker: w.id,
        text:
          `worker ${w.id} is stuck on task ${w.stuck.idx}${sample ? `, ${sample}` : ''}` +
          `${f ? ` at ${String(f.file).split('/').pop()}:${f.line}` : ''} — its stack is on the right`,
      });
    }
  }
  const c = state.consumer_stuck;
  if (c && state.status === 'running') {
    const waited = +c.elapsed + Math.max(0, now - c.t);
    out.push({
      worker: c.held_by ?? null,
      text:
        `the training loop has waited ${waited.toFixed(1)} s inside next()` +
        `${c.waiting_for !== undefined && c.waiting_for !== null ? ` for task ${c.waiting_for}` : ''}` +
        `${c.held_by !== undefined && c.held_by !== null ? `, held by worker ${c.held_by}` : ''}`,
    });
  }
  if (state.timeout) out.push({ worker: null, text: noteText(state.timeout) });
  if (state.errors.length) {
    const e = state.errors[state.errors.length - 1];
    out.push({
      worker: e.worker ?? null,
      text:
        `${e.type}: ${String(e.message).split('\n')[0]}` +
        `${e.idx !== undefined && e.idx !== null ? ` (task ${e.idx}, worker ${e.worker})` : ''}`,
    });
  }
  return out;
}

/** A sampled batch's structure (batch_info) as a nested list: types, shapes, dtypes, bytes, how it travelled. */
/**
 * @param {import('../model/types.js').BatchStructure|null|undefined} node
 * @param {string} [name]
 * @returns {HTMLElement}
 */
export function structureItems(node, name = 'batch') {
  const li = document.createElement('li');
  const head = document.createElement('span');
  head.className = 'node';
  const parts = [name, node?.type ?? '?'];
  if (node?.shape) parts.push(`[${node.shape.join(', ')}]`);
  if (node?.dtype) parts.push(node.dtype);
  if (node?.bytes !== undefined) parts.push(`${node.bytes} B`);
  if (node?.length !== undefined) parts.push(`len ${node.length}`);
  head.textContent = parts.join(' · ');
  li.append(head);
  const flags = [];
  if (node?.via) flags.push(node.via);
  if (node?.shared) flags.push('shared');
  if (node?.pinned) flags.push('pinned');
  if (flags.length) {
    const f = document.createElement('span');
    f.className = `via ${node?.via === 'pickle' ? 'pickle' : ''}`;
    f.textContent = flags.join(', ');
    li.append(' ', f);
  }
  if (node?.values || node?.value !== undefined) {
    const v = document.createElement('code');
    v.textContent = node.values ? JSON.stringify(node.values) : String(node.value);
    li.append(v);
  }
  const items = node?.items;
  if (items && typeof items === 'object') {
    const ul = document.createElement('ul');
    /** @type {[string, import('../model/types.js').BatchStructure][]} */
    const entries = Array.isArray(items) ? items.map((x, i) => [String(i), x]) : Object.entries(items);
    for (const [k, child] of entries) ul.append(structureItems(child, k));
    li.append(ul);
  }
  return li;
}

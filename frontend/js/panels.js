// DOM panels that change a few times a second: counters, notes, event log, diagnosis, worker detail.
// Each render compares with what it wrote last, so an unchanged panel costs nothing.

import { summary } from './reducer.js';
import { fmtDuration, upperBound } from './timeline-store.js';
import { fmtIndices } from './pipeline-view.js';

/** Batches per second over the last `span` seconds of run time (from the consumer row's yield times). */
export function recentRate(consumer, tNow, span = 2) {
  const n = consumer.n;
  if (n === 0) return 0;
  const from = tNow - span;
  const i = upperBound(consumer.end, n, from);
  const count = n - i;
  const first = consumer.end[0];
  const window = Math.min(span, tNow - first);
  return window > 0 ? count / window : 0;
}

export class Counters {
  constructor(host) {
    this.host = host;
    this.cells = new Map();
    const defs = [
      ['rate', 'batches / s'],
      ['batches', 'batches received'],
      ['cursors', 'send_idx / rcvd_idx'],
      ['outstanding', 'in flight / window'],
      ['buffer', 'reorder buffer (max)'],
      ['wait', 'training waited'],
      ['epoch', 'epoch · events'],
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
      el.append(v, k);
      host.append(el);
      this.cells.set(key, { el, v, last: '' });
    }
  }

  set(key, text, cls = '') {
    const c = this.cells.get(key);
    if (c.last !== text + cls) {
      c.v.textContent = text;
      c.el.className = `counter ${cls}`;
      c.last = text + cls;
    }
  }

  render(state, timeline, eventCount) {
    const s = summary(state);
    const rate = recentRate(timeline.consumer, state.t);
    this.set('rate', rate ? rate.toFixed(rate < 10 ? 1 : 0) : '–');
    this.set('batches', String(state.batches));
    this.set('cursors', `${state.send_idx} / ${state.rcvd_idx}`);
    const win = state.window;
    this.set('outstanding', `${state.outstanding} / ${win}`, state.outstanding >= win && state.batches ? 'warn' : '');
    this.set('buffer', `${state.buffer.length} (${state.buffer_high})`, state.buffer.length ? 'warn' : '');
    this.set('wait', state.batches ? `${(s.input_bound * 100).toFixed(0)}%` : '–', s.input_bound > 0.5 ? 'bad' : s.input_bound > 0.2 ? 'warn' : '');
    this.set('epoch', `${Math.max(state.epoch, 0)} · ${eventCount}`);
  }
}

const NOTE_TEXT = {
  gap: (n) => `events ${n.from}–${n.to} are missing: ${n.reason || 'the server no longer holds them'}`,
  invalid: (n) => `ignored an invalid event: ${n.reason}`,
  bad: (n) => n.reason,
  worker_stuck: (n) => `worker ${n.worker} stuck on task ${n.idx} for ${(+n.elapsed).toFixed(1)} s`,
  worker_died: (n) => `worker ${n.worker} (pid ${n.pid ?? '?'}) died: ${n.signal || `exit code ${n.exitcode}`}${n.idx !== undefined ? ` holding task ${n.idx}` : ''}`,
  timeout: (n) => `timeout: no batch within ${n.seconds} s`,
  error: (n) => `${n.type}: ${n.message}${n.idx !== undefined && n.idx !== null ? ` (task ${n.idx}, worker ${n.worker})` : ''}`,
  violation: (n) => `protocol: ${n.text}`,
};

export function noteText(n) {
  const f = NOTE_TEXT[n.kind ?? n.type];
  if (f) return f(n);
  const { seq, t, run, rank, kind, ...rest } = n;
  return `${kind ?? n.type}: ${JSON.stringify(rest).slice(0, 160)}`;
}

export class Notes {
  constructor(list, count) {
    this.list = list;
    this.count = count;
    this.shown = 0;
  }

  /** @param {any[]} items in order of arrival */
  render(items) {
    if (items.length === this.shown) return;
    if (items.length < this.shown) { this.list.replaceChildren(); this.shown = 0; }
    const frag = document.createDocumentFragment();
    for (let i = this.shown; i < Math.min(items.length, 500); i++) {
      const n = items[i];
      const li = document.createElement('li');
      const kind = n.kind ?? n.type;
      li.className = n.unknown ? 'unknown' : kind;
      li.textContent = (typeof n.t === 'number' ? `${fmtDuration(n.t)}  ` : '') + noteText(n);
      if (n.unknown) li.textContent = `unknown event kind "${n.kind}": ${noteText(n)}`;
      frag.append(li);
    }
    this.list.append(frag);
    this.shown = items.length;
    this.count.textContent = items.length ? `(${items.length})` : '';
  }
}

/** The last events as text, newest last; unknown kinds are marked, never hidden. */
export class EventLog {
  constructor(pre, count, size = 200) {
    this.pre = pre;
    this.countEl = count;
    this.size = size;
    this.ring = new Array(size);
    this.n = 0;
    this.drawnAt = -1;
  }

  push(e) {
    this.ring[this.n % this.size] = e;
    this.n += 1;
  }

  render() {
    if (this.drawnAt === this.n) return;
    this.drawnAt = this.n;
    const lines = [];
    const from = Math.max(0, this.n - 60);
    for (let i = from; i < this.n; i++) lines.push(eventLine(this.ring[i % this.size]));
    const stick = this.pre.scrollTop + this.pre.clientHeight >= this.pre.scrollHeight - 8;
    this.pre.textContent = lines.join('\n');
    if (stick) this.pre.scrollTop = this.pre.scrollHeight;
    this.countEl.textContent = `(${this.n})`;
  }
}

const SKIP_FIELDS = new Set(['seq', 't', 'run', 'rank', 'kind', 'indices', 'stack', 'traceback', 'config', 'stats']);

export function eventLine(e) {
  const parts = [];
  for (const [k, v] of Object.entries(e)) {
    if (SKIP_FIELDS.has(k)) continue;
    parts.push(`${k}=${typeof v === 'number' && !Number.isInteger(v) ? v.toFixed(4) : typeof v === 'object' ? JSON.stringify(v) : v}`);
  }
  if (e.indices) parts.push(`indices=${fmtIndices(e.indices, e.n)}`);
  return `#${e.seq} ${(+e.t).toFixed(4)} ${e.kind} ${parts.join(' ')}`;
}

export function renderDiagnosis(ul, lines, fallback) {
  const items = Array.isArray(lines) && lines.length ? lines : [fallback];
  const key = items.join('\n');
  if (ul.dataset.key === key) return;
  ul.dataset.key = key;
  ul.replaceChildren(...items.map((text, i) => {
    const li = document.createElement('li');
    li.textContent = String(text);
    if (!Array.isArray(lines) || !lines.length) li.className = 'muted';
    else if (i === 0 && /error|died|stuck|timeout/.test(text)) li.className = 'error';
    return li;
  }));
}

/** A worker's numbers and its current task, as text. */
export function workerDetail(state, wid, now = state.t) {
  const w = state.workers.get(wid);
  if (!w) return '';
  const times = [...w.fetch_times].sort((a, b) => a - b);
  const pct = (q) => (times.length ? times[Math.min(times.length - 1, Math.round(q * (times.length - 1)))] : NaN);
  const lines = [
    `status   ${w.status}${w.signal ? ` (${w.signal})` : ''}${w.exitcode !== null ? ` exit ${w.exitcode}` : ''}`,
    `pid      ${w.pid ?? '?'}`,
    `tasks    ${times.length} fetched`,
    `fetch    p50 ${fmtDuration(pct(0.5))} · p95 ${fmtDuration(pct(0.95))} · max ${fmtDuration(times.at(-1) ?? NaN)}`,
    `bytes    ${w.nbytes}`,
    `queue    ${w.queue.length ? w.queue.join(' ') : '(empty)'}`,
  ];
  const task = w.current !== null ? state.tasks.get(w.current) : undefined;
  if (task) lines.push(`fetching task ${task.idx}: samples ${fmtIndices(task.indices, task.n)}`);
  if (w.stuck) {
    const s = w.stuck;
    const sample = s.sample !== undefined && s.sample !== null ? `, sample ${s.sample}${s.pos !== undefined ? ` (#${s.pos + 1} of the batch)` : ''}` : '';
    const running = task && task.idx === s.idx && task.fetch_start !== null ? now - task.fetch_start : +s.elapsed;
    lines.push('', `STUCK on task ${s.idx}${sample} for ${running.toFixed(1)} s (threshold ${s.threshold ?? '?'} s)`);
  }
  return lines.join('\n');
}

/**
 * Stack frames (outermost first) as list items; the user's own frames are marked so they stand out.
 * Accepts the probe's [{file, line, function, code, user}], plain strings, or a traceback string.
 * @returns {HTMLElement[]}
 */
export function stackItems(stack) {
  if (!stack) return [];
  const frames = typeof stack === 'string' ? stack.split('\n').filter(Boolean) : Array.isArray(stack) ? stack : [];
  return frames.map((f) => {
    const li = document.createElement('li');
    if (typeof f === 'string') {
      li.textContent = f;
      return li;
    }
    const where = document.createElement('div');
    where.className = 'where';
    where.textContent = `${shortPath(f.file ?? f.filename ?? '?')}:${f.line ?? f.lineno ?? '?'} in ${f.function ?? f.name ?? '?'}`;
    where.title = String(f.file ?? '');
    li.append(where);
    if (f.code) {
      const code = document.createElement('code');
      code.textContent = f.code;
      li.append(code);
    }
    if (f.user) li.className = 'user';
    return li;
  });
}

function shortPath(p) {
  const parts = String(p).split('/');
  return parts.length > 2 ? `…/${parts.slice(-2).join('/')}` : p;
}

/** What needs attention now, most serious first: dead and stuck workers, a stuck consumer, errors. */
export function alarms(state, now = state.t) {
  const out = [];
  for (const w of state.workers.values()) {
    if (w.status === 'died') out.push({ worker: w.id, text: `worker ${w.id} died (${w.signal || `exit code ${w.exitcode}`})` });
  }
  for (const w of state.workers.values()) {
    if (w.status === 'stuck' && w.stuck) {
      out.push({ worker: w.id, text: `worker ${w.id} is stuck on task ${w.stuck.idx}${w.stuck.sample !== undefined && w.stuck.sample !== null ? ` (sample ${w.stuck.sample})` : ''} — click its lane for the stack` });
    }
  }
  const last = state.notes.at(-1);
  if (last && last.kind === 'consumer_stuck' && state.status === 'running') {
    const waited = +last.elapsed + Math.max(0, now - last.t);
    out.push({ worker: null, text: `the training loop has waited ${waited.toFixed(1)} s inside next()${last.waiting_for !== undefined ? ` for task ${last.waiting_for}` : ''}${last.held_by !== undefined && last.held_by !== null ? `, held by worker ${last.held_by}` : ''}` });
  }
  if (state.errors.length) {
    const e = state.errors.at(-1);
    out.push({ worker: e.worker ?? null, text: `${e.type}: ${String(e.message).split('\n')[0]}` });
  }
  return out;
}

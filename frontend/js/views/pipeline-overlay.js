// The pipeline picture's DOM overlay: the text that tests and screen readers read (lanes, cursors,
// the reorder buffer, the consumer), laid over the canvas in the same coordinates. Each write is
// skipped when the text is what was written last.

import { queueCapacity, gridCapacity, HEADER } from '../model/layout.js';
import { Where, WorkerStatus } from '../model/reducer.js';
import { fmtDuration } from '../model/time-window.js';

/** @typedef {import('../model/reducer.js').LoaderState} LoaderState */
/** @typedef {{lane: HTMLElement, status: HTMLElement, fetch: HTMLElement, more: HTMLElement}} LaneParts */

export class PipelineOverlay {
  /** @param {HTMLElement} el the overlay element @param {(worker:number) => void} onLaneClick */
  constructor(el, onLaneClick) {
    this.el = el;
    this.onLaneClick = onLaneClick;
    /** @type {WeakMap<Element, string>} */
    this.text = new WeakMap(); // element -> last text written (skip redundant DOM writes)
    /** @type {import('../model/layout.js').Layout|null} */
    this.L = null;
    /** @type {number[]} */
    this.ids = [];
    /** @type {import('../model/pin.js').PinStage|null} */
    this.pin = null;
    // the parts build() makes (null before it, or for a stage this layout leaves out)
    /** @type {LaneParts[]} */
    this.laneEls = [];
    /** @type {Element|null} */
    this.samplerKind = null;
    /** @type {Element|null} */
    this.sendEl = null;
    /** @type {Element|null} */
    this.rcvdEl = null;
    /** @type {HTMLElement|null} */
    this.resultEl = null;
    /** @type {HTMLElement|null} */
    this.pinEl = null;
    /** @type {Element|null} */
    this.pinNow = null;
    /** @type {HTMLElement|null} */
    this.pinnedEl = null;
    /** @type {HTMLElement|null} */
    this.bufferEl = null;
    /** @type {Element|null} */
    this.bufferHead = null;
    /** @type {Element|null} */
    this.bufferSub = null;
    /** @type {HTMLElement|null} */
    this.consumerEl = null;
    /** @type {Element|null} */
    this.consumerStat = null;
    /** @type {Element|null} */
    this.consumerSub = null;
  }

  /** @param {HTMLElement} el @param {import('../model/layout.js').Rect} r */
  place(el, r) {
    el.style.left = `${r.x}px`;
    el.style.top = `${r.y}px`;
    el.style.width = `${r.w}px`;
    el.style.height = `${r.h}px`;
  }

  /**
   * Rebuild for a new layout.
   * @param {import('../model/layout.js').Layout} L pipelineLayout() @param {number[]} ids worker ids, one lane each
   * @param {boolean} inProcess num_workers=0 @param {import('../model/pin.js').PinStage} pin pinStage()
   */
  build(L, ids, inProcess, pin) {
    this.L = L;
    this.ids = ids;
    this.pin = pin;
    this.el.replaceChildren();
    /** @param {string} cls @param {import('../model/layout.js').Rect|null} [r] @param {string} [html] */
    const mk = (cls, r, html = '') => {
      const el = document.createElement('div');
      el.className = cls;
      if (r) this.place(el, r);
      if (html) el.innerHTML = html; // static markup written here only, no data
      this.el.append(el);
      return el;
    };
    for (const t of L.titles) {
      const el = mk('col-title');
      el.style.left = `${t.x}px`;
      el.style.top = '8px';
      const b = document.createElement('b');
      b.textContent = t.text;
      const s = document.createElement('span');
      s.textContent = t.hint;
      el.append(b, s);
    }
    const sampler = mk(
      'box-label sampler-label',
      L.sampler,
      `<b>sampler</b><span class="hint">${L.slim ? 'index batches' : 'batches of sample indices'}</span>` +
        `<div class="sampler-kind"></div>`,
    );
    this.samplerKind = sampler.querySelector('.sampler-kind');
    mk(
      'box-label dispatcher-label',
      L.dispatcher,
      `<b>dispatcher</b><span class="hint">${L.slim ? 'round-robin' : 'round-robin to workers'}</span>` +
        `<div class="cursor">send_idx <span class="cursor-value" data-testid="cursor-send">0</span></div>`,
    );
    this.sendEl = this.el.querySelector('[data-testid="cursor-send"]');
    this.laneEls = ids.map((id, i) => {
      const lane = mk(L.compact ? 'lane compact' : 'lane', L.lanes[i].rect);
      lane.setAttribute('data-testid', 'worker-lane');
      lane.dataset.worker = String(id);
      lane.tabIndex = 0;
      lane.setAttribute('role', 'button'); // Enter or Space: its card (keys.js)
      const label = document.createElement('div');
      label.className = 'lane-label';
      this.place(label, { x: 0, y: 0, w: L.lanes[i].label.w, h: L.lanes[i].rect.h });
      const name = document.createElement('b');
      name.textContent = inProcess ? 'main process' : `worker ${id}`;
      const status = document.createElement('span');
      status.className = 'lane-status';
      label.append(name, status);
      const fetch = document.createElement('div');
      fetch.className = 'lane-fetch';
      const f = L.lanes[i].fetch;
      this.place(fetch, {
        x: f.x - L.lanes[i].rect.x + L.token.w + (L.compact ? 8 : 12),
        y: 0,
        w: f.w - L.token.w - (L.compact ? 10 : 16),
        h: f.h,
      });
      const more = document.createElement('div');
      more.className = 'lane-more';
      const q = L.lanes[i].queue;
      this.place(more, { x: q.x - L.lanes[i].rect.x, y: 0, w: L.compact ? 28 : 40, h: q.h });
      lane.append(label, fetch, more);
      lane.addEventListener('click', () => this.onLaneClick(id));
      return { lane, status, fetch, more };
    });
    this.resultEl = mk('box-label result-label', { ...L.result, h: 16, y: L.result.y + L.result.h - 18 });
    this.pinEl = this.pinNow = this.pinnedEl = null;
    if (L.pin === 'active') {
      // a slim column has no room for "pin thread" on one line (a token sits under its title)
      const el = mk(
        'box-label pin-label',
        L.pinThread,
        `<b>${L.slim ? 'pinning' : 'pin thread'}</b><div class="pin-now"></div>`,
      );
      if (L.slim) el.title = 'the pin thread';
      el.setAttribute('data-testid', 'pin-stage');
      el.dataset.state = 'active';
      this.pinEl = el;
      this.pinNow = el.querySelector('.pin-now');
      this.pinnedEl = mk('box-label pinned-label', L.pinned && { ...L.pinned, h: 16 });
    } else if (L.pin === 'disabled') {
      const el = mk(
        'box-label pin-label pin-disabled',
        L.pinCol,
        '<b>pin thread</b><div class="pin-off">off</div><div class="pin-why"></div>',
      );
      el.setAttribute('data-testid', 'pin-stage');
      el.dataset.state = 'disabled';
      el.title = pin.why;
      const why = el.querySelector('.pin-why');
      if (why) why.textContent = pin.box;
      this.pinEl = el;
    }
    this.bufferEl = mk(
      'box-label buffer-label',
      L.buffer,
      '<div class="buffer-head"></div><div class="buffer-sub"></div>',
    );
    this.bufferEl.setAttribute('data-testid', 'reorder-buffer');
    this.bufferHead = this.bufferEl.querySelector('.buffer-head');
    this.bufferSub = this.bufferEl.querySelector('.buffer-sub');
    mk(
      'box-label rcvd-label',
      L.rcvdCursor,
      '<div class="cursor">rcvd_idx <span class="cursor-value" data-testid="cursor-rcvd">0</span></div>' +
        '<span class="hint">next batch to hand out</span>',
    );
    this.rcvdEl = this.el.querySelector('[data-testid="cursor-rcvd"]');
    this.consumerEl = mk(
      'box-label consumer-label',
      L.consumer,
      '<b>consumer</b><div class="consumer-stat"></div><div class="consumer-sub"></div>',
    );
    this.consumerStat = this.consumerEl.querySelector('.consumer-stat');
    this.consumerSub = this.consumerEl.querySelector('.consumer-sub');
  }

  /** @param {Element|null} el (none: nothing to write) @param {string} s */
  setText(el, s) {
    if (el && this.text.get(el) !== s) {
      el.textContent = s;
      this.text.set(el, s);
    }
  }

  /** @param {Element|null} el (none: nothing to write) @param {string} name @param {string|number} v */
  setAttr(el, name, v) {
    const s = String(v);
    if (el && el.getAttribute(name) !== s) el.setAttribute(name, s);
  }

  /**
   * Cursors, lane texts, queue counts, the reorder buffer's story and the consumer's figures.
   * @param {LoaderState} state @param {{now: number}} clock
   */
  update(state, clock) {
    this.setText(this.sendEl, String(state.send_idx));
    this.setText(this.rcvdEl, String(state.rcvd_idx));
    const c = state.config;
    this.setText(
      this.samplerKind,
      [c.sampler, c.batch_size ? `batch_size ${c.batch_size}` : ''].filter(Boolean).join(' · '),
    );
    this.updateLanes(state, clock);
    this.updateQueues(state, clock);
    this.updateBuffer(state);
    this.updateConsumer(state);
  }

  /**
   * Each lane: status, fetched count, the task being fetched (elapsed, samples), queue overflow.
   * @param {LoaderState} state
   * @param {{now: number}} clock
   */
  updateLanes(state, clock) {
    const L = this.L;
    if (!L) return;
    this.ids.forEach((wid, i) => {
      const w = state.workers.get(wid);
      const el = this.laneEls[i];
      if (!w || !el) return;
      const status = w.status;
      this.setAttr(el.lane, 'data-status', status);
      this.setAttr(el.lane, 'data-current', w.current ?? '');
      const done = w.fetch_times.length;
      let s = status;
      if (status === WorkerStatus.DIED) s = `DIED · ${w.signal || `exit ${w.exitcode}`}`;
      else if (status === WorkerStatus.STUCK) s = 'STUCK';
      if (L.compact) {
        // thin row: the status word only when it matters; the rest in the tooltip
        this.setText(el.status, '');
        this.setAttr(el.lane, 'title', `worker ${wid} · ${s} · ${done} fetched · ${w.queue.length} queued`);
      } else this.setText(el.status, `${s}${L.laneH < 50 ? ' · ' : '\n'}${done} fetched`);
      const task = w.current !== null ? state.tasks.get(w.current) : undefined;
      // compact rows have one line: the alarm word first, then what the tall lane shows on two
      const one = L.compact;
      const sep = one ? ' · ' : '\n';
      const alarm = one && status === WorkerStatus.STUCK ? 'STUCK · ' : '';
      if (one && status === WorkerStatus.DIED) {
        const d = w.died;
        const held = d && d.idx !== undefined && d.idx !== null ? `held task ${d.idx}` : 'held no task';
        this.setText(el.fetch, `DIED · ${held.replace('held task', 'task')} · ${w.signal || `exit ${w.exitcode}`}`);
        this.setAttr(el.lane, 'data-elapsed', '');
      } else if (status === WorkerStatus.DIED) {
        const d = w.died;
        const held = d && d.idx !== undefined && d.idx !== null ? `held task ${d.idx}` : 'held no task';
        let second = d ? sampleLine(d, state) : '';
        if (second && L.laneH >= 40) second = second.replace(' (', '\n(');
        this.setText(el.fetch, `${held}\n${second || clip(fmtIndices(d?.indices, 0), 34)}`);
        this.setAttr(el.lane, 'data-elapsed', '');
      } else if (task && status === WorkerStatus.EXITED) {
        this.setText(el.fetch, `task ${task.idx} abandoned${sep}(the worker exited)`);
        this.setAttr(el.lane, 'data-elapsed', '');
      } else if (task) {
        const elapsed = task.fetch_start !== null ? Math.max(0, clock.now - task.fetch_start) : 0;
        let second = status === WorkerStatus.STUCK && w.stuck ? sampleLine(w.stuck, state) : '';
        if (second && L.laneH >= 40) second = second.replace(' (', '\n('); // three short lines fit a tall lane
        this.setText(
          el.fetch,
          `${alarm}task ${task.idx} · ${fmtElapsed(elapsed)}${sep}` +
            `${second || clip(fmtIndices(task.indices, task.n), 34)}`,
        );
        this.setAttr(el.lane, 'data-elapsed', elapsed.toFixed(2));
      } else {
        this.setText(el.fetch, '');
        this.setAttr(el.lane, 'data-elapsed', '');
      }
      const overflow = w.queue.length - queueCapacity(L, i);
      this.setText(el.more, overflow > 0 ? `+${overflow}` : '');
    });
  }

  /**
   * The result queue's count and, when the loader pins, the pin thread and the pinned queue.
   * @param {LoaderState} state
   * @param {{now: number}} clock
   */
  updateQueues(state, clock) {
    const L = this.L;
    if (!L) return;
    const queued = liveResultQueue(state);
    let unpinned = queued.length,
      pinnedN = 0;
    if (L.pin === 'active') {
      pinnedN = queued.filter((i) => state.tasks.get(i)?.pin_end != null).length;
      unpinned -= pinnedN;
      /** @type {import('../model/reducer.js').Task|null} */
      let now = null;
      for (const task of state.tasks.values()) if (task.where === Where.PINNING) now = task;
      this.setText(
        this.pinNow,
        now ? `task ${now.idx} · ${fmtElapsed(Math.max(0, clock.now - (now.pin_start ?? clock.now)))}` : 'idle',
      );
      this.setAttr(this.pinEl, 'data-current', now ? now.idx : '');
      const over = L.pinned ? pinnedN - gridCapacity(L.pinned, L.token, HEADER.pinned) : 0;
      this.setText(this.pinnedEl, `${pinnedN} pinned${over > 0 ? ` (+${over})` : ''}`);
    }
    const hidden = unpinned - gridCapacity(L.result, L.token, HEADER.result);
    this.setText(this.resultEl, `${unpinned} waiting${hidden > 0 ? ` (+${hidden} not shown)` : ''}`);
  }

  /** The reorder buffer: how many are parked and what rcvd_idx waits for. @param {LoaderState} state */
  updateBuffer(state) {
    const b = this.bufferEl;
    this.setAttr(b, 'data-size', state.parked.length);
    this.setAttr(b, 'data-high', state.parked_high);
    this.setAttr(b, 'data-waiting-for', state.parked.length ? state.rcvd_idx : '');
    const head = state.tasks.get(state.rcvd_idx);
    if (state.parked.length && head && head.where === Where.PARKED) {
      this.setText(this.bufferHead, `${state.parked.length} parked`);
      this.setText(this.bufferSub, `task ${state.rcvd_idx} is here: the next next() takes it`);
    } else if (state.parked.length) {
      this.setText(this.bufferHead, `${state.parked.length} parked · waiting for task ${state.rcvd_idx}`);
      this.setText(this.bufferSub, head ? describeWhere(head) : '');
    } else {
      this.setText(this.bufferHead, 'empty');
      this.setText(
        this.bufferSub,
        state.parked_high ? `high-water ${state.parked_high}` : 'results that arrive early wait here',
      );
    }
  }

  /**
   * The consumer: batches received, time waited, and the step's own timings when it reports them.
   * @param {LoaderState} state
   */
  updateConsumer(state) {
    this.setText(this.consumerStat, `${state.batches} batches received`);
    const lastWait = state.batches ? lastConsumerWait(state) : null;
    let sub = lastWait === null ? '' : `waited ${fmtDuration(state.consumer_wait)}`;
    let title = 'time the training loop spent inside next() waiting for data';
    if (state.steps) {
      // the training step reported its own timings (step events): where a batch's time goes
      const per = 1 / state.steps;
      sub += `\nbatch: copy ${fmtDuration(state.step_h2d * per)}\ncompute ${fmtDuration(state.step_compute * per)}`;
      if (state.step_h2d_pageable) sub += `\nunpinned ${fmtDuration(state.step_h2d_pageable * per)}`;
      title =
        `per batch, averaged over ${state.steps} steps: host-to-device copy to ${state.step_device ?? 'the device'}, ` +
        'the model step, and the same batch copied from pageable (unpinned) memory for comparison';
    }
    this.setText(this.consumerSub, sub);
    if (this.consumerEl && this.consumerEl.title !== title) this.consumerEl.title = title;
  }
}

/**
 * The result queue as drawn: each live task once. (state.py can list a task twice, or keep one that
 * was already handed out, when a worker's fetch events reach the stream after the pin thread's;
 * the picture never draws a token for a task that is gone, nor two tokens for one task.)
 * @param {LoaderState} state @returns {number[]}
 */
export function liveResultQueue(state) {
  const seen = new Set();
  const out = [];
  for (const idx of state.result_queue) {
    if (seen.has(idx) || !state.tasks.has(idx)) continue;
    seen.add(idx);
    out.push(idx);
  }
  return out;
}

/**
 * "sample 2 of 4 (index 17)" from a worker_stuck / worker_died report.
 * @param {{idx?: number|null, pos?: number|null, sample?: unknown}} report @param {LoaderState} state
 */
function sampleLine(report, state) {
  if (report.sample === undefined || report.sample === null) return '';
  const task = report.idx === undefined || report.idx === null ? undefined : state.tasks.get(report.idx);
  const n = task?.n || task?.indices?.length || 0;
  return `sample ${(report.pos ?? 0) + 1}${n ? ` of ${n}` : ''} (index ${report.sample})`;
}

/** @param {import('../model/reducer.js').Task} task */
function describeWhere(task) {
  switch (task.where) {
    case Where.INDEX_QUEUE:
      return `it is still queued at worker ${task.worker}`;
    case Where.FETCHING:
      return `worker ${task.worker} is still fetching it`;
    case Where.RESULT_QUEUE:
      return task.pin_end !== null ? 'it is pinned, about to be taken' : 'it is on the result queue, not yet taken';
    case Where.PINNING:
      return 'the pin thread is copying it';
    case Where.FAILED:
      return `it failed in worker ${task.worker}`;
    default:
      return '';
  }
}

/** @param {LoaderState} state */
function lastConsumerWait(state) {
  return state.consumer_wait;
}

/**
 * Sample indices in a few characters: the first 8, and how many more.
 * @param {import('../model/types.js').Indices|null|undefined} indices
 * @param {number|null|undefined} n
 */
export function fmtIndices(indices, n) {
  if (!indices || !indices.length) return n ? `${n} samples` : '';
  const shown = indices.slice(0, 8).join(' ');
  const more = (n || indices.length) - Math.min(indices.length, 8);
  return `[${shown}${more > 0 ? ` …+${more}` : ''}]`;
}

/** @param {number} s */
export function fmtElapsed(s) {
  return s < 1 ? `${(s * 1000).toFixed(0)} ms` : `${s.toFixed(1)} s`;
}

/** @param {string} s @param {number} n */
export function clip(s, n) {
  return s.length > n ? `${s.slice(0, n - 1)}…` : s;
}

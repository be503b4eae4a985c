// The pipeline picture: a canvas for boxes, arrows and moving task tokens, and a thin DOM overlay
// for text that tests and screen readers read (lanes, cursors, reorder buffer). Draws from a
// LoaderState; never mutates it. One draw per animation frame, called by the scheduler.

import { PALETTE, taskColor, taskInk } from './colors.js';
import {
  pipelineLayout, queueSlot, queueCapacity, fetchSlot, resultSlot, bufferSlot, consumerSlot,
  gridCapacity, dispatchPoint, HEADER, pinSlot, pinnedSlot, pipelineHeight,
} from './layout.js';
import { pinStage } from './pin.js';
import { Where, WorkerStatus } from './reducer.js';
import { fmtDuration } from './timeline-store.js';

const EASE_MS = 60; // token motion time constant
const MIN_SPEED = 0.6; // px per ms
const FADE_MS = 600;
const MAX_FLYING = 24; // released tokens animated at once

export { pipelineHeight };

export class PipelineView {
  /** @param {HTMLElement} host */
  constructor(host) {
    this.host = host;
    this.canvas = document.createElement('canvas');
    this.canvas.className = 'pipeline-canvas';
    this.canvas.setAttribute('aria-hidden', 'true');
    this.overlay = document.createElement('div');
    this.overlay.className = 'pipeline-overlay';
    host.append(this.canvas, this.overlay);
    this.ctx = /** @type {CanvasRenderingContext2D} */ (this.canvas.getContext('2d'));
    /** @type {Map<string, {x:number, y:number, idx:number, alpha:number, dying:number, failed:boolean}>} */
    this.tokens = new Map();
    this.layoutKey = '';
    this.L = null;
    this.lastDraw = 0;
    this.text = new WeakMap(); // element -> last text written (skip redundant DOM writes)
    this.moving = false;
    this.lastYieldCount = 0;
    this.onLaneClick = null;
    this.snapNext = false; // after a jump (seek), put tokens where they belong instead of flying
  }

  /** Another run or rank: the next draw lays the picture out again, with no tokens from before. */
  invalidate() {
    this.layoutKey = '';
    this.tokens.clear();
  }

  /** The next draw places tokens at once (after a seek, a fly-over would tell a false story). */
  snap() {
    this.snapNext = true;
  }

  /** Rebuild the layout and overlay when the size or the number of lanes changes. */
  ensureLayout(state) {
    const ids = [...state.workers.keys()].sort((a, b) => a - b);
    const lanes = Math.max(ids.length, 1);
    const width = this.host.clientWidth;
    const height = pipelineHeight(lanes);
    const digits = Math.max(2, String(Math.max(state.send_idx - 1, 0)).length);
    const inProcess = state.config.num_workers === 0;
    const pin = pinStage(state);
    const key = `${width}x${height}:${ids.join(',')}:${digits}:${inProcess}:${pin.mode}:${pin.why}`;
    if (key === this.layoutKey) return;
    this.layoutKey = key;
    this.pin = pin;
    this.L = pipelineLayout({ width, height, lanes: ids.length, digits, inProcess, pin: pin.mode });
    this.laneOf = new Map(ids.map((id, i) => [id, i]));
    this.ids = ids;
    const dpr = window.devicePixelRatio || 1;
    this.canvas.width = Math.round(this.L.width * dpr);
    this.canvas.height = Math.round(height * dpr);
    this.canvas.style.width = `${this.L.width}px`;
    this.canvas.style.height = `${height}px`;
    this.overlay.style.width = `${this.L.width}px`;
    this.overlay.style.height = `${height}px`;
    // a window narrower than the picture's minimum: scale the whole picture (canvas and overlay
    // alike, so clicks still land on their lanes) instead of scrolling the page sideways
    const scale = width > 0 && this.L.width > width ? width / this.L.width : 1;
    this.scale = scale;
    const t = scale < 1 ? `scale(${scale})` : '';
    this.canvas.style.transform = t;
    this.overlay.style.transform = t;
    this.host.classList.toggle('scaled', scale < 1);
    this.host.style.height = `${Math.ceil(height * scale)}px`;
    this.ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    this.buildOverlay(ids, inProcess);
    this.tokens.clear();
    this.bgKey = '';
  }

  place(el, r) {
    el.style.left = `${r.x}px`;
    el.style.top = `${r.y}px`;
    el.style.width = `${r.w}px`;
    el.style.height = `${r.h}px`;
  }

  buildOverlay(ids, inProcess) {
    const L = this.L;
    this.overlay.replaceChildren();
    const mk = (cls, r, html = '') => {
      const el = document.createElement('div');
      el.className = cls;
      if (r) this.place(el, r);
      if (html) el.innerHTML = html; // static markup written here only, no data
      this.overlay.append(el);
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
    const sampler = mk('box-label sampler-label', L.sampler, '<b>sampler</b><span class="hint">batches of sample indices</span><div class="sampler-kind"></div>');
    this.samplerKind = sampler.querySelector('.sampler-kind');
    mk('box-label dispatcher-label', L.dispatcher,
      '<b>dispatcher</b><span class="hint">round-robin to workers</span><div class="cursor">send_idx <span class="cursor-value" data-testid="cursor-send">0</span></div>');
    this.sendEl = this.overlay.querySelector('[data-testid="cursor-send"]');
    this.laneEls = ids.map((id, i) => {
      const lane = mk(L.compact ? 'lane compact' : 'lane', L.lanes[i].rect);
      lane.setAttribute('data-testid', 'worker-lane');
      lane.dataset.worker = String(id);
      lane.tabIndex = 0;
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
      this.place(fetch, { x: f.x - L.lanes[i].rect.x + L.token.w + (L.compact ? 8 : 12), y: 0, w: f.w - L.token.w - (L.compact ? 10 : 16), h: f.h });
      const more = document.createElement('div');
      more.className = 'lane-more';
      const q = L.lanes[i].queue;
      this.place(more, { x: q.x - L.lanes[i].rect.x, y: 0, w: L.compact ? 28 : 40, h: q.h });
      lane.append(label, fetch, more);
      lane.addEventListener('click', () => this.onLaneClick?.(id));
      return { lane, status, fetch, more };
    });
    this.resultEl = mk('box-label result-label', { ...L.result, h: 16, y: L.result.y + L.result.h - 18 });
    this.pinEl = this.pinNow = this.pinnedEl = null;
    if (L.pin === 'active') {
      const el = mk('box-label pin-label', L.pinThread, '<b>pin thread</b><div class="pin-now"></div>');
      el.setAttribute('data-testid', 'pin-stage');
      el.dataset.state = 'active';
      this.pinEl = el;
      this.pinNow = el.querySelector('.pin-now');
      this.pinnedEl = mk('box-label pinned-label', { ...L.pinned, h: 16 });
    } else if (L.pin === 'disabled') {
      const el = mk('box-label pin-label pin-disabled', L.pinCol, '<b>pin thread</b><div class="pin-off">off</div><div class="pin-why"></div>');
      el.setAttribute('data-testid', 'pin-stage');
      el.dataset.state = 'disabled';
      el.title = this.pin.why;
      el.querySelector('.pin-why').textContent = this.pin.box;
      this.pinEl = el;
    }
    this.bufferEl = mk('box-label buffer-label', L.buffer, '<div class="buffer-head"></div><div class="buffer-sub"></div>');
    this.bufferEl.setAttribute('data-testid', 'reorder-buffer');
    this.bufferHead = this.bufferEl.querySelector('.buffer-head');
    this.bufferSub = this.bufferEl.querySelector('.buffer-sub');
    mk('box-label rcvd-label', L.rcvdCursor, '<div class="cursor">rcvd_idx <span class="cursor-value" data-testid="cursor-rcvd">0</span></div><span class="hint">next batch to hand out</span>');
    this.rcvdEl = this.overlay.querySelector('[data-testid="cursor-rcvd"]');
    this.consumerEl = mk('box-label consumer-label', L.consumer, '<b>consumer</b><div class="consumer-stat"></div><div class="consumer-sub"></div>');
    this.consumerStat = this.consumerEl.querySelector('.consumer-stat');
    this.consumerSub = this.consumerEl.querySelector('.consumer-sub');
  }

  setText(el, s) {
    if (this.text.get(el) !== s) {
      el.textContent = s;
      this.text.set(el, s);
    }
  }

  setAttr(el, name, v) {
    const s = String(v);
    if (el.getAttribute(name) !== s) el.setAttribute(name, s);
  }

  /** Where each live task should be now. */
  targets(state) {
    const L = this.L;
    const out = new Map();
    const hidden = new Set();
    const key = (idx) => `${state.epoch}:${idx}`;
    for (const [wid, w] of state.workers) {
      const lane = this.laneOf.get(wid);
      if (lane === undefined) continue;
      w.queue.forEach((idx, k) => {
        const p = queueSlot(L, lane, k);
        if (p) out.set(key(idx), p);
        else hidden.add(key(idx));
      });
      if (w.current !== null && state.tasks.has(w.current)) out.set(key(w.current), fetchSlot(L, lane));
    }
    let kr = 0, kp = 0, kpin = 0;
    const pinning = L.pin === 'active';
    for (const idx of liveResultQueue(state)) {
      const task = state.tasks.get(idx);
      const pinned = pinning && task !== undefined && task.pin_end !== null;
      const p = pinned ? pinnedSlot(L, kp++) : resultSlot(L, kr++);
      if (p) out.set(key(idx), p); else hidden.add(key(idx));
    }
    if (pinning) {
      for (const task of state.tasks.values()) {
        if (task.where !== Where.PINNING) continue;
        const p = pinSlot(L);
        out.set(key(task.idx), { x: p.x + kpin * (L.token.w + 4), y: p.y });
        kpin += 1;
      }
    }
    const parked = [...state.buffer].sort((a, b) => a - b);
    parked.forEach((idx, k) => {
      const p = bufferSlot(L, k);
      if (p) out.set(key(idx), p); else hidden.add(key(idx));
    });
    for (const task of state.tasks.values()) {
      const k = key(task.idx);
      if (out.has(k) || hidden.has(k)) continue;
      const lane = this.laneOf.get(task.worker) ?? 0;
      if (task.where === Where.FAILED) out.set(k, fetchSlot(L, lane));
      else if (task.arrived !== null) out.set(k, { x: L.rcvdCursor.x + L.rcvdCursor.w - L.token.w - 6, y: L.rcvdCursor.y + (L.rcvdCursor.h - L.token.h) / 2 }); // taken by next(), about to be handed out
      else if (task.where === Where.INDEX_QUEUE) hidden.add(k); // beyond the visible queue
      else out.set(k, fetchSlot(L, lane));
    }
    return { out, hidden, parked };
  }

  /**
   * @param {import('./reducer.js').LoaderState} state
   * @param {{now:number, wall:number, live:boolean}} clock run time now (s), performance.now() (ms), whether it ticks on
   * @returns {boolean} whether anything is still moving (ask for another frame)
   */
  draw(state, clock) {
    this.ensureLayout(state);
    const L = this.L, ctx = this.ctx;
    const dtMs = this.lastDraw ? Math.min(100, clock.wall - this.lastDraw) : 16;
    this.lastDraw = clock.wall;
    const { out, hidden, parked } = this.targets(state);

    // tokens: appear at the dispatcher, chase their targets, fly to the consumer when released
    const k = 1 - Math.exp(-dtMs / EASE_MS);
    const yielded = state.yield_order; // the latest ones (the reducer trims it)
    const newYields = new Set();
    const fresh = Math.min(MAX_FLYING, Math.max(0, state.batches - this.lastYieldCount), yielded.length);
    for (let i = yielded.length - fresh; i < yielded.length; i++) newYields.add(`${yielded[i][0]}:${yielded[i][1]}`);
    this.lastYieldCount = state.batches;
    let moving = false;
    for (const [key, p] of out) {
      let tok = this.tokens.get(key);
      if (tok === undefined) {
        const d = dispatchPoint(L);
        tok = { x: d.x, y: d.y, idx: +key.split(':')[1], alpha: 1, dying: 0, failed: false };
        this.tokens.set(key, tok);
      }
      tok.dying = 0;
      tok.alpha = 1;
      tok.tx = p.x;
      tok.ty = p.y;
    }
    let flying = 0;
    for (const tok of this.tokens.values()) if (tok.dying) flying += 1;
    for (const [key, tok] of this.tokens) {
      if (out.has(key)) continue;
      if (hidden.has(key)) { this.tokens.delete(key); continue; }
      if (!tok.dying) {
        // released: fly to the consumer and fade; at high rates only a few fly, the rest just go
        if (flying >= MAX_FLYING || !newYields.has(key)) { this.tokens.delete(key); continue; }
        flying += 1;
        tok.dying = clock.wall;
        const c = consumerSlot(L, 0);
        if (c) { tok.tx = c.x; tok.ty = c.y; }
      }
      tok.alpha = 1 - (clock.wall - tok.dying) / FADE_MS;
      if (tok.alpha <= 0) this.tokens.delete(key);
    }
    if (this.snapNext) {
      this.snapNext = false;
      for (const [key, tok] of this.tokens) {
        if (!out.has(key)) this.tokens.delete(key);
        else { tok.x = tok.tx; tok.y = tok.ty; }
      }
    }
    for (const tok of this.tokens.values()) {
      if (tok.tx === undefined) continue;
      const dx = tok.tx - tok.x, dy = tok.ty - tok.y;
      const dist = Math.hypot(dx, dy);
      if (dist > 0.5) {
        // ease out, but never slower than MIN_SPEED, so a token lands instead of creeping
        const step = Math.min(dist, Math.max(dist * k, MIN_SPEED * dtMs));
        tok.x += (dx / dist) * step;
        tok.y += (dy / dist) * step;
        moving = true;
      } else {
        tok.x = tok.tx;
        tok.y = tok.ty;
      }
      if (tok.dying) moving = true;
    }

    // --- boxes and arrows: a cached background, redrawn only when lanes or highlights change
    const bufferFull = state.buffer.length > 0;
    const statuses = this.ids.map((wid) => state.workers.get(wid)?.status ?? '').join(',');
    this.drawBackground(`${this.layoutKey}|${statuses}|${bufferFull}`, state, bufferFull);
    ctx.clearRect(0, 0, L.width, L.height);
    ctx.drawImage(this.bg, 0, 0, L.width, L.height);
    const lastDispatched = state.tasks.get(state.send_idx - 1);
    if (lastDispatched) {
      const lane = L.lanes[this.laneOf.get(lastDispatched.worker) ?? -1];
      if (lane) arrow(ctx, L.dispatcher.x + L.dispatcher.w, L.dispatcher.y + L.dispatcher.h / 2, lane.rect.x - 1, lane.rect.y + lane.rect.h / 2, PALETTE.accent, 1.6);
    }
    // fetch progress: elapsed against this worker's usual fetch time
    const typicalAll = median(allFetchTimes(state));
    L.lanes.forEach((lane, i) => {
      const w = state.workers.get(this.ids[i]);
      if (!w || w.current === null || w.status === WorkerStatus.DIED || w.status === WorkerStatus.EXITED) return;
      const task = state.tasks.get(w.current);
      if (!task || task.fetch_start === null) return;
      const elapsed = Math.max(0, clock.now - task.fetch_start);
      const typical = median(w.fetch_times) || typicalAll || elapsed || 1;
      const frac = Math.min(1, elapsed / (typical * 1.5));
      const slow = elapsed > typical * 3 && elapsed > 0.2;
      const f = lane.fetch;
      ctx.fillStyle = slow ? PALETTE.stuck : PALETTE.fetch;
      ctx.globalAlpha = 0.55;
      ctx.fillRect(f.x + 2, f.y + f.h - 4, (f.w - 4) * frac, 2.5);
      ctx.globalAlpha = 1;
      // a live clock moves the bar and the elapsed time; a paused playhead's clock stands still, and
      // asking for frames then would only keep the page busy
      if (clock.live) moving = true;
    });

    // the index stream in the sampler: the newest dispatched tasks' sample indices
    const recent = [...state.tasks.values()].sort((a, b) => b.idx - a.idx).slice(0, Math.max(1, Math.floor((L.sampler.h - 70) / 16)));
    ctx.font = '11px ui-monospace, SFMono-Regular, Menlo, monospace';
    recent.reverse().forEach((task, i) => {
      const y = L.sampler.y + 50 + i * 16;
      ctx.fillStyle = taskColor(task.idx);
      ctx.fillRect(L.sampler.x + 8, y, 8, 11);
      ctx.fillStyle = PALETTE.dim;
      ctx.fillText(clip(fmtIndices(task.indices, task.n), 16), L.sampler.x + 20, y + 10);
    });

    // head-of-line: the task rcvd_idx waits for, ringed wherever it is
    const head = state.tasks.get(state.rcvd_idx);
    const headTok = head ? this.tokens.get(`${state.epoch}:${head.idx}`) : undefined;

    // tokens: one font for all of them; text is the costly part in software rendering
    ctx.font = `600 ${Math.max(9, Math.round(L.token.h * 0.62))}px ui-monospace, SFMono-Regular, Menlo, monospace`;
    ctx.textAlign = 'center';
    ctx.textBaseline = 'middle';
    const parkedSet = new Set(parked);
    for (const [key, tok] of this.tokens) {
      const task = state.tasks.get(tok.idx);
      const live = task && key === `${state.epoch}:${tok.idx}`;
      ctx.globalAlpha = Math.max(0, Math.min(1, tok.alpha));
      drawToken(ctx, tok.x, tok.y, L.token.w, L.token.h, tok.idx, !!(live && parkedSet.has(tok.idx)), !!(live && task.where === Where.FAILED));
    }
    ctx.globalAlpha = 1;
    if (headTok && bufferFull && head.where !== Where.BUFFER) {
      const pulse = 0.6 + 0.4 * Math.sin(clock.wall / 180);
      ctx.strokeStyle = PALETTE.buffer;
      ctx.globalAlpha = pulse;
      ctx.lineWidth = 2;
      ctx.setLineDash([4, 3]);
      roundRect(ctx, headTok.x - 4, headTok.y - 4, L.token.w + 8, L.token.h + 8, 6);
      ctx.stroke();
      ctx.setLineDash([]);
      ctx.globalAlpha = 1;
      moving = true;
    }
    // the consumer's history: the latest batches handed to the training loop, newest first
    const steps = state.steps > 0;
    const cap = gridCapacity(L.consumer, L.token, steps ? HEADER.consumerSteps : HEADER.consumer);
    const tail = yielded.slice(-cap).reverse();
    tail.forEach(([, idx], i) => {
      const p = consumerSlot(L, i, steps);
      if (!p) return;
      ctx.globalAlpha = Math.max(0.25, 1 - i / cap);
      drawToken(ctx, p.x, p.y, L.token.w, L.token.h, idx, false, false);
    });
    ctx.globalAlpha = 1;
    ctx.textAlign = 'start';
    ctx.textBaseline = 'alphabetic';

    this.updateOverlay(state, clock, parked);
    this.moving = moving;
    return moving;
  }

  /** True when every live token sits where it belongs (released ones may still fade): for screenshots. */
  settled() {
    for (const tok of this.tokens.values()) {
      if (tok.dying) continue;
      if (tok.tx === undefined || Math.abs(tok.tx - tok.x) > 0.5 || Math.abs(tok.ty - tok.y) > 0.5) return false;
    }
    return true;
  }

  /** Boxes and arrows that change only with the layout, worker statuses and the buffer highlight. */
  drawBackground(key, state, bufferFull) {
    if (this.bgKey === key) return;
    this.bgKey = key;
    const L = this.L;
    const dpr = window.devicePixelRatio || 1;
    if (!this.bg) this.bg = document.createElement('canvas');
    this.bg.width = this.canvas.width;
    this.bg.height = this.canvas.height;
    const ctx = /** @type {CanvasRenderingContext2D} */ (this.bg.getContext('2d'));
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, L.width, L.height);
    box(ctx, L.sampler, PALETTE.panel, PALETTE.panelEdge);
    box(ctx, L.dispatcher, PALETTE.panel, PALETTE.panelEdge);
    arrow(ctx, L.sampler.x + L.sampler.w / 2, L.sampler.y + L.sampler.h, L.sampler.x + L.sampler.w / 2, L.dispatcher.y, PALETTE.faint);
    L.lanes.forEach((lane, i) => {
      const w = state.workers.get(this.ids[i]);
      const status = w ? w.status : WorkerStatus.STARTING;
      const alarm = status === WorkerStatus.STUCK || status === WorkerStatus.DIED;
      const tint = alarm ? '#3a1d22' : status === WorkerStatus.EXITED ? '#12171e' : PALETTE.panel;
      box(ctx, lane.rect, tint, alarm ? PALETTE.stuck : PALETTE.panelEdge);
      box(ctx, lane.fetch, alarm ? '#4a1f27' : '#1b2533', alarm ? PALETTE.stuck : '#2d3b50');
      if (L.laneCols > 1) return; // two columns: one arrow in and out of the whole grid, not 64 crossing ones
      arrow(ctx, L.dispatcher.x + L.dispatcher.w, L.dispatcher.y + L.dispatcher.h / 2, lane.rect.x - 1, lane.rect.y + lane.rect.h / 2, '#2b3545', 1);
      arrow(ctx, lane.rect.x + lane.rect.w, lane.rect.y + lane.rect.h / 2, L.result.x - 2, L.result.y + Math.min(L.result.h / 2, 30 + i * 2), '#2b3545');
    });
    if (L.laneCols > 1) {
      const midY = L.top + L.lanesH / 2;
      arrow(ctx, L.dispatcher.x + L.dispatcher.w, L.dispatcher.y + L.dispatcher.h / 2, L.lanesX - 1, midY, '#2b3545', 1.4);
      arrow(ctx, L.lanesX + L.lanesW, midY, L.result.x - 2, L.result.y + Math.min(L.result.h / 2, 60), '#2b3545', 1.4);
    }
    box(ctx, L.result, PALETTE.panel, PALETTE.panelEdge);
    const resultMidY = L.buffer.y + 24;
    if (L.pin === 'active') {
      box(ctx, L.pinThread, '#14222a', '#3d7f8f');
      box(ctx, L.pinned, PALETTE.panel, PALETTE.panelEdge);
      arrow(ctx, L.result.x + L.result.w, L.pinThread.y + 22, L.pinThread.x - 2, L.pinThread.y + 22, '#3d7f8f', 1.4);
      arrow(ctx, L.pinThread.x + L.pinThread.w / 2, L.pinThread.y + L.pinThread.h, L.pinned.x + L.pinned.w / 2, L.pinned.y - 1, '#3d7f8f', 1.2);
    } else if (L.pin === 'disabled') {
      hatch(ctx, L.pinCol);
      arrow(ctx, L.result.x + L.result.w, resultMidY, L.pinCol.x + L.pinCol.w + 2, resultMidY, '#3a4558', 1);
    }
    box(ctx, L.buffer, bufferFull ? '#2e2614' : PALETTE.panel, bufferFull ? PALETTE.buffer : PALETTE.panelEdge, bufferFull ? 2 : 1);
    box(ctx, L.consumer, PALETTE.panel, PALETTE.panelEdge);
    // result queue -> straight on when it is the task rcvd_idx wants; -> reorder buffer when early
    const midY = L.buffer.y + 24;
    const rx = L.pinCol ? L.pinCol.x + L.pinCol.w : L.result.x + L.result.w;
    arrow(ctx, rx, midY, L.buffer.x - 2, midY, bufferFull ? PALETTE.buffer : '#3a4558', 1.4);
    const inY = L.rcvdCursor.y + L.rcvdCursor.h / 2;
    ctx.strokeStyle = '#3a4558';
    ctx.lineWidth = 1.4;
    ctx.beginPath();
    const fromY = L.pin === 'active' ? L.pinned.y + 14 : L.result.y + 14;
    ctx.moveTo(rx, fromY);
    ctx.bezierCurveTo(rx + 14, fromY, rx + 6, L.bypassY, rx + 22, L.bypassY);
    ctx.lineTo(L.buffer.x + L.buffer.w - 10, L.bypassY);
    ctx.stroke();
    arrow(ctx, L.buffer.x + L.buffer.w - 10, L.bypassY, L.rcvdCursor.x - 2, inY - 5, '#3a4558', 1.4);
    arrow(ctx, L.buffer.x + L.buffer.w, L.buffer.y + 24, L.rcvdCursor.x - 2, inY + 5, bufferFull ? PALETTE.buffer : '#3a4558', 1.4);
    ctx.fillStyle = PALETTE.dim;
    ctx.font = '10px system-ui, sans-serif';
    ctx.fillText('in order: straight on', L.buffer.x + 4, L.bypassY - 4);
    ctx.fillText('early', rx + 3, midY - 5);
    box(ctx, L.rcvdCursor, '#14202e', PALETTE.accent);
  }

  updateOverlay(state, clock, parked) {
    const L = this.L;
    this.setText(this.sendEl, String(state.send_idx));
    this.setText(this.rcvdEl, String(state.rcvd_idx));
    const c = state.config;
    this.setText(this.samplerKind, [c.sampler, c.batch_size ? `batch_size ${c.batch_size}` : ''].filter(Boolean).join(' · '));
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
      if (L.compact) { // thin row: the status word only when it matters; the rest in the tooltip
        this.setText(el.status, '');
        this.setAttr(el.lane, 'title', `worker ${wid} · ${s} · ${done} fetched · ${w.queue.length} queued`);
      } else this.setText(el.status, `${s}${L.laneH < 50 ? ' · ' : '\n'}${done} fetched`);
      const task = w.current !== null ? state.tasks.get(w.current) : undefined;
      // compact rows have one line: the alarm word first, then what the tall lane shows on two
      const one = L.compact;
      const sep = one ? ' · ' : '\n';
      const alarm = one && status === WorkerStatus.STUCK ? 'STUCK · ' : '';
      if (one && status === WorkerStatus.DIED) {
        const d = w.died ?? {};
        const held = d.idx !== undefined && d.idx !== null ? `held task ${d.idx}` : 'held no task';
        this.setText(el.fetch, `DIED · ${held.replace("held task", "task")} · ${w.signal || `exit ${w.exitcode}`}`);
        this.setAttr(el.lane, 'data-elapsed', '');
      } else if (status === WorkerStatus.DIED) {
        const d = w.died ?? {};
        const held = d.idx !== undefined && d.idx !== null ? `held task ${d.idx}` : 'held no task';
        let second = sampleLine(d, state);
        if (second && L.laneH >= 40) second = second.replace(' (', '\n(');
        this.setText(el.fetch, `${held}\n${second || clip(fmtIndices(d.indices, 0), 34)}`);
        this.setAttr(el.lane, 'data-elapsed', '');
      } else if (task && status === WorkerStatus.EXITED) {
        this.setText(el.fetch, `task ${task.idx} abandoned${sep}(the worker exited)`);
        this.setAttr(el.lane, 'data-elapsed', '');
      } else if (task) {
        const elapsed = task.fetch_start !== null ? Math.max(0, clock.now - task.fetch_start) : 0;
        let second = status === WorkerStatus.STUCK && w.stuck ? sampleLine(w.stuck, state) : '';
        if (second && L.laneH >= 40) second = second.replace(' (', '\n('); // three short lines fit a tall lane
        this.setText(el.fetch, `${alarm}task ${task.idx} · ${fmtElapsed(elapsed)}${sep}${second || clip(fmtIndices(task.indices, task.n), 34)}`);
        this.setAttr(el.lane, 'data-elapsed', elapsed.toFixed(2));
      } else {
        this.setText(el.fetch, '');
        this.setAttr(el.lane, 'data-elapsed', '');
      }
      const overflow = w.queue.length - queueCapacity(L, i);
      this.setText(el.more, overflow > 0 ? `+${overflow}` : '');
    });
    const queued = liveResultQueue(state);
    let unpinned = queued.length, pinnedN = 0;
    if (L.pin === 'active') {
      pinnedN = queued.filter((i) => state.tasks.get(i)?.pin_end != null).length;
      unpinned -= pinnedN;
      let now = null;
      for (const task of state.tasks.values()) if (task.where === Where.PINNING) now = task;
      this.setText(this.pinNow, now ? `task ${now.idx} · ${fmtElapsed(Math.max(0, clock.now - now.pin_start))}` : 'idle');
      this.setAttr(this.pinEl, 'data-current', now ? now.idx : '');
      const over = pinnedN - gridCapacity(L.pinned, L.token, HEADER.pinned);
      this.setText(this.pinnedEl, `${pinnedN} pinned${over > 0 ? ` (+${over})` : ''}`);
    }
    const hidden = unpinned - gridCapacity(L.result, L.token, HEADER.result);
    this.setText(this.resultEl, `${unpinned} waiting${hidden > 0 ? ` (+${hidden} not shown)` : ''}`);
    const b = this.bufferEl;
    this.setAttr(b, 'data-size', state.buffer.length);
    this.setAttr(b, 'data-high', state.buffer_high);
    this.setAttr(b, 'data-waiting-for', state.buffer.length ? state.rcvd_idx : '');
    const head = state.tasks.get(state.rcvd_idx);
    if (state.buffer.length && head && head.where === Where.BUFFER) {
      this.setText(this.bufferHead, `${state.buffer.length} parked`);
      this.setText(this.bufferSub, `task ${state.rcvd_idx} is here: the next next() takes it`);
    } else if (state.buffer.length) {
      this.setText(this.bufferHead, `${state.buffer.length} parked · waiting for task ${state.rcvd_idx}`);
      this.setText(this.bufferSub, head ? describeWhere(head, state) : '');
    } else {
      this.setText(this.bufferHead, 'empty');
      this.setText(this.bufferSub, state.buffer_high ? `high-water ${state.buffer_high}` : 'results that arrive early wait here');
    }
    this.setText(this.consumerStat, `${state.batches} batches received`);
    const lastWait = state.batches ? lastConsumerWait(state) : null;
    let sub = lastWait === null ? '' : `waited ${fmtDuration(state.consumer_wait)}`;
    let title = 'time the training loop spent inside next() waiting for data';
    if (state.steps) { // the training step reported its own timings (step events): where a batch's time goes
      const per = 1 / state.steps;
      sub += `\nbatch: copy ${fmtDuration(state.step_h2d * per)}\ncompute ${fmtDuration(state.step_compute * per)}`;
      if (state.step_h2d_pageable) sub += `\nunpinned ${fmtDuration(state.step_h2d_pageable * per)}`;
      title = `per batch, averaged over ${state.steps} steps: host-to-device copy to ${state.step_device ?? 'the device'}, `
        + 'the model step, and the same batch copied from pageable (unpinned) memory for comparison';
    }
    this.setText(this.consumerSub, sub);
    if (this.consumerEl.title !== title) this.consumerEl.title = title;
  }
}

/**
 * The result queue as drawn: each live task once. (state.py can list a task twice, or keep one that
 * was already handed out, when a worker's fetch events reach the stream after the pin thread's;
 * the picture never draws a token for a task that is gone, nor two tokens for one task.)
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

/** "sample 2 of 4 (index 17)" from a worker_stuck / worker_died report. */
function sampleLine(report, state) {
  if (report.sample === undefined || report.sample === null) return '';
  const task = state.tasks.get(report.idx);
  const n = task?.n || task?.indices?.length || 0;
  return `sample ${(report.pos ?? 0) + 1}${n ? ` of ${n}` : ''} (index ${report.sample})`;
}

function describeWhere(task, state) {
  switch (task.where) {
    case Where.INDEX_QUEUE: return `it is still queued at worker ${task.worker}`;
    case Where.FETCHING: return `worker ${task.worker} is still fetching it`;
    case Where.RESULT_QUEUE: return task.pin_end !== null ? 'it is pinned, about to be taken' : 'it is on the result queue, not yet taken';
    case Where.PINNING: return 'the pin thread is copying it';
    case Where.FAILED: return `it failed in worker ${task.worker}`;
    default: return '';
  }
}

function lastConsumerWait(state) {
  return state.consumer_wait;
}

export function fmtIndices(indices, n) {
  if (!indices || !indices.length) return n ? `${n} samples` : '';
  const shown = indices.slice(0, 8).join(' ');
  const more = (n || indices.length) - Math.min(indices.length, 8);
  return `[${shown}${more > 0 ? ` …+${more}` : ''}]`;
}

function fmtElapsed(s) {
  return s < 1 ? `${(s * 1000).toFixed(0)} ms` : `${s.toFixed(1)} s`;
}

function clip(s, n) {
  return s.length > n ? `${s.slice(0, n - 1)}…` : s;
}

function median(xs) {
  if (!xs.length) return 0;
  const tail = xs.length > 64 ? xs.slice(-64) : xs;
  const sorted = [...tail].sort((a, b) => a - b);
  return sorted[sorted.length >> 1];
}

function allFetchTimes(state) {
  const out = [];
  for (const w of state.workers.values()) out.push(...w.fetch_times.slice(-16));
  return out;
}

/** A stage that exists but does not run: dashed outline over diagonal hatching. */
function hatch(ctx, r) {
  ctx.save();
  roundRect(ctx, r.x + 0.5, r.y + 0.5, r.w - 1, r.h - 1, 8);
  ctx.fillStyle = '#12171e';
  ctx.fill();
  ctx.clip();
  ctx.strokeStyle = '#1f2732';
  ctx.lineWidth = 6;
  for (let d = -r.h; d < r.w + r.h; d += 16) {
    ctx.beginPath();
    ctx.moveTo(r.x + d, r.y);
    ctx.lineTo(r.x + d + r.h, r.y + r.h);
    ctx.stroke();
  }
  ctx.restore();
  ctx.setLineDash([5, 4]);
  ctx.strokeStyle = '#4b5768';
  ctx.lineWidth = 1;
  roundRect(ctx, r.x + 0.5, r.y + 0.5, r.w - 1, r.h - 1, 8);
  ctx.stroke();
  ctx.setLineDash([]);
}

function roundRect(ctx, x, y, w, h, r) {
  ctx.beginPath();
  ctx.moveTo(x + r, y);
  ctx.arcTo(x + w, y, x + w, y + h, r);
  ctx.arcTo(x + w, y + h, x, y + h, r);
  ctx.arcTo(x, y + h, x, y, r);
  ctx.arcTo(x, y, x + w, y, r);
  ctx.closePath();
}

function box(ctx, r, fill, stroke, lw = 1) {
  roundRect(ctx, r.x + 0.5, r.y + 0.5, r.w - 1, r.h - 1, Math.min(8, r.h / 3));
  ctx.fillStyle = fill;
  ctx.fill();
  ctx.strokeStyle = stroke;
  ctx.lineWidth = lw;
  ctx.stroke();
}

function arrow(ctx, x0, y0, x1, y1, color, lw = 1) {
  ctx.strokeStyle = color;
  ctx.fillStyle = color;
  ctx.lineWidth = lw;
  ctx.beginPath();
  const mx = (x0 + x1) / 2;
  ctx.moveTo(x0, y0);
  ctx.bezierCurveTo(mx, y0, mx, y1, x1 - 5, y1);
  ctx.stroke();
  ctx.beginPath();
  ctx.moveTo(x1, y1);
  ctx.lineTo(x1 - 6, y1 - 3.5);
  ctx.lineTo(x1 - 6, y1 + 3.5);
  ctx.closePath();
  ctx.fill();
}

/** A task token: a rounded chip in the task's color with its id; parked ones get an amber rim. */
export function drawToken(ctx, x, y, w, h, idx, parked, failed) {
  roundRect(ctx, x, y, w, h, Math.min(5, h / 3));
  ctx.fillStyle = failed ? '#5a1e25' : taskColor(idx);
  ctx.fill();
  if (parked || failed) {
    ctx.strokeStyle = failed ? PALETTE.stuck : PALETTE.buffer;
    ctx.lineWidth = 2;
    ctx.stroke();
  }
  ctx.fillStyle = failed ? '#ffd7d5' : taskInk(idx);
  ctx.fillText(String(idx), x + w / 2, y + h / 2 + 0.5);
}

// The pipeline picture: a canvas for boxes, arrows and moving task tokens, and a thin DOM overlay
// for text that tests and screen readers read (lanes, cursors, reorder buffer). Draws from a
// LoaderState; never mutates it. One draw per animation frame, called by the scheduler.

import { PALETTE, taskColor } from '../model/colors.js';
import {
  pipelineLayout,
  queueSlot,
  fetchSlot,
  resultSlot,
  bufferSlot,
  consumerSlot,
  handSlot,
  gridCapacity,
  dispatchPoint,
  HEADER,
  pinSlot,
  pinnedSlot,
  pipelineHeight,
} from '../model/layout.js';
import { pinStage } from '../model/pin.js';
import { Where, WorkerStatus } from '../model/reducer.js';
import { PipelineOverlay, liveResultQueue, fmtIndices, clip } from './pipeline-overlay.js';
import { paintBackground, arrow, roundRect, drawToken } from './pipeline-paint.js';

const EASE_MS = 60; // token motion time constant
const MIN_SPEED = 0.6; // px per ms
const FADE_MS = 600;
const MAX_FLYING = 24; // tokens animated at once: released ones, and new ones per frame
// following a stream, the overlay's words change at most 10 times a second: faster reads as a
// blur, and each change costs the page a style, layout and paint (a fifth of a frame at 64 workers)
const OVERLAY_LIVE_MS = 100;
// the head-of-line ring pulses this long after a task becomes the head, then holds still: a page
// paused on a full reorder buffer would otherwise ask for 60 frames a second for ever
const RING_PULSE_MS = 3000;

/** @typedef {import('../model/reducer.js').LoaderState} LoaderState */
/** @typedef {import('../model/layout.js').Layout} Layout */
/** @typedef {import('../model/layout.js').Point} Point */
/**
 * A task's token on the canvas: where it is, where it goes (`tx`, `ty`; unset until it has a
 * place), and since when it fades out after its release (`dying`, performance.now(); 0: alive).
 * @typedef {{x:number, y:number, tx?:number, ty?:number, idx:number, alpha:number, dying:number, failed:boolean}} Token
 */

export { pipelineHeight, fmtIndices };

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
    // the host's width, kept by an observer as the timeline's is: read in every frame, clientWidth forced
    // a layout of the page the frame had changed (110 ms of a 1,024-rank job view's boot)
    this.width = host.clientWidth;
    /** @type {(() => void)|null} the host was resized: a frame is wanted */
    this.onInvalidate = null;
    new ResizeObserver(() => {
      if (host.clientWidth === this.width) return; // the draw sets the host's height: no new layout for that
      this.width = host.clientWidth;
      this.onInvalidate?.();
    }).observe(host);
    /** @type {((worker:number) => void)|null} a lane was clicked */
    this.onLaneClick = null;
    this.overlayView = new PipelineOverlay(this.overlay, (wid) => this.onLaneClick?.(wid));
    this.ctx = /** @type {CanvasRenderingContext2D} */ (this.canvas.getContext('2d'));
    /** @type {Map<string, Token>} */
    this.tokens = new Map();
    this.layoutKey = '';
    /** @type {Layout|null} laid out by the first draw */
    this.L = null;
    /** @type {import('../model/pin.js').PinStage|null} */
    this.pin = null;
    /** @type {Map<number, number>} lane of each worker id */
    this.laneOf = new Map();
    /** @type {number[]} worker ids, lane by lane */
    this.ids = [];
    this.scale = 1;
    /** @type {HTMLCanvasElement|null} the cached background (boxes, labels) */
    this.bg = null;
    this.bgKey = '';
    this.lastDraw = 0;
    this.moving = false;
    this.lastYieldCount = 0;
    this.snapNext = false; // after a jump (seek), put tokens where they belong instead of flying
    this.lastOverlay = -Infinity; // when the overlay's words were last brought up to date (performance.now())
    this.ringKey = ''; // the head-of-line task the ring marks, and since when (performance.now())
    this.ringSince = 0;
    this.overlayDeferred = false; // the last draw left the overlay's words for later (pacing)
    /** @type {Set<string>} tasks (`epoch:idx`) a search found or a click selected: ringed */
    this.highlight = new Set();
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

  /** The layout of the last draw. */
  get layout() {
    if (!this.L) throw new Error('PipelineView: draw() lays the picture out before its parts are drawn');
    return this.L;
  }

  /** Rebuild the layout and overlay when the size or the number of lanes changes. @param {LoaderState} state */
  ensureLayout(state) {
    const ids = [...state.workers.keys()].sort((a, b) => a - b);
    const lanes = Math.max(ids.length, 1);
    const width = this.width;
    const height = pipelineHeight(lanes);
    const digits = Math.max(2, String(Math.max(state.send_idx - 1, 0)).length);
    const inProcess = state.config.num_workers === 0;
    const pin = pinStage(state);
    const key = `${width}x${height}:${ids.join(',')}:${digits}:${inProcess}:${pin.mode}:${pin.why}`;
    if (key === this.layoutKey) return;
    this.layoutKey = key;
    this.pin = pin;
    const L = pipelineLayout({ width, height, lanes: ids.length, digits, inProcess, pin: pin.mode });
    this.L = L;
    this.laneOf = new Map(ids.map((id, i) => [id, i]));
    this.ids = ids;
    const dpr = window.devicePixelRatio || 1;
    this.canvas.width = Math.round(L.width * dpr);
    this.canvas.height = Math.round(height * dpr);
    this.canvas.style.width = `${L.width}px`;
    this.canvas.style.height = `${height}px`;
    this.overlay.style.width = `${L.width}px`;
    this.overlay.style.height = `${height}px`;
    // a window narrower than even the slim picture (layout.js NARROW_MIN): scale the whole picture (canvas and overlay
    // alike, so clicks still land on their lanes) instead of scrolling the page sideways
    const scale = width > 0 && L.width > width ? width / L.width : 1;
    this.scale = scale;
    const t = scale < 1 ? `scale(${scale})` : '';
    this.canvas.style.transform = t;
    this.overlay.style.transform = t;
    this.host.classList.toggle('scaled', scale < 1);
    this.host.style.height = `${Math.ceil(height * scale)}px`;
    this.ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    this.overlayView.build(L, ids, inProcess, pin);
    this.lastOverlay = -Infinity;
    this.tokens.clear();
    this.bgKey = '';
  }

  /** Where each live task should be now. @param {LoaderState} state */
  targets(state) {
    const L = this.layout;
    /** @type {Map<string, Point>} */
    const out = new Map();
    /** @type {Set<string>} */
    const hidden = new Set();
    const key = (/** @type {number} */ idx) => `${state.epoch}:${idx}`;
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
    let kr = 0,
      kp = 0,
      kpin = 0;
    const pinning = L.pin === 'active';
    for (const idx of liveResultQueue(state)) {
      const task = state.tasks.get(idx);
      const pinned = pinning && task !== undefined && task.pin_end !== null;
      const p = pinned ? pinnedSlot(L, kp++) : resultSlot(L, kr++);
      if (p) out.set(key(idx), p);
      else hidden.add(key(idx));
    }
    if (pinning) {
      for (const task of state.tasks.values()) {
        if (task.where !== Where.PINNING) continue;
        const p = pinSlot(L);
        if (!p) break; // a picture with a pin column has its pin thread's box
        out.set(key(task.idx), { x: p.x + kpin * (L.token.w + 4), y: p.y });
        kpin += 1;
      }
    }
    const parked = [...state.parked].sort((a, b) => a - b);
    parked.forEach((idx, k) => {
      const p = bufferSlot(L, k);
      if (p) out.set(key(idx), p);
      else hidden.add(key(idx));
    });
    for (const task of state.tasks.values()) {
      const k = key(task.idx);
      if (out.has(k) || hidden.has(k)) continue;
      const lane = this.laneOf.get(task.worker) ?? 0;
      if (task.where === Where.FAILED) out.set(k, fetchSlot(L, lane));
      else if (task.arrived !== null)
        out.set(k, handSlot(L)); // taken by next(), about to be handed out: its own lane
      else if (task.where === Where.INDEX_QUEUE)
        hidden.add(k); // beyond the visible queue
      else out.set(k, fetchSlot(L, lane));
    }
    return { out, hidden, parked };
  }

  /**
   * @param {import('../model/reducer.js').LoaderState} state
   * @param {{now:number, wall:number, live:boolean, paced?:boolean}} clock run time now (s), performance.now() (ms),
   *   whether it ticks on, whether a stream is followed (the overlay's words are paced)
   * @returns {boolean} whether anything is still moving (ask for another frame)
   */
  draw(state, clock) {
    this.ensureLayout(state);
    const L = this.layout,
      ctx = this.ctx;
    const dtMs = this.lastDraw ? Math.min(100, clock.wall - this.lastDraw) : 16;
    this.lastDraw = clock.wall;
    const { out, hidden, parked } = this.targets(state);
    let moving = this.moveTokens(state, out, hidden, clock.wall, dtMs);
    const bufferFull = state.parked.length > 0;
    const statuses = this.ids.map((wid) => state.workers.get(wid)?.status ?? '').join(',');
    this.drawBackground(`${this.layoutKey}|${statuses}|${bufferFull}|${PALETTE.bg}`, state, bufferFull);
    ctx.clearRect(0, 0, L.width, L.height);
    if (this.bg) ctx.drawImage(this.bg, 0, 0, L.width, L.height);
    this.drawDispatch(state);
    // a live clock moves the fetch bars and the elapsed times; a paused playhead's clock stands
    // still, and asking for frames then would only keep the page busy
    if (this.drawFetchProgress(state, clock.now) && clock.live) moving = true;
    this.drawSamplerIndices(state);
    // tokens: one font for all of them; text is the costly part in software rendering (stamping
    // cached images instead measured twice as slow: 4.9 against 2.2 ms for 300 tokens)
    ctx.font = `600 ${Math.max(9, Math.round(L.token.h * 0.62))}px ui-monospace, SFMono-Regular, Menlo, monospace`;
    ctx.textAlign = 'center';
    ctx.textBaseline = 'middle';
    this.drawTokens(state, new Set(parked));
    if (bufferFull && this.drawHeadRing(state, clock.wall)) moving = true;
    this.drawConsumerHistory(state);
    ctx.textAlign = 'start';
    ctx.textBaseline = 'alphabetic';
    this.overlayDeferred = !!clock.paced && clock.wall - this.lastOverlay < OVERLAY_LIVE_MS;
    if (!this.overlayDeferred) {
      this.overlayView.update(state, clock);
      this.lastOverlay = clock.wall;
    }
    this.moving = moving;
    return moving;
  }

  /**
   * Tokens appear at the dispatcher, chase their targets, and fly to the consumer when released.
   * @param {LoaderState} state @param {Map<string, Point>} out @param {Set<string>} hidden
   * @param {number} wall @param {number} dtMs
   * @returns {boolean} whether one is still on its way
   */
  moveTokens(state, out, hidden, wall, dtMs) {
    const L = this.layout;
    const yielded = state.yield_order; // the latest ones (the reducer trims it)
    const newYields = new Set();
    const fresh = Math.min(MAX_FLYING, Math.max(0, state.batches - this.lastYieldCount), yielded.length);
    for (let i = yielded.length - fresh; i < yielded.length; i++) newYields.add(`${yielded[i][0]}:${yielded[i][1]}`);
    this.lastYieldCount = state.batches;
    // more new tasks in one frame than the eye can follow (a fast live run): they appear where they
    // belong instead of a cloud of tokens flying out of the dispatcher over the lanes
    let arriving = 0;
    for (const key of out.keys()) if (!this.tokens.has(key)) arriving += 1;
    const from = arriving > MAX_FLYING ? null : dispatchPoint(L);
    for (const [key, p] of out) {
      let tok = this.tokens.get(key);
      if (tok === undefined) {
        const d = from ?? p;
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
      if (hidden.has(key)) {
        this.tokens.delete(key);
        continue;
      }
      if (!tok.dying) {
        // released: fly to the consumer and fade; at high rates only a few fly, the rest just go
        if (flying >= MAX_FLYING || !newYields.has(key)) {
          this.tokens.delete(key);
          continue;
        }
        flying += 1;
        tok.dying = wall;
        const c = consumerSlot(L, 0);
        if (c) {
          tok.tx = c.x;
          tok.ty = c.y;
        }
      }
      tok.alpha = 1 - (wall - tok.dying) / FADE_MS;
      if (tok.alpha <= 0) this.tokens.delete(key);
    }
    if (this.snapNext) {
      this.snapNext = false;
      for (const [key, tok] of this.tokens) {
        if (!out.has(key)) this.tokens.delete(key);
        else if (tok.tx !== undefined && tok.ty !== undefined) {
          tok.x = tok.tx;
          tok.y = tok.ty;
        }
      }
    }
    return this.stepTokens(dtMs);
  }

  /**
   * One frame of motion: ease out, but never slower than MIN_SPEED, so a token lands instead of creeping.
   * @param {number} dtMs
   */
  stepTokens(dtMs) {
    const k = 1 - Math.exp(-dtMs / EASE_MS);
    let moving = false;
    for (const tok of this.tokens.values()) {
      if (tok.tx === undefined || tok.ty === undefined) continue;
      const dx = tok.tx - tok.x,
        dy = tok.ty - tok.y;
      const dist = Math.hypot(dx, dy);
      if (dist > 0.5) {
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
    return moving;
  }

  /** The arrow from the dispatcher to the lane of the task dispatched last. @param {LoaderState} state */
  drawDispatch(state) {
    const L = this.layout;
    const last = state.tasks.get(state.send_idx - 1);
    const lane = last ? L.lanes[this.laneOf.get(last.worker) ?? -1] : undefined;
    if (lane)
      arrow(
        this.ctx,
        L.dispatcher.x + L.dispatcher.w,
        L.dispatcher.y + L.dispatcher.h / 2,
        lane.rect.x - 1,
        lane.rect.y + lane.rect.h / 2,
        PALETTE.accent,
        1.6,
      );
  }

  /**
   * Fetch progress: elapsed against this worker's usual fetch time (red: slow).
   * @param {LoaderState} state @param {number} now
   * @returns {boolean} whether a bar was drawn (it grows as the clock ticks)
   */
  drawFetchProgress(state, now) {
    const ctx = this.ctx;
    const typicalAll = median(allFetchTimes(state));
    let drawn = false;
    this.layout.lanes.forEach((lane, i) => {
      const w = state.workers.get(this.ids[i]);
      if (!w || w.current === null || w.status === WorkerStatus.DIED || w.status === WorkerStatus.EXITED) return;
      const task = state.tasks.get(w.current);
      if (!task || task.fetch_start === null) return;
      const elapsed = Math.max(0, now - task.fetch_start);
      const typical = median(w.fetch_times) || typicalAll || elapsed || 1;
      const frac = Math.min(1, elapsed / (typical * 1.5));
      const slow = elapsed > typical * 3 && elapsed > 0.2;
      const f = lane.fetch;
      ctx.fillStyle = slow ? PALETTE.stuck : PALETTE.fetch;
      ctx.globalAlpha = 0.55;
      ctx.fillRect(f.x + 2, f.y + f.h - 4, (f.w - 4) * frac, 2.5);
      ctx.globalAlpha = 1;
      drawn = true;
    });
    return drawn;
  }

  /** The index stream in the sampler: the newest dispatched tasks' sample indices. @param {LoaderState} state */
  drawSamplerIndices(state) {
    const L = this.layout,
      ctx = this.ctx;
    const recent = [...state.tasks.values()]
      .sort((a, b) => b.idx - a.idx)
      .slice(0, Math.max(1, Math.floor((L.sampler.h - 70) / 16)));
    ctx.font = '11px ui-monospace, SFMono-Regular, Menlo, monospace';
    recent.reverse().forEach((task, i) => {
      const y = L.sampler.y + 50 + i * 16;
      ctx.fillStyle = taskColor(task.idx);
      ctx.fillRect(L.sampler.x + 8, y, 8, 11);
      ctx.fillStyle = PALETTE.dim;
      ctx.fillText(clip(fmtIndices(task.indices, task.n), 16), L.sampler.x + 20, y + 10);
    });
  }

  /**
   * Every token where it is now; parked ones with an amber rim, failed ones red.
   * @param {LoaderState} state
   * @param {Set<number>} parked
   */
  drawTokens(state, parked) {
    const L = this.layout,
      ctx = this.ctx;
    for (const [key, tok] of this.tokens) {
      const task = state.tasks.get(tok.idx);
      const live = task !== undefined && key === `${state.epoch}:${tok.idx}`;
      ctx.globalAlpha = Math.max(0, Math.min(1, tok.alpha));
      drawToken(
        ctx,
        tok.x,
        tok.y,
        L.token.w,
        L.token.h,
        tok.idx,
        !!(live && parked.has(tok.idx)),
        !!(live && task.where === Where.FAILED),
      );
      if (this.highlight.size && this.highlight.has(key)) this.ring(tok.x, tok.y);
    }
    ctx.globalAlpha = 1;
  }

  /** A found task's ring: a solid outline around its token. @param {number} x @param {number} y */
  ring(x, y) {
    const ctx = this.ctx,
      t = this.layout.token;
    ctx.globalAlpha = 1;
    ctx.strokeStyle = PALETTE.hit;
    ctx.lineWidth = 2;
    roundRect(ctx, x - 3, y - 3, t.w + 6, t.h + 6, 6);
    ctx.stroke();
  }

  /**
   * Head-of-line: the task rcvd_idx waits for, ringed wherever it is while later ones are parked.
   * @param {LoaderState} state @param {number} wall
   * @returns {boolean} whether the ring still pulses (ask for another frame)
   */
  drawHeadRing(state, wall) {
    const head = state.tasks.get(state.rcvd_idx);
    const key = head ? `${state.epoch}:${head.idx}` : '';
    const tok = head ? this.tokens.get(key) : undefined;
    if (!head || !tok || head.where === Where.PARKED) return false;
    if (key !== this.ringKey) {
      this.ringKey = key;
      this.ringSince = wall;
    }
    const pulsing = wall - this.ringSince < RING_PULSE_MS;
    const ctx = this.ctx,
      t = this.layout.token;
    ctx.strokeStyle = PALETTE.buffer;
    ctx.globalAlpha = pulsing ? 0.6 + 0.4 * Math.sin(wall / 180) : 1;
    ctx.lineWidth = 2;
    ctx.setLineDash([4, 3]);
    roundRect(ctx, tok.x - 4, tok.y - 4, t.w + 8, t.h + 8, 6);
    ctx.stroke();
    ctx.setLineDash([]);
    ctx.globalAlpha = 1;
    return pulsing;
  }

  /**
   * The consumer's history: the latest batches handed to the training loop, newest first, fading.
   * @param {LoaderState} state
   */
  drawConsumerHistory(state) {
    const L = this.layout,
      ctx = this.ctx;
    const steps = state.steps > 0;
    const cap = gridCapacity(L.consumer, L.token, steps ? HEADER.consumerSteps : HEADER.consumer);
    const tail = state.yield_order.slice(-cap).reverse();
    tail.forEach(([epoch, idx], i) => {
      const p = consumerSlot(L, i, steps);
      if (!p) return;
      ctx.globalAlpha = Math.max(0.25, 1 - i / cap);
      drawToken(ctx, p.x, p.y, L.token.w, L.token.h, idx, false, false);
      if (this.highlight.size && this.highlight.has(`${epoch}:${idx}`)) this.ring(p.x, p.y);
    });
    ctx.globalAlpha = 1;
  }

  /** True when every live token sits where it belongs (released ones may still fade): for screenshots. */
  settled() {
    for (const tok of this.tokens.values()) {
      if (tok.dying) continue;
      if (
        tok.tx === undefined ||
        tok.ty === undefined ||
        Math.abs(tok.tx - tok.x) > 0.5 ||
        Math.abs(tok.ty - tok.y) > 0.5
      )
        return false;
    }
    return true;
  }

  /**
   * Repaint the cached background when the layout, a worker's status or the buffer highlight changed.
   * @param {string} key @param {LoaderState} state @param {boolean} bufferFull
   */
  drawBackground(key, state, bufferFull) {
    if (this.bgKey === key) return;
    this.bgKey = key;
    const dpr = window.devicePixelRatio || 1;
    const bg = this.bg ?? document.createElement('canvas');
    this.bg = bg;
    bg.width = this.canvas.width;
    bg.height = this.canvas.height;
    const ctx = /** @type {CanvasRenderingContext2D} */ (bg.getContext('2d'));
    const L = this.layout;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, L.width, L.height);
    paintBackground(ctx, L, state, this.ids, bufferFull);
  }
}

/** @param {number[]} xs */
function median(xs) {
  if (!xs.length) return 0;
  const tail = xs.length > 64 ? xs.slice(-64) : xs;
  const sorted = [...tail].sort((a, b) => a - b);
  return sorted[sorted.length >> 1];
}

/** @param {LoaderState} state */
function allFetchTimes(state) {
  /** @type {number[]} */
  const out = [];
  for (const w of state.workers.values()) out.push(...w.fetch_times.slice(-16));
  return out;
}

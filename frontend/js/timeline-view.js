// The timeline canvas: per rank, one row per worker (fetch spans), one for the pin-memory thread
// (when the loader pins), one for the consumer (time waiting for each batch). Wheel zooms, drag
// pans, Shift+drag selects a time range, double-click fits the whole run; hover names the span;
// focused, W/S zoom and A/D pan (keys.js). The strip with the time axis is the scrubber: click or
// drag there to move the playhead. Draws only what is visible; zoomed out, each pixel column shows
// how busy the row was. Fetches a finding was about (stuck, a worker's death) keep their red mark
// and label after they, or the run, ended; search hits are outlined. A run with memory samples gets
// a memory lane under each sampled worker, one for the main process and one for the host's headroom
// (memory.js's series: each sample holds until the next).

import { PALETTE, taskColor, taskHue } from './colors.js';
import { fitWindow, zoomWindow, panWindow, ticks, fmtDuration } from './timeline-store.js';
import { fmtIndices } from './pipeline-view.js';
import { fillLabel, clearLabels, fitText } from './canvas-text.js';
import { MAIN, headroomScale, pointAt, procAt, rssScale } from './memory.js';
import { mb } from './memory-view.js';

export const GUTTER = 112;
export const AXIS = 22;
const CONSUMER_H = 22;
const PIN_H = 16;
const GROUP_H = 16;
const MEMORY_H = 14; // a memory lane: room for its 11 px name in the gutter
// following live, 4 redraws a second at most: the view scrolls on, its spans need no more, and at
// 64 workers on a busy machine a redraw costs 15-20 ms of the main thread that reads the socket
const LIVE_REDRAW_MS = 250;
const LIVE_SHARE = 8; // following live, a redraw waits at least this many times its own cost: it keeps to an eighth of the main thread

/**
 * @typedef {{store: import('./timeline-store.js').TimelineStore, label: string, offset: number,
 *   inProcess?: boolean, pin?: import('./pin.js').PinStage, slow?: number[], primary?: boolean,
 *   memory?: import('./memory.js').MemoryModel}} Track
 * `offset` (s) is added to the track's run times to put several ranks on one clock; `primary`: the
 * selected rank's; `memory`: the run's memory samples (its lanes, when it has any).
 * @typedef {{track: Track, y: number, h: number, label: string}} RowBox
 * @typedef {RowBox & ({kind: 'worker', wid: number} | {kind: 'pin', pin: import('./pin.js').PinStage}
 *   | {kind: 'memory', key: number, memory: import('./memory.js').MemoryModel}
 *   | {kind: 'headroom', memory: import('./memory.js').MemoryModel} | {kind: 'scale', memory: import('./memory.js').MemoryModel}
 *   | {kind: 'group' | 'consumer'})} Row
 * @typedef {{rows: Row[], rh: number, height: number, width: number}} Geometry
 * @typedef {{ctx: CanvasRenderingContext2D, g: Geometry, t0: number, t1: number, X: (t: number) => number,
 *   plotW: number, nowT: number}} DrawFrame what one draw() hands each part
 * @typedef {{track: Track, worker: number, idx: number, epoch: number}} SpanHit a clicked fetch span
 * @typedef {import('./timeline-store.js').SpanColumn} SpanColumn
 * @typedef {import('./timeline-store.js').TimeWindow} TimeWindow
 * @typedef {{worker: number|null, t0: number, t1: number}} Outline a search hit: a worker's (null: the consumer's) span, on the primary clock
 * @typedef {{x: number, y: number, w: number, h: number}} Box
 */
const LABEL_PX = 11; // every text the timeline draws is at least this size
const FONT = `${LABEL_PX}px system-ui, sans-serif`;
const BOLD = `600 ${LABEL_PX}px system-ui, sans-serif`;
const MIN_DRAG_PX = 3; // a Shift+drag shorter than this is a click, not a selection

export class TimelineView {
  /** @param {HTMLElement} host @param {import('./timeline-store.js').TimelineStore} store */
  constructor(host, store) {
    this.host = host;
    this.canvas = document.createElement('canvas');
    this.canvas.className = 'timeline-canvas';
    // focusable: W/S zoom, A/D (and the arrows) pan once it has focus (keys.js)
    this.canvas.tabIndex = 0;
    this.canvas.setAttribute('role', 'application');
    this.canvas.setAttribute('aria-roledescription', 'timeline');
    this.canvas.setAttribute('aria-label', 'timeline of fetches per worker, pinning and consumer waits; '
      + 'W and S zoom, A and D pan, Shift+drag selects a time range, click the time axis to move the playhead; ? lists the keys');
    this.tip = document.createElement('div');
    this.tip.className = 'tooltip';
    this.tip.hidden = true;
    host.append(this.canvas, this.tip);
    this.ctx = /** @type {CanvasRenderingContext2D} */ (this.canvas.getContext('2d'));
    // the host's width, kept by an observer: read in a frame, after the picture's overlay changed
    // the page, clientWidth forced a layout of the whole page a second time in every frame
    this.width = host.clientWidth;
    new ResizeObserver(() => {
      this.width = host.clientWidth;
      this.invalidate();
    }).observe(host);
    /** @type {Track[]} */
    this.tracks = [{ store, label: '', offset: 0 }];
    this.follow = true;
    this.view = { t0: 0, t1: 1 };
    this.drawn = '';
    /** @type {{x: number, y: number}|null} */
    this.hover = null;
    /** @type {Geometry|null} the rows of the last draw (hit tests use it) */
    this.geo = null;
    /** @type {(t: number) => number} canvas x of a time on the first track's clock (set by draw) */
    this.X = (t) => t;
    this.lastFrameMs = 0;
    this.mode = 'spans';
    this.lastDrawWall = 0;
    this.forced = false;
    this.deferred = false; // the last draw() was skipped for pacing
    /** @type {number|null} playhead, in the first track's run time; null: none (live) */
    this.playhead = null;
    /** @type {((t:number) => void)|null} the user clicked or dragged on the axis */
    this.onSeek = null;
    /** @type {(() => void)|null} */
    this.onInvalidate = null;
    /** @type {((span: SpanHit) => void)|null} a fetch span was clicked */
    this.onSpanClick = null;
    /** @type {TimeWindow|null} the selected time range (first track's clock) */
    this.selection = null;
    /** @type {((sel: TimeWindow|null) => void)|null} the user selected a range (or cleared it) */
    this.onSelect = null;
    /** @type {((view: TimeWindow|null) => void)|null} the user zoomed or panned (null: fit again) */
    this.onView = null;
    /** @type {Outline[]} search hits to outline */
    this.hits = [];
    /** @type {Box[]} labels placed in the plot in this draw: one that would overlap them is left out */
    this.placed = [];
    this.bind();
  }

  /** The selected rank's track: its clock is the view's clock (offset 0). */
  get primary() {
    return this.tracks.find((t) => t.primary) ?? this.tracks[0];
  }

  get store() {
    return this.primary.store;
  }

  /** @param {import('./timeline-store.js').TimelineStore} s */
  set store(s) {
    this.tracks = [{ ...this.tracks[0], store: s }];
  }

  /** @param {Track[]} tracks */
  setTracks(tracks) {
    this.tracks = tracks;
    this.invalidate();
  }

  /** Rows top to bottom: group headers (several ranks), workers, pin thread, consumer. @returns {Geometry} */
  geometry() {
    const multi = this.tracks.length > 1;
    let lanes = 0;
    for (const tr of this.tracks) lanes += tr.store.workers.size;
    const rh = lanes <= 8 ? 22 : lanes <= 16 ? 14 : lanes <= 40 ? 9 : lanes <= 72 ? 8 : 6;
    /** @type {Row[]} */
    const rows = [];
    let y = AXIS;
    for (const tr of this.tracks) {
      if (multi) {
        rows.push({ kind: 'group', track: tr, y, h: GROUP_H, label: tr.primary ? `${tr.label}  (shown above)` : tr.label });
        y += GROUP_H;
      }
      const ids = [...tr.store.workers.keys()].sort((a, b) => a - b);
      const memory = tr.memory?.series.length ? tr.memory : null;
      for (const wid of ids) {
        rows.push({ kind: 'worker', track: tr, wid, y, h: rh, label: tr.inProcess ? 'main process' : `worker ${wid}` });
        y += rh;
        if (memory && !tr.inProcess && memory.procs.has(wid)) {
          rows.push({ kind: 'memory', track: tr, key: wid, memory, y, h: MEMORY_H, label: '  memory' });
          y += MEMORY_H;
        }
      }
      if (tr.pin && tr.pin.mode !== 'none') {
        y += 3;
        rows.push({ kind: 'pin', track: tr, pin: tr.pin, y, h: PIN_H, label: 'pin memory' });
        y += PIN_H;
      }
      y += 4;
      rows.push({ kind: 'consumer', track: tr, y, h: CONSUMER_H, label: 'consumer waits' });
      y += CONSUMER_H + 6;
      if (memory) y = memoryRows(rows, tr, memory, y);
    }
    return { rows, rh, height: y + 2, width: Math.max(this.width, 400) };
  }

  /** Time at canvas x (first track's clock). @param {number} x */
  timeAt(x) {
    // before the first draw (a wheel or click in its first frame), the width geometry() will draw
    const width = this.geo ? this.geo.width : Math.max(this.width, 400);
    return this.view.t0 + ((x - GUTTER) / (width - GUTTER)) * (this.view.t1 - this.view.t0);
  }

  /** The window shown, fixed (no longer following the run); `user`: the user moved it. @param {TimeWindow} view @param {boolean} [user] */
  setView(view, user = true) {
    this.view = { t0: view.t0, t1: view.t1 };
    this.follow = false;
    this.invalidate();
    if (user) this.onView?.(this.view);
  }

  /**
   * Zoom by `factor` (< 1: in) around the pointer when it is over the plot, else around the middle.
   * @param {number} factor
   */
  zoomBy(factor) {
    const at = this.hover && this.hover.x >= GUTTER ? this.timeAt(this.hover.x) : (this.view.t0 + this.view.t1) / 2;
    this.setView(zoomWindow(this.view, at, factor));
  }

  /** Pan by `share` of the window's width (> 0: later). @param {number} share */
  panBy(share) {
    this.setView(panWindow(this.view, share * (this.view.t1 - this.view.t0)));
  }

  /** Select [t0, t1] (first track's clock), or nothing. @param {TimeWindow|null} sel @param {boolean} [user] */
  select(sel, user = true) {
    this.selection = sel && sel.t1 > sel.t0 ? { t0: sel.t0, t1: sel.t1 } : null;
    this.invalidate();
    if (user) this.onSelect?.(this.selection);
  }

  /** @param {Outline[]} hits */
  outline(hits) {
    this.hits = hits;
    this.invalidate();
  }

  bind() {
    const c = this.canvas;
    c.addEventListener('wheel', (ev) => {
      ev.preventDefault();
      const rect = c.getBoundingClientRect();
      const x = ev.clientX - rect.left;
      if (x < GUTTER) return;
      const factor = Math.exp((ev.deltaY || ev.deltaX) * 0.0015);
      this.setView(zoomWindow(this.view, this.timeAt(x), factor));
    }, { passive: false });
    /** @type {{kind: 'scrub'} | {kind: 'select', x: number, t: number} | {kind: 'pan', x: number, view: TimeWindow, moved: boolean} | null} */
    let drag = null;
    c.addEventListener('pointerdown', (ev) => {
      const rect = c.getBoundingClientRect();
      const x = ev.clientX - rect.left, y = ev.clientY - rect.top;
      c.setPointerCapture(ev.pointerId);
      if (y < AXIS && x >= GUTTER && this.onSeek) {
        drag = { kind: 'scrub' };
        this.onSeek(this.timeAt(x));
        return;
      }
      // Shift+drag selects a range of time, as in Perfetto; a plain drag pans
      if (ev.shiftKey && x >= GUTTER) {
        drag = { kind: 'select', x: ev.clientX, t: this.timeAt(x) };
        return;
      }
      drag = { kind: 'pan', x: ev.clientX, view: { ...this.view }, moved: false };
    });
    c.addEventListener('pointermove', (ev) => {
      const rect = c.getBoundingClientRect();
      if (drag?.kind === 'scrub') {
        this.onSeek?.(this.timeAt(Math.max(GUTTER, ev.clientX - rect.left)));
        return;
      }
      if (drag?.kind === 'select') {
        if (Math.abs(ev.clientX - drag.x) >= MIN_DRAG_PX) {
          const t = this.timeAt(Math.max(GUTTER, ev.clientX - rect.left));
          this.select({ t0: Math.min(drag.t, t), t1: Math.max(drag.t, t) }, false);
        }
        return;
      }
      if (drag) {
        const dx = ev.clientX - drag.x;
        if (Math.abs(dx) > 2) {
          drag.moved = true;
          const dt = -(dx / ((this.geo?.width ?? this.width) - GUTTER)) * (drag.view.t1 - drag.view.t0);
          this.setView(panWindow(drag.view, dt), false);
        }
        return;
      }
      this.hover = { x: ev.clientX - rect.left, y: ev.clientY - rect.top };
      c.style.cursor = this.hover.y < AXIS && this.onSeek ? 'col-resize' : 'crosshair';
      this.invalidate();
    });
    c.addEventListener('pointerup', (ev) => {
      const done = drag;
      drag = null;
      if (done?.kind === 'select') {
        // a Shift+click clears the selection; a Shift+drag made one, said once it ends
        if (Math.abs(ev.clientX - done.x) < MIN_DRAG_PX) this.select(null);
        else this.onSelect?.(this.selection);
        return;
      }
      if (done?.kind === 'pan' && done.moved) this.onView?.(this.view);
      if (done?.kind !== 'pan' || done.moved || !this.onSpanClick || !this.geo) return;
      const rect = c.getBoundingClientRect();
      const span = this.spanAt(ev.clientX - rect.left, ev.clientY - rect.top);
      if (span) this.onSpanClick(span);
    });
    c.addEventListener('pointerleave', () => { this.hover = null; this.tip.hidden = true; this.invalidate(); });
    c.addEventListener('dblclick', (ev) => {
      const rect = c.getBoundingClientRect();
      if (ev.clientY - rect.top >= AXIS) this.fit(true);
    });
  }

  /** The fetch span under canvas point (x, y), or null. @param {number} x @param {number} y @returns {SpanHit|null} */
  spanAt(x, y) {
    const g = this.geo;
    const row = g?.rows.find((r) => y >= r.y && y < r.y + r.h);
    if (!g || !row || row.kind !== 'worker' || x < GUTTER) return null;
    const col = row.track.store.workers.get(row.wid);
    const t = this.timeAt(x) - row.track.offset;
    const i = col ? nearest(col, t, (2 / (g.width - GUTTER)) * (this.view.t1 - this.view.t0)) : -1;
    return !col || i < 0 ? null : { track: row.track, worker: row.wid, idx: col.idx[i], epoch: col.epoch[i] };
  }

  /** Fit the whole run again and follow it. @param {boolean} [user] the user asked (the URL forgets the zoom) */
  fit(user = false) {
    this.follow = true;
    this.invalidate();
    if (user) this.onView?.(null);
  }

  invalidate() {
    this.drawn = '';
    this.forced = true;
    this.onInvalidate?.();
  }

  /** The whole loaded run, on the first track's clock. @param {number} now */
  fitView(now) {
    let t0 = Infinity, t1 = -Infinity;
    for (const tr of this.tracks) {
      const w = fitWindow(tr.store, tr === this.primary ? now : tr.store.tmax);
      t0 = Math.min(t0, w.t0 + tr.offset);
      t1 = Math.max(t1, w.t1 + tr.offset);
    }
    return Number.isFinite(t0) ? { t0, t1 } : { t0: 0, t1: 1 };
  }

  /**
   * Redraw if anything visible changed.
   * @param {{now:number, live:boolean, paced?:boolean}} clock `paced`: following a stream, redraws are spaced out
   * @returns {boolean} drew
   */
  draw(clock) {
    // following a live run, 4 redraws a second are plenty, fewer when each costs more (many rows,
    // a busy machine) so that the rest of the page keeps its frames; interaction redraws at once
    const wall = performance.now();
    const every = Math.max(LIVE_REDRAW_MS, LIVE_SHARE * this.lastFrameMs);
    // deferred: a redraw may be due later (the caller asks for a frame then, if nothing else does)
    this.deferred = this.follow && !!clock.paced && !this.forced && wall - this.lastDrawWall < every;
    if (this.deferred) return false;
    this.forced = false;
    const g = this.geometry();
    const store = this.store;
    const liveOpen = (store.open.size || store.consumerOpen) && clock.live;
    if (this.follow) this.view = this.fitView(liveOpen ? clock.now : store.tmax);
    const versions = this.tracks.map((tr) => `${tr.store.version}:${tr.memory?.samples ?? 0}:${tr.label}:${tr.offset}:${tr.pin?.mode}:${tr.slow?.length ?? 0}:${tr.primary ? 1 : 0}`).join(',');
    const key = `${versions}:${g.width}:${g.height}:${this.view.t0}:${this.view.t1}:${this.hover?.x}:${this.hover?.y}:${liveOpen ? clock.now.toFixed(2) : ''}:${this.playhead}:${PALETTE.bg}`
      + `:${this.selection?.t0}:${this.selection?.t1}:${this.hits.length ? this.hits.length + ':' + this.hits[0].t0 : ''}:${this.store.alarms.length}`;
    if (key === this.drawn) return false;
    this.drawn = key;
    this.lastDrawWall = wall;
    const start = performance.now();
    this.geo = g;
    const dpr = window.devicePixelRatio || 1;
    if (this.canvas.width !== Math.round(g.width * dpr) || this.canvas.height !== Math.round(g.height * dpr)) {
      this.canvas.width = Math.round(g.width * dpr);
      this.canvas.height = Math.round(g.height * dpr);
      this.canvas.style.width = `${g.width}px`;
      this.canvas.style.height = `${g.height}px`;
    }
    const ctx = this.ctx;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, g.width, g.height);
    clearLabels(ctx);
    this.placed = [];
    const { t0, t1 } = this.view;
    const plotW = g.width - GUTTER;
    const X = (/** @type {number} */ t) => GUTTER + ((t - t0) / (t1 - t0)) * plotW;
    this.X = X;

    const frame = { ctx, g, t0, t1, X, plotW, nowT: clock.live ? clock.now : store.tmax };
    this.drawAxis(frame);
    ctx.save();
    ctx.beginPath();
    ctx.rect(0, AXIS, g.width, g.height - AXIS);
    ctx.clip();
    let aggregated = false;
    g.rows.forEach((row, r) => {
      if (row.kind === 'group') this.drawGroup(frame, row);
      else if (row.kind === 'worker') aggregated = this.drawWorkerRow(frame, row, r) || aggregated;
      else if (row.kind === 'pin') aggregated = this.drawPinRow(frame, row) || aggregated;
      else if (row.kind === 'scale') this.drawMemoryScale(frame, row);
      else if (row.kind === 'memory' || row.kind === 'headroom') this.drawMemoryRow(frame, row);
      else aggregated = this.drawConsumerRow(frame, row) || aggregated;
    });
    this.drawAlarms(frame);
    this.drawHits(frame);
    this.drawEpochs(frame);
    this.drawFuture(frame);
    this.drawSelection(frame);
    ctx.restore();
    this.drawMarks(frame);
    this.drawPlayhead(frame);
    this.mode = aggregated ? 'aggregated' : 'spans';
    this.canvas.dataset.mode = this.mode;
    this.hoverTip(g, frame.nowT);
    this.lastFrameMs = performance.now() - start;
    return true;
  }

  /** The time axis: the scrubber strip, ticks and grid lines. @param {DrawFrame} frame */
  drawAxis({ ctx, g, t0, t1, X, plotW }) {
    ctx.fillStyle = this.onSeek ? PALETTE.axisSeek : PALETTE.axis;
    ctx.fillRect(GUTTER, 0, plotW, AXIS - 4);
    ctx.font = FONT;
    ctx.strokeStyle = PALETTE.grid;
    ctx.lineWidth = 1;
    const tk = ticks(t0, t1, Math.max(3, Math.floor(plotW / 110)));
    let free = GUTTER + 2; // the next tick label starts right of the last one
    for (const v of tk.values) {
      const x = Math.round(X(v)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(x, AXIS - 8);
      ctx.lineTo(x, g.height);
      ctx.stroke();
      const text = fmtTick(v, tk.step);
      const w = ctx.measureText(text).width;
      if (x > free && x + 3 + w <= g.width) {
        ctx.fillStyle = PALETTE.dim;
        fillLabel(ctx, text, x + 3, 13);
        free = x + 3 + w + 6;
      }
    }
    // the gutter: the axis strip's background is the page's, so the words read on it
    ctx.fillStyle = PALETTE.dim;
    fillLabel(ctx, this.onSeek && this.playhead !== null ? 'run time (seek ▸)' : 'run time →', 6, 13);
  }

  /** A rank's header row (several ranks). @param {DrawFrame} frame @param {Row} row */
  drawGroup({ ctx, g }, row) {
    ctx.fillStyle = PALETTE.groupBg;
    ctx.fillRect(0, row.y, g.width, row.h);
    ctx.fillStyle = PALETTE.ink;
    ctx.font = BOLD;
    fillLabel(ctx, fitText(ctx, row.label, g.width - 16), 8, row.y + 12);
  }

  /**
   * What every row starts with: its background, its name in the gutter, and a clip to its plot
   * area (restored by the caller). `label` false: the name is left out (thin rows).
   * @param {DrawFrame} frame @param {Row} row @param {string} bg @param {string} ink @param {string} font
   * @param {number} labelY @param {boolean} [label]
   */
  rowFrame({ ctx, plotW }, row, bg, ink, font, labelY, label = true) {
    ctx.fillStyle = bg;
    ctx.fillRect(GUTTER, row.y, plotW, row.h);
    ctx.fillStyle = ink;
    ctx.font = font;
    if (label) fillLabel(ctx, fitText(ctx, row.label, GUTTER - 12), 8, row.y + labelY);
    ctx.save();
    ctx.beginPath();
    ctx.rect(GUTTER, row.y, plotW, row.h);
    ctx.clip();
  }

  /**
   * A span with no end yet (a fetch in progress, a wait inside next()): drawn up to now, outlined,
   * and labelled when it is stuck and wide enough for the words.
   * @param {DrawFrame} frame @param {Track} tr @param {number} start @param {number} y @param {number} h
   * @param {{fill: string, alpha: number, stroke: string, lineWidth: number, inset: number, minWidth: number, text: string}} o
   */
  openSpan({ ctx, g, nowT }, tr, start, y, h, o) {
    const Xo = (/** @type {number} */ t) => this.X(t + tr.offset);
    const end = tr === this.primary ? nowT : tr.store.tmax;
    const x0 = Math.max(GUTTER, Xo(start)), x1 = Math.min(g.width, Xo(Math.max(end, start)));
    ctx.fillStyle = o.fill;
    ctx.globalAlpha = o.alpha;
    ctx.fillRect(x0, y, Math.max(1, x1 - x0), h);
    ctx.globalAlpha = 1;
    ctx.strokeStyle = o.stroke;
    ctx.lineWidth = o.lineWidth;
    ctx.strokeRect(x0 + o.inset, y + o.inset, Math.max(1, x1 - x0 - 2 * o.inset), h - 2 * o.inset);
    ctx.lineWidth = 1;
    if (o.text && x1 - x0 > o.minWidth) this.spanLabel(ctx, o.text, x0 + 6, x1, y, h);
  }

  /**
   * A red label on a tag inside a span, from x to at most `right`, unless it would cover another label.
   * @param {CanvasRenderingContext2D} ctx @param {string} text @param {number} x @param {number} right
   * @param {number} y @param {number} h
   */
  spanLabel(ctx, text, x, right, y, h) {
    if (h < LABEL_PX + 1) return;
    ctx.font = BOLD;
    const fit = fitText(ctx, text, Math.min(right, this.geo?.width ?? right) - x - 4);
    if (!fit) return;
    const box = { x, y: y + h / 2 - LABEL_PX / 2, w: ctx.measureText(fit).width, h: LABEL_PX };
    if (!this.place(box)) return;
    // on a tag of its own: over a task's colour the words would not read
    ctx.fillStyle = PALETTE.alarmTint;
    ctx.fillRect(box.x - 3, y + h / 2 - LABEL_PX / 2 - 2, box.w + 6, LABEL_PX + 4);
    ctx.fillStyle = PALETTE.alarmInk;
    fillLabel(ctx, fit, x, y + h / 2 + 4);
  }

  /** Whether `box` is clear of the labels placed so far; if so, it is placed. @param {Box} box */
  place(box) {
    const taken = this.placed;
    if (taken.some((b) => box.x < b.x + b.w + 2 && b.x < box.x + box.w + 2 && box.y < b.y + b.h && b.y < box.y + box.h)) return false;
    taken.push(box);
    return true;
  }

  /** A worker's fetches, and the fetch in progress (outlined red when stuck). @param {DrawFrame} frame @param {Row & {kind: 'worker'}} row @param {number} r */
  drawWorkerRow(frame, row, r) {
    const { ctx, t0, t1, plotW } = frame;
    const tr = row.track, off = tr.offset;
    const col = tr.store.workers.get(row.wid);
    // thin rows (many workers): a name on every few rows, the rest by hover, so names never collide
    const every = Math.ceil((LABEL_PX + 2) / row.h);
    const named = every === 1 || row.wid % every === 0;
    this.rowFrame(frame, row, r % 2 ? PALETTE.rowB : PALETTE.rowA, PALETTE.dim, FONT, row.h / 2 + 4, named);
    let aggregated = false;
    const pad = row.h > 10 ? 2 : 1;
    if (col) aggregated = drawRow(ctx, col, t0 - off, t1 - off, (t) => this.X(t + off), row.y + pad, row.h - 2 * pad, plotW, { lightness: 58 }, PALETTE.fetch);
    const open = tr.store.open.get(row.wid);
    if (col && open && open.start + off <= t1) {
      this.openSpan(frame, tr, open.start, row.y + pad, row.h - 2 * pad, {
        fill: taskColor(open.idx), alpha: 0.45, stroke: open.stuck ? PALETTE.stuck : taskColor(open.idx),
        lineWidth: open.stuck ? 2 : 1, inset: 0.5, minWidth: 60,
        text: open.stuck && row.h >= 12 ? `STUCK · task ${open.idx}` : '',
      });
    }
    ctx.restore();
    return aggregated;
  }

  /** The pin thread's copies; hatched with the reason when pinning is off. @param {DrawFrame} frame @param {Row & {kind: 'pin'}} row */
  drawPinRow(frame, row) {
    const { ctx, g, t0, t1, plotW } = frame;
    const tr = row.track, off = tr.offset, pin = row.pin;
    this.rowFrame(frame, row, PALETTE.pinRowBg, PALETTE.pinInk, FONT, 12);
    let aggregated = false;
    if (pin.mode === 'active') {
      aggregated = drawRow(ctx, tr.store.pin, t0 - off, t1 - off, (t) => this.X(t + off), row.y + 2, row.h - 4, plotW, { lightness: 45 }, PALETTE.pin);
    } else {
      ctx.fillStyle = PALETTE.hatch;
      for (let x = GUTTER - row.h; x < g.width; x += 10) {
        ctx.beginPath();
        ctx.moveTo(x, row.y + row.h);
        ctx.lineTo(x + row.h, row.y);
        ctx.lineTo(x + row.h + 4, row.y);
        ctx.lineTo(x + 4, row.y + row.h);
        ctx.fill();
      }
      ctx.fillStyle = PALETTE.dim;
      ctx.font = FONT;
      fillLabel(ctx, fitText(ctx, `pinning ${pin.short}: ${pin.box}`, g.width - GUTTER - 16), GUTTER + 8, row.y + 12);
    }
    ctx.restore();
    return aggregated;
  }

  /**
   * What the memory lanes show: the common scale of the process lanes and the headroom lane's, on a
   * header of its own so that the words read.
   * @param {DrawFrame} frame @param {Row & {kind: 'scale'}} row
   */
  drawMemoryScale({ ctx, g }, row) {
    ctx.fillStyle = PALETTE.groupBg;
    ctx.fillRect(0, row.y, g.width, row.h);
    ctx.fillStyle = PALETTE.ink;
    ctx.font = FONT;
    const top = scales(row.memory);
    const room = row.memory.headroom_low !== null ? ` · headroom lane 0 to ${mb(top.headroom)} MB` : '';
    const text = `memory lanes 0 to ${mb(top.rss)} MB: USS solid, shared pale above it, up to the RSS${room}`;
    fillLabel(ctx, fitText(ctx, text, g.width - 16), 8, row.y + 12);
  }

  /**
   * A process's memory (USS filled, shared stacked above it in a lighter tone, on the scale common to
   * the process lanes) or the host's headroom (on its own scale): each sample held until the next,
   * the last one to the end of the run.
   * @param {DrawFrame} frame @param {Row & {kind: 'memory' | 'headroom'}} row
   */
  drawMemoryRow(frame, row) {
    const { ctx, g } = frame;
    const tr = row.track, off = tr.offset, series = row.memory.series;
    this.rowFrame(frame, row, PALETTE.rowA, PALETTE.dim, FONT, row.h / 2 + 4);
    const top = row.kind === 'memory' ? scales(row.memory).rss : scales(row.memory).headroom;
    const end = Math.max(tr.store.tmax, row.memory.t);
    const h = row.h - 2, floor = row.y + row.h - 1;
    for (let i = 0; i < series.length && top > 0; i++) {
      const x0 = this.X(series[i][0] + off), x1 = this.X((series[i + 1]?.[0] ?? end) + off);
      if (x1 < GUTTER || x0 > g.width) continue;
      const w = Math.max(1, x1 - x0);
      if (row.kind === 'headroom') {
        const room = series[i][1];
        if (room === null) continue;
        ctx.fillStyle = PALETTE.headroom;
        ctx.fillRect(x0, floor - (h * room) / top, w, (h * room) / top);
        continue;
      }
      const p = procAt(series, i, row.key);
      if (p === null) continue;
      const uss = p.uss, rss = p.rss;
      if (uss === null) { // psutil without USS: the RSS alone, as a line at its level
        ctx.fillStyle = PALETTE.dim;
        ctx.fillRect(x0, floor - (h * rss) / top, w, 1);
        continue;
      }
      ctx.fillStyle = PALETTE.memShared;
      ctx.fillRect(x0, floor - (h * rss) / top, w, (h * (rss - uss)) / top);
      ctx.fillStyle = PALETTE.memUss;
      ctx.fillRect(x0, floor - (h * uss) / top, w, (h * uss) / top);
    }
    ctx.restore();
  }

  /** The training loop's waits in next(), an unfinished wait (stuck), and the slowest-rank ticks. @param {DrawFrame} frame @param {Row} row */
  drawConsumerRow(frame, row) {
    const { ctx, g, t0, t1, plotW } = frame;
    const tr = row.track, off = tr.offset;
    this.rowFrame(frame, row, PALETTE.consumerRowBg, PALETTE.ink, FONT, 14);
    const aggregated = drawRow(ctx, tr.store.consumer, t0 - off, t1 - off, (t) => this.X(t + off), row.y + 3, row.h - 6, plotW, { fixed: PALETTE.wait }, PALETTE.wait, true);
    const waiting = tr.store.consumerOpen;
    if (waiting) {
      this.openSpan(frame, tr, waiting.start, row.y + 3, row.h - 6, {
        fill: PALETTE.wait, alpha: 0.35, stroke: PALETTE.stuck, lineWidth: 2, inset: 1, minWidth: 120,
        text: `STUCK in next() · waiting for task ${waiting.idx}`,
      });
    }
    // the rank that delivered a step last (several ranks): a tick under the consumer row
    ctx.fillStyle = PALETTE.buffer;
    for (const t of tr.slow ?? []) {
      const x = this.X(t + off);
      if (x >= GUTTER && x <= g.width) ctx.fillRect(x - 1, row.y + row.h - 3, 2, 3);
    }
    ctx.restore();
    return aggregated;
  }

  /** Epoch boundaries: dashed lines with the epoch's number (a peek's says "peek"). @param {DrawFrame} frame */
  drawEpochs({ ctx, g, t0, t1, X }) {
    ctx.strokeStyle = PALETTE.epochLine;
    ctx.setLineDash([3, 3]);
    ctx.font = FONT;
    for (const ep of this.store.epochs) {
      if (ep.t < t0 || ep.t > t1) continue;
      const x = Math.round(X(ep.t)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(x, AXIS);
      ctx.lineTo(x, g.height);
      ctx.stroke();
      const text = ep.peek ? 'peek' : `epoch ${ep.epoch}`;
      const w = ctx.measureText(text).width;
      // on a band of the row's own colour, so that the words read over the spans under them
      if (x + 3 + w > g.width || !this.place({ x: x + 2, y: AXIS + 1, w: w + 2, h: LABEL_PX + 1 })) continue;
      ctx.fillStyle = PALETTE.rowA;
      ctx.fillRect(x + 1, AXIS + 1, w + 4, LABEL_PX + 2);
      ctx.fillStyle = PALETTE.epochInk;
      fillLabel(ctx, text, x + 3, AXIS + 11);
    }
    ctx.setLineDash([]);
  }

  /**
   * Fetches a finding was about, once they ended (a running one is drawn as open): a red outline
   * from the fetch's start to its end, and the finding's words at its moment.
   * @param {DrawFrame} frame
   */
  drawAlarms({ ctx, g, t0, t1 }) {
    for (const row of g.rows) {
      if (row.kind !== 'worker') continue;
      const tr = row.track, off = tr.offset;
      for (const a of tr.store.alarms) {
        if (a.worker !== row.wid || a.end === null || a.end + off < t0 || a.start + off > t1) continue;
        const x0 = Math.max(GUTTER, this.X(a.start + off)), x1 = Math.min(g.width, this.X(a.end + off));
        ctx.strokeStyle = PALETTE.stuck;
        ctx.lineWidth = 2;
        ctx.strokeRect(x0 + 1, row.y + 1, Math.max(1, x1 - x0 - 2), row.h - 2);
        ctx.lineWidth = 1;
        const word = a.kind === 'died' ? 'DIED' : 'STUCK';
        const at = Math.max(x0 + 4, Math.min(this.X(a.t + off), x1 - 40));
        this.spanLabel(ctx, `${word} · task ${a.idx}`, at, g.width, row.y, row.h);
      }
    }
  }

  /** Search hits: an outline around each span found. @param {DrawFrame} frame */
  drawHits({ ctx, g, t0, t1 }) {
    if (!this.hits.length) return;
    const primary = this.primary;
    ctx.strokeStyle = PALETTE.hit;
    ctx.lineWidth = 2;
    for (const hit of this.hits) {
      if (hit.t1 < t0 || hit.t0 > t1) continue;
      const row = g.rows.find((r) => r.track === primary && (hit.worker === null ? r.kind === 'consumer' : r.kind === 'worker' && r.wid === hit.worker));
      if (!row) continue;
      const x0 = Math.max(GUTTER, this.X(hit.t0)), x1 = Math.min(g.width, this.X(hit.t1));
      ctx.strokeRect(x0 - 1, row.y, Math.max(3, x1 - x0 + 2), row.h);
    }
    ctx.lineWidth = 1;
  }

  /** The selected range: a tinted band with edges. @param {DrawFrame} frame */
  drawSelection({ ctx, g, X }) {
    const sel = this.selection;
    if (!sel) return;
    const x0 = Math.max(GUTTER, X(sel.t0)), x1 = Math.min(g.width, X(sel.t1));
    if (x1 < GUTTER || x0 > g.width) return;
    ctx.fillStyle = PALETTE.selection;
    ctx.fillRect(x0, AXIS, Math.max(1, x1 - x0), g.height - AXIS);
    ctx.fillStyle = PALETTE.accent;
    if (X(sel.t0) >= GUTTER) ctx.fillRect(Math.round(x0) - 1, AXIS, 2, g.height - AXIS);
    if (X(sel.t1) <= g.width) ctx.fillRect(Math.round(x1) - 1, AXIS, 2, g.height - AXIS);
  }

  /** The future, when the playhead is behind the end: dimmed. @param {DrawFrame} frame */
  drawFuture({ ctx, g, X }) {
    if (this.playhead === null) return;
    const px = X(this.playhead);
    if (px >= g.width) return;
    ctx.fillStyle = PALETTE.future;
    ctx.fillRect(Math.max(GUTTER, px), AXIS, g.width - Math.max(GUTTER, px), g.height - AXIS);
  }

  /** Markers on the axis: stuck, died, errors, timeouts. @param {DrawFrame} frame */
  drawMarks({ ctx, t0, t1, X }) {
    ctx.fillStyle = PALETTE.stuck;
    for (const tr of this.tracks) {
      for (const m of tr.store.marks) {
        const t = m.t + tr.offset;
        if (t < t0 || t > t1) continue;
        const x = X(t);
        ctx.beginPath();
        ctx.moveTo(x, AXIS);
        ctx.lineTo(x - 4, AXIS - 6);
        ctx.lineTo(x + 4, AXIS - 6);
        ctx.fill();
      }
    }
  }

  /** The playhead: a line through every row and a handle on the axis. @param {DrawFrame} frame */
  drawPlayhead({ ctx, g, X }) {
    if (this.playhead === null) return;
    const px = X(this.playhead);
    if (px < GUTTER || px > g.width) return;
    ctx.fillStyle = PALETTE.accent;
    ctx.fillRect(Math.round(px) - 1, 2, 2, g.height - 2);
    ctx.beginPath();
    ctx.moveTo(px - 6, 0);
    ctx.lineTo(px + 6, 0);
    ctx.lineTo(px, 9);
    ctx.fill();
  }

  /** @param {Geometry} g @param {number} nowT */
  hoverTip(g, nowT) {
    const h = this.hover;
    if (!h || h.x < GUTTER) { this.tip.hidden = true; return; }
    let text = '';
    if (h.y < AXIS) {
      text = this.onSeek ? `click or drag here to move the playhead\n${fmtDuration(this.timeAt(h.x))}` : '';
    }
    const row = g.rows.find((r) => h.y >= r.y && h.y < r.y + r.h);
    if (row && row.kind !== 'group') {
      const tr = row.track;
      const t = this.timeAt(h.x) - tr.offset;
      const slack = (2 / (g.width - GUTTER)) * (this.view.t1 - this.view.t0);
      const store = tr.store;
      const rank = this.tracks.length > 1 ? `${tr.label} · ` : '';
      if (row.kind === 'worker') {
        const col = store.workers.get(row.wid);
        const open = store.open.get(row.wid);
        const i = col ? nearest(col, t, slack) : -1;
        const who = `${rank}${row.label}`;
        if (col && i >= 0) {
          const samples = store.samplesAt(col.ref2[i]);
          const end = store.eventAt(col.ref[i]);
          text = `task ${col.idx[i]} (epoch ${col.epoch[i]}) · ${who}\nfetch took ${fmtDuration(col.end[i] - col.start[i])}` +
            `\nsamples ${fmtIndices(samples?.indices, samples?.n) || '?'}${end?.nbytes ? `\n${end.nbytes} bytes` : ''}`;
        } else if (open && t >= open.start) {
          const samples = store.samplesAt(open.dref);
          text = `task ${open.idx} · ${who}\nstill fetching: ${fmtDuration((tr === this.primary ? nowT : store.tmax) - open.start)} so far\nsamples ${fmtIndices(samples?.indices, samples?.n) || '?'}`;
        } else {
          text = `${who} idle at ${fmtDuration(t)}`;
        }
      } else if (row.kind === 'memory' || row.kind === 'headroom' || row.kind === 'scale') {
        text = memoryTip(row, t, rank);
      } else if (row.kind === 'pin') {
        const i = row.pin.mode === 'active' ? nearest(store.pin, t, slack) : -1;
        if (i >= 0) {
          const e = store.eventAt(store.pin.ref[i]);
          const mb = e?.nbytes ? e.nbytes / 1e6 : null;
          const dt = store.pin.end[i] - store.pin.start[i];
          text = `${rank}task ${store.pin.idx[i]} pinned in ${fmtDuration(dt)}` +
            (mb !== null ? `\n${mb.toFixed(2)} MB${dt > 0 ? ` at ${(mb / dt).toFixed(0)} MB/s` : ''}` : '') +
            (e?.pinned === false ? '\nNOT pinned (a custom batch type needs pin_memory())' : '');
        } else text = row.pin.mode === 'active' ? `${rank}pin thread idle` : `${rank}${row.pin.why}`;
      } else {
        const col = store.consumer;
        const i = nearest(col, t, slack * 2);
        if (i >= 0) {
          const e = store.eventAt(col.ref[i]);
          text = `${rank}batch ${col.idx[i]} handed to the training loop at ${fmtDuration(col.end[i])}\nconsumer waited ${fmtDuration(col.end[i] - col.start[i])} for it${e?.from_buffer ? '\n(it was already in the reorder buffer)' : ''}`;
        } else text = `${rank}consumer busy training (not waiting)`;
      }
    }
    if (!text) { this.tip.hidden = true; return; }
    this.tip.textContent = text;
    this.tip.hidden = false;
    const left = Math.min(h.x + 14, g.width - 260);
    this.tip.style.left = `${left}px`;
    this.tip.style.top = `${h.y + 14}px`;
  }
}

/** @type {WeakMap<import('./memory.js').MemoryModel, {samples: number, rss: number, headroom: number}>} */
const scaled = new WeakMap();

/**
 * The memory lanes' scales (the process lanes' and the headroom lane's), worked out once per sample:
 * every lane of a draw needs them.
 * @param {import('./memory.js').MemoryModel} memory
 */
function scales(memory) {
  let top = scaled.get(memory);
  if (top === undefined || top.samples !== memory.samples) {
    top = { samples: memory.samples, rss: rssScale(memory.series), headroom: headroomScale(memory.series) };
    scaled.set(memory, top);
  }
  return top;
}

/**
 * The memory lanes after a rank's consumer row: the scale, the main process's, the host's headroom.
 * @param {Row[]} rows @param {Track} track @param {import('./memory.js').MemoryModel} memory @param {number} y
 */
function memoryRows(rows, track, memory, y) {
  rows.push({ kind: 'scale', track, memory, y, h: GROUP_H, label: '' });
  y += GROUP_H;
  if (memory.procs.has(MAIN)) {
    rows.push({ kind: 'memory', track, key: MAIN, memory, y, h: MEMORY_H, label: 'main memory' });
    y += MEMORY_H;
  }
  if (memory.headroom_low !== null) {
    rows.push({ kind: 'headroom', track, memory, y, h: MEMORY_H, label: 'host headroom' });
    y += MEMORY_H;
  }
  return y + 6;
}

/**
 * A memory lane's hover: the sample in force at t (the last one at or before it) and when it was taken.
 * @param {Row & {kind: 'memory' | 'headroom' | 'scale'}} row @param {number} t on the row's clock @param {string} rank
 */
function memoryTip(row, t, rank) {
  if (row.kind === 'scale') return `${rank}memory lanes: each process's USS (private) and shared memory, in MB (10^6 bytes)`;
  const series = row.memory.series, i = pointAt(series, t);
  const who = row.kind === 'headroom' ? 'host headroom' : row.key === MAIN ? 'main process' : `worker ${row.key}`;
  const at = `${rank}${who} at ${fmtDuration(t)}`;
  if (row.kind === 'headroom') {
    const room = i >= 0 ? series[i][1] : null;
    return room === null ? `${at}: no sample` : `${at}\nheadroom ${mb(room)} MB\nsampled at ${fmtDuration(series[i][0])}`;
  }
  const p = procAt(series, i, row.key);
  return p === null ? `${at}: no sample`
    : `${at}\nUSS ${mb(p.uss)} MB · shared ${mb(p.shared)} MB · RSS ${mb(p.rss)} MB\nsampled at ${fmtDuration(p.t)}`;
}

/** The span under t (within slack), or -1. @param {SpanColumn} col @param {number} t @param {number} slack */
function nearest(col, t, slack) {
  let i = col.at(t);
  if (i >= 0) return i;
  i = col.at(t + slack);
  if (i >= 0) return i;
  return col.at(t - slack);
}

/**
 * How a row's spans are coloured: one colour for all, or each its task's colour at a lightness.
 * @typedef {{fixed: string} | {lightness: number}} Paint
 */

const DENSE_SPANS = 48; // more spans than this in a row: their hues are rounded and drawn a colour at a time
const HUE_STEP = 10; // degrees; golden-angle neighbours stay far apart after rounding
/** @type {Map<string, string>} */
const roundedColors = new Map();

/** A task's colour with its hue rounded to HUE_STEP: a few dozen colours for any number of tasks. @param {number} idx @param {number} lightness */
function roundedColor(idx, lightness) {
  const hue = (Math.round(taskHue(idx) / HUE_STEP) * HUE_STEP) % 360;
  const key = `${hue}:${lightness}`;
  let color = roundedColors.get(key);
  if (color === undefined) roundedColors.set(key, (color = `hsl(${hue} 70% ${lightness}%)`));
  return color;
}

/**
 * Draw one row; returns true when it had to aggregate (too many spans to draw one by one).
 * Level of detail: spans are culled to the view (`visible`); a sub-pixel span in a pixel column
 * that already has one is left out; a dense row is drawn a colour at a time; an aggregated row is
 * one rectangle per run of equal columns. In software rendering a fill costs about 0.7 µs and a
 * change of fill colour about 2 µs, so with many thin rows the calls, not the arithmetic, are
 * what a frame costs.
 * @param {CanvasRenderingContext2D} ctx @param {SpanColumn} col @param {number} t0 @param {number} t1
 * @param {(t: number) => number} X @param {number} y @param {number} h @param {number} plotW
 * @param {Paint} paint @param {string} aggColor @param {boolean} [zeroTicks]
 */
export function drawRow(ctx, col, t0, t1, X, y, h, plotW, paint, aggColor, zeroTicks = false) {
  const [i0, i1] = col.visible(t0, t1);
  if (i1 - i0 <= plotW / 3) {
    drawSpans(ctx, col, i0, i1, X, y, h, paint, zeroTicks);
    return false;
  }
  drawOccupancy(ctx, col.occupancy(t0, t1, Math.max(1, Math.floor(plotW / 2))), X(t0), y, h, plotW, aggColor);
  return true;
}

/**
 * Spans one by one, grouped by colour (a dense row's hues rounded), then the dark edges that part
 * neighbouring spans wider than 3 px.
 * @param {CanvasRenderingContext2D} ctx @param {SpanColumn} col @param {number} i0 @param {number} i1
 * @param {(t: number) => number} X @param {number} y @param {number} h @param {Paint} paint @param {boolean} zeroTicks
 */
function drawSpans(ctx, col, i0, i1, X, y, h, paint, zeroTicks) {
  const dense = i1 - i0 > DENSE_SPANS;
  /** @type {Map<string, number[]>} colour -> x, width, x, width, ... */
  const groups = new Map();
  /** @type {number[]} */
  const edges = [];
  let lastTick = -Infinity;
  for (let i = i0; i < i1; i++) {
    const x0 = X(col.start[i]), x1 = X(col.end[i]);
    const w = x1 - x0;
    if (w < 1 && !zeroTicks && Math.round(x1) === lastTick) continue;
    const color = 'fixed' in paint ? paint.fixed
      : dense ? roundedColor(col.idx[i], paint.lightness) : taskColor(col.idx[i], paint.lightness);
    let rects = groups.get(color);
    if (rects === undefined) groups.set(color, (rects = []));
    if (w >= 1) rects.push(x0, w);
    if (zeroTicks || w < 1) {
      rects.push(x1 - 0.5, 1);
      lastTick = Math.round(x1);
    }
    if (!zeroTicks && w > 3) edges.push(x1 - 1, 1);
  }
  for (const [color, rects] of groups) fillRects(ctx, color, rects, y, h);
  fillRects(ctx, PALETTE.spanEdge, edges, y, h);
}

/**
 * @param {CanvasRenderingContext2D} ctx @param {string} color
 * @param {number[]} rects x, width, x, width, ... all from y to y + h @param {number} y @param {number} h
 */
function fillRects(ctx, color, rects, y, h) {
  if (!rects.length) return;
  ctx.fillStyle = color;
  for (let k = 0; k < rects.length; k += 2) ctx.fillRect(rects[k], y, rects[k + 1], h);
}

/**
 * How busy each column was, as bars from the row's floor: the busy share is rounded to the row's
 * whole pixels (all a bar can show), so neighbouring columns alike make one rectangle.
 * @param {CanvasRenderingContext2D} ctx @param {Float32Array} occ @param {number} x0 @param {number} y
 * @param {number} h @param {number} plotW @param {string} color
 */
function drawOccupancy(ctx, occ, x0, y, h, plotW, color) {
  const bw = plotW / occ.length;
  const level = (/** @type {number} */ v) => (v > 0 ? Math.max(1, Math.round(h * v)) : 0);
  ctx.fillStyle = color;
  let k = 0;
  while (k < occ.length) {
    const px = level(occ[k]);
    let end = k + 1;
    while (end < occ.length && level(occ[end]) === px) end++;
    if (px > 0) {
      ctx.globalAlpha = 0.25 + (0.75 * px) / h;
      ctx.fillRect(x0 + k * bw, y + h - px, Math.ceil((end - k) * bw), px);
    }
    k = end;
  }
  ctx.globalAlpha = 1;
}

/** @param {number} v @param {number} step */
function fmtTick(v, step) {
  if (step >= 1) return `${v.toFixed(0)} s`;
  if (step >= 0.001) return `${(v * 1000).toFixed(0)} ms`;
  return `${(v * 1e6).toFixed(0)} µs`;
}

// The timeline canvas: per rank, one row per worker (fetch spans), one for the pin-memory thread
// (when the loader pins), one for the consumer (time waiting for each batch). Wheel zooms, drag
// pans, Shift+drag selects a time range, double-click fits the whole run; hover names the span;
// focused, W/S zoom and A/D pan (keys.js). The strip with the time axis is the scrubber: click or
// drag there to move the playhead. Draws only what is visible; zoomed out, each pixel column shows
// how busy the row was. Fetches a finding was about (stuck, a worker's death) keep their red mark
// and label after they, or the run, ended; search hits are outlined. A run with memory samples gets
// a memory lane under each sampled worker, one for the main process and one for the host's headroom
// (memory.js's series: each sample holds until the next).
// Its input is timeline-input.js, what it draws over the rows timeline-marks.js, a row's spans
// timeline-paint.js, the memory lanes timeline-memory.js.

import { PALETTE, taskColor } from '../model/colors.js';
import { fitWindow, zoomWindow, panWindow, ticks } from '../model/time-window.js';
import { fillLabel, clearLabels, fitText } from './canvas-text.js';

import { AXIS, FONT, GUTTER, LABEL_PX, drawRow } from './timeline-paint.js';
import { bindInput, hoverTip } from './timeline-input.js';
import { GROUP_H, MEMORY_H, drawMemoryRow, drawMemoryScale, memoryRows } from './timeline-memory.js';
import {
  drawAlarms,
  drawEpochs,
  drawFuture,
  drawHits,
  drawMarks,
  drawPlayhead,
  drawSelection,
} from './timeline-marks.js';

const CONSUMER_H = 22;
const PIN_H = 16;
// following live, 4 redraws a second at most: the view scrolls on, its spans need no more, and at
// 64 workers on a busy machine a redraw costs 15-20 ms of the main thread that reads the socket
const LIVE_REDRAW_MS = 250;
// following live, a redraw waits at least this many times its own cost: it keeps to an eighth of the main thread
const LIVE_SHARE = 8;

/**
 * @typedef {{store: import('../model/timeline-store.js').TimelineStore, label: string, offset: number,
 *   inProcess?: boolean, pin?: import('../model/pin.js').PinStage, slow?: number[], primary?: boolean,
 *   memory?: import('../model/memory.js').MemoryModel,
 *   memoryScaleWith?: import('../model/memory.js').MemoryModel[]}} Track
 * `offset` (s) is added to the track's run times to put several ranks on one clock; `primary`: the
 * selected rank's; `memory`: the run's memory samples (its lanes, when it has any); `memoryScaleWith`:
 * the samples whose largest figures set its lanes' scale (else its own).
 * @typedef {{track: Track, y: number, h: number, label: string}} RowBox
 * @typedef {RowBox & ({kind: 'worker', wid: number} | {kind: 'pin', pin: import('../model/pin.js').PinStage}
 *   | {kind: 'memory', key: number, memory: import('../model/memory.js').MemoryModel}
 *   | {kind: 'headroom', memory: import('../model/memory.js').MemoryModel} | {kind: 'scale',
 *   memory: import('../model/memory.js').MemoryModel}
 *   | {kind: 'group' | 'consumer'})} Row
 * @typedef {{rows: Row[], rh: number, height: number, width: number}} Geometry
 * @typedef {{ctx: CanvasRenderingContext2D, g: Geometry, t0: number, t1: number, X: (t: number) => number,
 *   plotW: number, nowT: number}} DrawFrame what one draw() hands each part
 * @typedef {{track: Track, worker: number, idx: number, epoch: number}} SpanHit a clicked fetch span
 * @typedef {import('../model/span-column.js').SpanColumn} SpanColumn
 * @typedef {import('../model/time-window.js').TimeWindow} TimeWindow
 * @typedef {{worker: number|null, t0: number, t1: number}} Outline a search hit: a worker's (null: the consumer's)
 *   span, on the primary clock
 * @typedef {{x: number, y: number, w: number, h: number}} Box
 */
const BOLD = `600 ${LABEL_PX}px system-ui, sans-serif`;

export class TimelineView {
  /** @param {HTMLElement} host @param {import('../model/timeline-store.js').TimelineStore} store */
  constructor(host, store) {
    this.host = host;
    this.canvas = document.createElement('canvas');
    this.canvas.className = 'timeline-canvas';
    // focusable: W/S zoom, A/D (and the arrows) pan once it has focus (keys.js)
    this.canvas.tabIndex = 0;
    this.canvas.setAttribute('role', 'application');
    this.canvas.setAttribute('aria-roledescription', 'timeline');
    this.canvas.setAttribute(
      'aria-label',
      'timeline of fetches per worker, pinning and consumer waits; ' +
        'W and S zoom, A and D pan, Shift+drag selects a time range, click the time axis to move the playhead; ? ' +
        'lists the keys',
    );
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
    bindInput(this);
  }

  /** The selected rank's track: its clock is the view's clock (offset 0). */
  get primary() {
    return this.tracks.find((t) => t.primary) ?? this.tracks[0];
  }

  get store() {
    return this.primary.store;
  }

  /** @param {import('../model/timeline-store.js').TimelineStore} s */
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
        rows.push({
          kind: 'group',
          track: tr,
          y,
          h: GROUP_H,
          label: tr.primary ? `${tr.label}  (shown above)` : tr.label,
        });
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

  /**
   * The window shown, fixed (no longer following the run); `user`: the user moved it.
   * @param {TimeWindow} view
   * @param {boolean} [user]
   */
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
    let t0 = Infinity,
      t1 = -Infinity;
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
    const versions = this.tracks
      .map(
        (tr) =>
          `${tr.store.version}:${tr.memory?.samples ?? 0}:${tr.label}:${tr.offset}:${tr.pin?.mode}:` +
          `${tr.slow?.length ?? 0}:${tr.primary ? 1 : 0}`,
      )
      .join(',');
    const key =
      `${versions}:${g.width}:${g.height}:${this.view.t0}:${this.view.t1}:${this.hover?.x}:${this.hover?.y}:` +
      `${liveOpen ? clock.now.toFixed(2) : ''}:${this.playhead}:${PALETTE.bg}` +
      `:${this.selection?.t0}:${this.selection?.t1}:` +
      `${this.hits.length ? this.hits.length + ':' + this.hits[0].t0 : ''}:${this.store.alarms.length}`;
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
      else if (row.kind === 'scale') drawMemoryScale(this, frame, row);
      else if (row.kind === 'memory' || row.kind === 'headroom') drawMemoryRow(this, frame, row);
      else aggregated = this.drawConsumerRow(frame, row) || aggregated;
    });
    drawAlarms(this, frame);
    drawHits(this, frame);
    drawEpochs(this, frame);
    drawFuture(this, frame);
    drawSelection(this, frame);
    ctx.restore();
    drawMarks(this, frame);
    drawPlayhead(this, frame);
    this.mode = aggregated ? 'aggregated' : 'spans';
    this.canvas.dataset.mode = this.mode;
    hoverTip(this, g, frame.nowT);
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
   * @param {{fill: string, alpha: number, stroke: string, lineWidth: number, inset: number, minWidth: number,
   *   text: string}} o
   */
  openSpan({ ctx, g, nowT }, tr, start, y, h, o) {
    const Xo = (/** @type {number} */ t) => this.X(t + tr.offset);
    const end = tr === this.primary ? nowT : tr.store.tmax;
    const x0 = Math.max(GUTTER, Xo(start)),
      x1 = Math.min(g.width, Xo(Math.max(end, start)));
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
    if (taken.some((b) => box.x < b.x + b.w + 2 && b.x < box.x + box.w + 2 && box.y < b.y + b.h && b.y < box.y + box.h))
      return false;
    taken.push(box);
    return true;
  }

  /**
   * A worker's fetches, and the fetch in progress (outlined red when stuck).
   * @param {DrawFrame} frame
   * @param {Row & {kind: 'worker'}} row
   * @param {number} r
   */
  drawWorkerRow(frame, row, r) {
    const { ctx, t0, t1, plotW } = frame;
    const tr = row.track,
      off = tr.offset;
    const col = tr.store.workers.get(row.wid);
    // thin rows (many workers): a name on every few rows, the rest by hover, so names never collide
    const every = Math.ceil((LABEL_PX + 2) / row.h);
    const named = every === 1 || row.wid % every === 0;
    this.rowFrame(frame, row, r % 2 ? PALETTE.rowB : PALETTE.rowA, PALETTE.dim, FONT, row.h / 2 + 4, named);
    let aggregated = false;
    const pad = row.h > 10 ? 2 : 1;
    if (col)
      aggregated = drawRow(
        ctx,
        col,
        t0 - off,
        t1 - off,
        (t) => this.X(t + off),
        row.y + pad,
        row.h - 2 * pad,
        plotW,
        { lightness: 58 },
        PALETTE.fetch,
      );
    const open = tr.store.open.get(row.wid);
    if (col && open && open.start + off <= t1) {
      this.openSpan(frame, tr, open.start, row.y + pad, row.h - 2 * pad, {
        fill: taskColor(open.idx),
        alpha: 0.45,
        stroke: open.stuck ? PALETTE.stuck : taskColor(open.idx),
        lineWidth: open.stuck ? 2 : 1,
        inset: 0.5,
        minWidth: 60,
        text: open.stuck && row.h >= 12 ? `STUCK · task ${open.idx}` : '',
      });
    }
    ctx.restore();
    return aggregated;
  }

  /**
   * The pin thread's copies; hatched with the reason when pinning is off.
   * @param {DrawFrame} frame
   * @param {Row & {kind: 'pin'}} row
   */
  drawPinRow(frame, row) {
    const { ctx, g, t0, t1, plotW } = frame;
    const tr = row.track,
      off = tr.offset,
      pin = row.pin;
    this.rowFrame(frame, row, PALETTE.pinRowBg, PALETTE.pinInk, FONT, 12);
    let aggregated = false;
    if (pin.mode === 'active') {
      aggregated = drawRow(
        ctx,
        tr.store.pin,
        t0 - off,
        t1 - off,
        (t) => this.X(t + off),
        row.y + 2,
        row.h - 4,
        plotW,
        { lightness: 45 },
        PALETTE.pin,
      );
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
   * The training loop's waits in next(), an unfinished wait (stuck), and the slowest-rank ticks.
   * @param {DrawFrame} frame
   * @param {Row} row
   */
  drawConsumerRow(frame, row) {
    const { ctx, g, t0, t1, plotW } = frame;
    const tr = row.track,
      off = tr.offset;
    this.rowFrame(frame, row, PALETTE.consumerRowBg, PALETTE.ink, FONT, 14);
    const aggregated = drawRow(
      ctx,
      tr.store.consumer,
      t0 - off,
      t1 - off,
      (t) => this.X(t + off),
      row.y + 3,
      row.h - 6,
      plotW,
      { fixed: PALETTE.wait },
      PALETTE.wait,
      true,
    );
    const waiting = tr.store.consumerOpen;
    if (waiting) {
      this.openSpan(frame, tr, waiting.start, row.y + 3, row.h - 6, {
        fill: PALETTE.wait,
        alpha: 0.35,
        stroke: PALETTE.stuck,
        lineWidth: 2,
        inset: 1,
        minWidth: 120,
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
}

/** @param {number} v @param {number} step */
function fmtTick(v, step) {
  if (step >= 1) return `${v.toFixed(0)} s`;
  if (step >= 0.001) return `${(v * 1000).toFixed(0)} ms`;
  return `${(v * 1e6).toFixed(0)} µs`;
}

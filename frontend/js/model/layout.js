// Where every part of the pipeline picture goes, as plain rectangles. Pure math, shared by the
// canvas drawing and the DOM overlay (lanes, cursors), and unit-tested.
//
//   sampler ─▶ dispatcher(send_idx) ─▶ worker lanes [index queue | fetch] ─▶ result queue
//           ─▶ (pin-memory thread ─▶ pinned queue) ─▶ reorder buffer ─▶ rcvd_idx ─▶ consumer
//
// The pin column exists when the loader was asked to pin (`pin: 'active' | 'disabled'`); with
// pin_memory=False (`pin: 'none'`) it is left out and the result queue feeds the main process.

/** @typedef {{x:number, y:number, w:number, h:number}} Rect */
/** @typedef {{x:number, y:number}} Point */
/** @typedef {{w:number, h:number}} Size */
/** @typedef {ReturnType<typeof pipelineLayout>} Layout */

export const MIN_WIDTH = 940;
export const MIN_WIDTH_PIN = 1100;
const M = 12; // outer margin
const TITLE = 30; // column titles (and a hint line under them)
const WIDE = { sampler: 132, result: 96, pin: 0, buffer: 150, consumer: 138 };
// with the pin column, the columns right of the workers give up a little room so the index queues keep theirs
const NARROW = { sampler: 132, result: 86, pin: 92, buffer: 136, consumer: 128 };
// toBuffer: room for "early" (11 px)
const WIDE_GAP = { toLanes: 28, toResult: 26, toPin: 24, toBuffer: 32, toConsumer: 26 };
// a window narrower than MIN_WIDTH: the same columns, slimmer, with tighter gaps and lane labels,
// so the picture keeps its text at full size down to NARROW_MIN (it is scaled only below that)
const SLIM = { sampler: 112, result: 72, pin: 0, buffer: 108, consumer: 112 };
const SLIM_PIN = { sampler: 100, result: 60, pin: 82, buffer: 92, consumer: 98 };
const SLIM_GAP = { toLanes: 16, toResult: 14, toPin: 12, toBuffer: 30, toConsumer: 14 }; // toBuffer: room for 'early'
const SLIM_LABEL_W = 76;
const SLIM_FETCH_W = [96, 160];
export const NARROW_MIN = 724;
export const NARROW_MIN_PIN = 764;
const PIN_THREAD_H = 74; // the pin thread's box (one task at a time) above the pinned queue
const BYPASS = 30; // room above the reorder buffer for the in-order path
const LABEL_W = 100; // lane label (worker name, status)
const FETCH_W = [150, 196]; // current fetch (token, indices, elapsed): min, max
export const RCVD_TEXT = 46; // rcvd_idx's box: the cursor and its hint, above the in-hand lane

/** @param {number} v @param {number} lo @param {number} hi */
const clamp = (v, lo, hi) => Math.max(lo, Math.min(hi, v));

// Many workers: past COMPACT_AT lanes each lane becomes a thin row (name, index queue as small
// tokens plus a count, the task being fetched as a token and one line of text); past GRID_AT the
// rows are split into two columns so that 64 workers still get ~20 px each.
export const COMPACT_AT = 17;
export const GRID_AT = 33;
export const COMPACT_ROW = 20; // lane height in compact mode
const COMPACT_GAP = 2;
const COMPACT_LABEL_W = 66; // "worker 63"
const COL_GAP = 10; // between the two lane columns

/** How the lanes are arranged for n workers: columns, rows per column, compact or not. @param {number} lanes */
export function laneGrid(lanes) {
  const n = Math.max(lanes, 1);
  const compact = n >= COMPACT_AT;
  const cols = n >= GRID_AT ? 2 : 1;
  return { compact, cols, rows: Math.ceil(n / cols) };
}

/**
 * Canvas height for n lanes: ~44 px per lane up to a point, then thinner; compact rows past that.
 * @param {number} lanes
 */
export function pipelineHeight(lanes) {
  const g = laneGrid(lanes);
  if (g.compact) return Math.round(Math.max(660, M + TITLE + g.rows * (COMPACT_ROW + COMPACT_GAP) - COMPACT_GAP + M));
  return Math.round(Math.max(330, Math.min(660, 70 + lanes * 46)));
}

/** Token size for a lane height and the widest task id. @param {number} laneH @param {number} digits @returns {Size} */
export function tokenSize(laneH, digits) {
  const h = Math.round(clamp(laneH * 0.56, 10, 22));
  const w = Math.round(Math.max(h * 1.45, digits * h * 0.62 + 8));
  return { w, h };
}

/**
 * @param {{width:number, height:number, lanes:number, digits?:number, inProcess?:boolean,
 *   pin?:'none'|'active'|'disabled'}} o
 */
export function pipelineLayout({ width, height, lanes, digits = 2, inProcess = false, pin = 'none' }) {
  const hasPin = pin !== 'none';
  const slim = width < (hasPin ? MIN_WIDTH_PIN : MIN_WIDTH);
  const COL = slim ? (hasPin ? SLIM_PIN : SLIM) : hasPin ? NARROW : WIDE;
  const GAP = slim ? SLIM_GAP : WIDE_GAP;
  const W = slim ? Math.max(width, hasPin ? NARROW_MIN_PIN : NARROW_MIN) : width;
  const n = Math.max(lanes, 1);
  const top = M + TITLE;
  const areaH = Math.max(height - top - M, 60);
  const grid = laneGrid(lanes);
  const rows = grid.rows;
  const laneGap = grid.compact ? COMPACT_GAP : areaH / n > 30 ? 6 : areaH / n > 16 ? 3 : 1;
  const laneH = grid.compact
    ? Math.min(COMPACT_ROW, (areaH - laneGap * (rows - 1)) / rows)
    : Math.min(56, (areaH - laneGap * (n - 1)) / n);
  const lanesH = laneH * rows + laneGap * (rows - 1);
  const token = tokenSize(laneH, Math.max(digits, 1));

  let x = M;
  const samplerCol = { x, y: top, w: COL.sampler, h: areaH };
  x += COL.sampler + GAP.toLanes;
  const pinW = hasPin ? COL.pin + GAP.toPin : 0;
  const fixedRight = GAP.toResult + COL.result + pinW + GAP.toBuffer + COL.buffer + GAP.toConsumer + COL.consumer + M;
  const lanesW = W - x - fixedRight;
  const lanesX = x;
  x += lanesW + GAP.toResult;
  const result = { x, y: top, w: COL.result, h: areaH };
  x += COL.result;
  /** @type {Rect|null} */
  let pinCol = null,
    pinThread = null,
    pinned = null;
  if (hasPin) {
    x += GAP.toPin;
    pinCol = { x, y: top, w: COL.pin, h: areaH };
    const thread = { x, y: top, w: COL.pin, h: Math.min(PIN_THREAD_H, areaH / 2) };
    pinThread = thread;
    pinned = { x, y: top + thread.h + 10, w: COL.pin, h: Math.max(areaH - thread.h - 10, 30) };
    x += COL.pin;
  }
  x += GAP.toBuffer;
  // the buffer sits lower, leaving a lane above it for results that arrive in order and go straight on
  const buffer = { x, y: top + BYPASS, w: COL.buffer, h: areaH - BYPASS };
  x += COL.buffer + GAP.toConsumer;
  const consumer = { x, y: top, w: COL.consumer, h: areaH };

  const samplerH = Math.min(areaH * 0.42, 150);
  const sampler = { x: samplerCol.x, y: top, w: COL.sampler, h: samplerH };
  const dispH = Math.min(92, areaH - samplerH - 16);
  const dispatcher = { x: samplerCol.x, y: top + samplerH + 16, w: COL.sampler, h: Math.max(dispH, 40) };

  const laneRects = [];
  const colW = (lanesW - COL_GAP * (grid.cols - 1)) / grid.cols;
  const labelW = grid.compact ? COMPACT_LABEL_W : slim ? SLIM_LABEL_W : LABEL_W;
  const fetchW = grid.compact
    ? // narrow page: the queue keeps a slot
      Math.min(clamp(Math.round((colW - labelW) * 0.6), 110, FETCH_W[1]), Math.max(colW - labelW - 18, 0))
    : slim
      ? // two queue slots if they fit
        clamp(Math.round(lanesW - labelW - 10 - 2 * (token.w + 3)), SLIM_FETCH_W[0], SLIM_FETCH_W[1])
      : clamp(Math.round((lanesW - LABEL_W) * 0.5), FETCH_W[0], FETCH_W[1]);
  for (let i = 0; i < n; i++) {
    // two columns: the first half of the workers on the left, top to bottom, then the right
    const col = Math.floor(i / rows),
      row = i % rows;
    const x0 = lanesX + col * (colW + COL_GAP);
    const y = top + row * (laneH + laneGap);
    const rect = { x: x0, y, w: colW, h: laneH };
    const label = { x: x0, y, w: labelW, h: laneH };
    const fetch = { x: x0 + colW - fetchW, y, w: fetchW, h: laneH };
    const queue = { x: label.x + label.w + 4, y, w: Math.max(0, fetch.x - (label.x + label.w) - 10), h: laneH };
    laneRects.push({ rect, label, queue, fetch });
  }
  // rcvd_idx's box: its text on top, and under it a lane of its own for the batch next() holds,
  // so that token never sits on the box's border or covers "next batch to hand out"
  const rcvdCursor = { x: consumer.x, y: top, w: consumer.w, h: RCVD_TEXT + token.h + 10 };
  const below = rcvdCursor.h + 10;
  const consumerBox = { x: consumer.x, y: top + below, w: consumer.w, h: Math.max(areaH - below, 40) };
  const bypassY = top + 12;
  // slim columns: the same titles, shortened where they would run into the next column's
  const titles = [
    slim
      ? { x: samplerCol.x, text: 'main process', hint: '' }
      : { x: samplerCol.x, text: 'sampler → dispatcher', hint: 'main process' },
    { x: lanesX, text: workersTitle(lanes, inProcess), hint: 'index queue (waiting) · fetching now' },
    { x: result.x, text: slim ? 'results' : 'result queue', hint: slim ? 'oldest first' : 'oldest on top' },
    ...(pinCol
      ? [
          {
            x: pinCol.x,
            text: 'pin memory',
            hint: pin === 'active' ? (slim ? 'thread → queue' : 'thread → pinned queue') : 'turned off',
          },
        ]
      : []),
    { x: buffer.x, text: 'reorder buffer', hint: slim ? '_task_info' : '_task_info, holding data' },
    { x: consumer.x, text: 'training loop', hint: 'next(iter(loader))' },
  ];
  return {
    width: W,
    slim,
    bufferHeader: slim ? HEADER.bufferSlim : HEADER.buffer,
    height,
    top,
    areaH,
    bypassY,
    laneH,
    laneGap,
    lanesH,
    compact: grid.compact,
    laneCols: grid.cols,
    laneRows: rows,
    lanesX,
    lanesW,
    token,
    sampler,
    dispatcher,
    lanes: laneRects,
    result,
    pin,
    pinCol,
    pinThread,
    pinned,
    buffer,
    rcvdCursor,
    consumer: consumerBox,
    titles,
  };
}

/** @param {number} lanes @param {boolean} inProcess */
function workersTitle(lanes, inProcess) {
  if (lanes === 0) return 'worker processes';
  return inProcess ? 'main process fetches (num_workers=0)' : `${lanes} worker process${lanes === 1 ? '' : 'es'}`;
}

/**
 * Index-queue slot k (0 = head, next to the fetch box) of a lane; null when it does not fit.
 * @param {Layout} L @param {number} lane @param {number} k
 * @returns {{x:number, y:number}|null} top-left of the token
 */
export function queueSlot(L, lane, k) {
  const q = L.lanes[lane].queue;
  const step = L.token.w + 3;
  const x = q.x + q.w - (k + 1) * step;
  if (x < q.x) return null;
  return { x, y: q.y + (q.h - L.token.h) / 2 };
}

/** How many tokens a lane's index queue can show. @param {Layout} L @param {number} lane */
export function queueCapacity(L, lane) {
  return Math.max(0, Math.floor(L.lanes[lane].queue.w / (L.token.w + 3)));
}

/** Where the task being fetched sits in its lane. @param {Layout} L @param {number} lane @returns {Point} */
export function fetchSlot(L, lane) {
  const f = L.lanes[lane].fetch;
  return { x: f.x + 6, y: f.y + (f.h - L.token.h) / 2 };
}

/**
 * Slot k of a grid filling rect r row by row (tokens of size t, 4 px apart, under a header).
 * @param {Rect} r @param {Size} t @param {number} k @param {number} [header] @param {boolean} [downFirst]
 * @returns {Point|null}
 */
export function gridSlot(r, t, k, header = 0, downFirst = false) {
  const cols = Math.max(1, Math.floor((r.w - 8) / (t.w + 4)));
  const rows = Math.max(1, Math.floor((r.h - header - 8) / (t.h + 4)));
  if (k >= cols * rows) return null;
  const col = downFirst ? Math.floor(k / rows) : k % cols;
  const row = downFirst ? k % rows : Math.floor(k / cols);
  return { x: r.x + 6 + col * (t.w + 4), y: r.y + header + 6 + row * (t.h + 4) };
}

/** @param {Rect} r @param {Size} t @param {number} [header] */
export function gridCapacity(r, t, header = 0) {
  const cols = Math.max(1, Math.floor((r.w - 8) / (t.w + 4)));
  const rows = Math.max(1, Math.floor((r.h - header - 8) / (t.h + 4)));
  return cols * rows;
}

/** Header heights inside the boxes (room for "waiting for task N" and similar). */
export const HEADER = {
  result: 8,
  buffer: 70,
  bufferSlim: 104,
  consumer: 60,
  consumerSteps: 118,
  pinThread: 30,
  pinned: 18,
};

/** The result queue reads top to bottom in arrival order (oldest on top, taken first). */
export const resultSlot = (/** @type {Layout} */ L, /** @type {number} */ k) =>
  gridSlot(L.result, L.token, k, HEADER.result, true);
/** The reorder buffer's tokens sit under its text, which wraps to more lines in a slim column. */
export const bufferSlot = (/** @type {Layout} */ L, /** @type {number} */ k) =>
  gridSlot(L.buffer, L.token, k, L.bufferHeader ?? HEADER.buffer);
/** The consumer's history; its header grows when the training step reports timings (step events). */
export const consumerSlot = (/** @type {Layout} */ L, /** @type {number} */ k, steps = false) =>
  gridSlot(L.consumer, L.token, k, steps ? HEADER.consumerSteps : HEADER.consumer);
/** The task the pin thread copies now (one at a time), and the pinned queue, oldest on top. */
export const pinSlot = (/** @type {Layout} */ L) =>
  L.pinThread ? { x: L.pinThread.x + 8, y: L.pinThread.y + HEADER.pinThread + 6 } : null;
export const pinnedSlot = (/** @type {Layout} */ L, /** @type {number} */ k) =>
  L.pinned ? gridSlot(L.pinned, L.token, k, HEADER.pinned, true) : null;

/** The batch next() has taken and is about to hand out: the lane under rcvd_idx's text. */
/** @param {Layout} L @returns {Point} */
export function handSlot(L) {
  const r = L.rcvdCursor;
  return { x: r.x + r.w - L.token.w - 8, y: r.y + RCVD_TEXT + (r.h - RCVD_TEXT - L.token.h) / 2 };
}

/** Where a new task token appears: the dispatcher's out edge. */
/** @param {Layout} L @returns {Point} */
export function dispatchPoint(L) {
  const d = L.dispatcher;
  return { x: d.x + d.w - L.token.w - 6, y: d.y + d.h / 2 - L.token.h / 2 };
}

/** Do two rectangles overlap (by more than a hair)? @param {Rect} a @param {Rect} b */
export function overlaps(a, b) {
  return a.x < b.x + b.w - 0.5 && b.x < a.x + a.w - 0.5 && a.y < b.y + b.h - 0.5 && b.y < a.y + a.h - 0.5;
}

/** Does a token of `size` at `p` lie within r? @param {Point} p @param {Size} size @param {Rect} r */
export function inside(p, size, r) {
  return p.x >= r.x - 0.5 && p.y >= r.y - 0.5 && p.x + size.w <= r.x + r.w + 0.5 && p.y + size.h <= r.y + r.h + 0.5;
}

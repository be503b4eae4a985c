// A logdir job's table of ranks as GET /api/jobs/{job}/table gives it (DuckDB over the traces,
// backend/loaderscope/jobquery.py): no rank is opened to draw it. The table is virtual: rows have
// one height, a spacer gives the scroll its length, and only the rows in view are in the page, so
// a 1,024-rank job costs what a screenful does. A click on a row opens that rank's live picture.

import { fmtDuration } from './timeline-store.js';

export const ROW_PX = 22; // every row's height: the window of rows follows from the scroll offset
const OVERSCAN = 4; // rows drawn past each edge, so a fast scroll shows no blank strip

/**
 * A rank's row as the endpoint gives it (jobquery.RANKS_SQL, less the server's file path, plus the rank's run
 * on this dashboard, null when none holds its trace).
 * @typedef {{run:string|null, dashboard_run?:string|null, rank:number, name:string|null, job:string|null, batches:number,
 *   batches_per_s:number, input_bound:number, slowest_worker:number|null, slowest_worker_mean:number|null,
 *   slowest_worker_p95:number|null, slowest_steps:number, worst_lag:number|null}} JobRow
 */
/**
 * @typedef {{name:string|null, epoch:number, report:import('./ranks.js').ShardReport|{error:string}}} ShardCheck
 * @typedef {{job:string, ranks:JobRow[], steps:{name:string|null, epoch:number, step:number, rank:number|null, lag:number}[],
 *   shards:ShardCheck[], slowest:{rank:number, steps:number, of:number, worst_lag:number}|null}} JobAnswer
 */

/**
 * The first and last (exclusive) row to draw for a scroll offset.
 * @param {number} scrollTop @param {number} viewPx @param {number} count @param {number} [rowPx]
 * @returns {{first:number, last:number}}
 */
export function visibleRows(scrollTop, viewPx, count, rowPx = ROW_PX) {
  const first = Math.max(0, Math.floor(scrollTop / rowPx) - OVERSCAN);
  const last = Math.min(count, Math.ceil((scrollTop + viewPx) / rowPx) + OVERSCAN);
  return { first, last: Math.max(first, last) };
}

/**
 * The rows of one loader of the job in rank order, how many steps it has, its shard checks (a job's train and
 * eval loaders share its id; the endpoint answers for both).
 * @param {JobAnswer} answer @param {string|null} name the open run's loader name
 */
export function loaderRows(answer, name) {
  const several = new Set(answer.ranks.map((r) => r.name ?? null)).size > 1;
  /** @param {{name:string|null}} x */
  const ours = (x) => !several || (x.name ?? null) === name;
  return {
    rows: answer.ranks.filter(ours).sort((a, b) => a.rank - b.rank),
    steps: answer.steps.filter(ours).length,
    shards: answer.shards.filter(ours).sort((a, b) => a.epoch - b.epoch),
  };
}

/** @param {number} n @param {string} noun */
const counted = (n, noun) => `${n} ${noun}${n === 1 ? '' : 's'}`;

/**
 * The sentence `loaderscope job` prints first (cli/job.py slowest_sentence, jobquery.slowest_rank):
 * the rank most often last to deliver a step, lowest rank on a tie.
 * @param {JobRow[]} rows @param {number} steps the steps of these rows' loader
 */
export function slowestSentence(rows, steps) {
  let top = null;
  for (const r of rows) if (r.slowest_steps && (!top || r.slowest_steps > top.slowest_steps)) top = r;
  if (!top) {
    const counts = `${counted(rows.length, 'rank')}, ${counted(steps, 'step')}`;
    if (rows.length === 1) return { rank: null, text: `${counts}: one rank waits for no other` };
    return { rank: null, text: `${counts}: no rank was last to deliver a step `
      + "(every step's batches came within 1 µs of each other)" };
  }
  return { rank: top.rank, text: `rank ${top.rank} is the slowest: last to deliver ${top.slowest_steps} of ${steps} steps, `
    + `up to ${((top.worst_lag ?? 0) * 1000).toFixed(1)} ms after the first rank; ranks step together, so it sets the pace` };
}

/** @param {number|null} v a figure, or none (sorted below every figure) */
const orNone = (v) => (v === null ? -Infinity : v);

/** @type {{label:string, key:string, title:string, text:(r:JobRow, steps:number) => string, value:(r:JobRow) => number}[]} */
const COLUMNS = [
  { label: 'rank', key: 'rank', title: 'the rank; click a row to open its live picture', text: (r) => `rank ${r.rank}`, value: (r) => r.rank },
  { label: 'batches', key: 'batches', title: 'batches the rank handed out', text: (r) => String(r.batches), value: (r) => r.batches },
  { label: 'batches/s', key: 'batches_per_s', title: 'batches over the rank’s time from its first event to its last batch', text: (r) => r.batches_per_s.toFixed(1), value: (r) => r.batches_per_s },
  { label: 'waiting for data', key: 'input_bound', title: 'share of the run the training loop waited for a batch', text: (r) => `${(r.input_bound * 100).toFixed(0)}%`, value: (r) => r.input_bound },
  { label: 'slowest worker', key: 'slowest_worker_mean', title: 'the worker with the longest mean fetch (sorted by that mean)', text: (r) => (r.slowest_worker === null ? '–' : `worker ${r.slowest_worker}`), value: (r) => orNone(r.slowest_worker_mean) },
  { label: 'its p95', key: 'slowest_worker_p95', title: 'that worker’s 95th percentile fetch time', text: (r) => (r.slowest_worker_p95 === null ? '–' : fmtDuration(r.slowest_worker_p95)), value: (r) => orNone(r.slowest_worker_p95) },
  { label: 'last in', key: 'slowest_steps', title: 'steps this rank delivered last of all ranks, and its worst lag', text: (r, steps) => `${r.slowest_steps} of ${steps} steps${r.worst_lag === null ? '' : ` · worst ${fmtDuration(r.worst_lag)}`}`, value: (r) => r.slowest_steps },
];

/**
 * The rows sorted by one column: rank ascending first, any other column largest first (where the
 * slow rank is); ties in rank order.
 * @param {JobRow[]} rows @param {string} key a column's key @param {boolean} descending
 */
export function sortedRows(rows, key, descending) {
  const column = COLUMNS.find((c) => c.key === key) ?? COLUMNS[0];
  const sign = descending ? -1 : 1;
  return [...rows].sort((a, b) => sign * (column.value(a) - column.value(b)) || a.rank - b.rank);
}

export class JobTableView {
  /** @param {(row: JobRow) => void} onOpen a row was clicked */
  constructor(onOpen) {
    this.onOpen = onOpen;
    /** @type {JobRow[]} */
    this.rows = [];
    this.steps = 0;
    /** @type {number|null} */
    this.slowest = null;
    /** @type {number|null} the rank whose picture is shown */
    this.shown = null;
    this.drawn = '';
    /** @type {JobRow[]} the rows in rank order, as the endpoint gave them */
    this.byRank = [];
    this.sortKey = 'rank';
    this.descending = false;
    this.root = el('div', 'job-vtable');
    this.root.setAttribute('data-testid', 'job-vtable');
    this.sentence = el('div', 'job-sentence');
    this.sentence.setAttribute('data-testid', 'job-slowest');
    this.head = el('div', 'vrow vhead');
    for (const c of COLUMNS) {
      const cell = this.head.appendChild(el('span', 'sortable'));
      cell.setAttribute('data-testid', 'job-sort');
      cell.dataset.key = c.key;
      cell.title = `${c.title}; click to sort by it (again: the other way)`;
      cell.addEventListener('click', () => this.sortBy(c.key));
    }
    this.notice = el('div', 'job-notice');
    this.notice.setAttribute('data-testid', 'job-notice');
    this.notice.hidden = true;
    this.scroller = el('div', 'vscroll');
    this.spacer = el('div', 'vspacer');
    this.scroller.append(this.spacer);
    this.scroller.addEventListener('scroll', () => this.draw());
    this.scroller.addEventListener('click', (ev) => {
      const row = /** @type {HTMLElement|null} */ (/** @type {HTMLElement} */ (ev.target).closest('.vrow'));
      const r = row ? this.rows[Number(row.dataset.i)] : undefined;
      if (r) this.onOpen(r);
    });
    this.root.append(this.sentence, this.notice, this.head, this.scroller);
    this.labelHead();
  }

  /** @param {string} key a column's key: the same column again flips the order */
  sortBy(key) {
    this.descending = key === this.sortKey ? !this.descending : key !== 'rank';
    this.sortKey = key;
    this.rows = sortedRows(this.byRank, key, this.descending);
    this.labelHead();
    this.drawn = '';
    this.draw();
  }

  labelHead() {
    for (const cell of /** @type {HTMLElement[]} */ ([...this.head.children])) {
      const c = COLUMNS.find((x) => x.key === cell.dataset.key);
      const on = cell.dataset.key === this.sortKey;
      cell.textContent = `${c ? c.label : ''}${on ? (this.descending ? ' ▼' : ' ▲') : ''}`;
      cell.classList.toggle('sorted', on);
    }
  }

  /** Say why a clicked rank is not shown (a rank without a run here), or nothing. @param {string|null} text */
  say(text) {
    this.notice.textContent = text ?? '';
    this.notice.hidden = !text;
  }

  /** @param {JobRow[]} rows one loader's ranks @param {number} steps its steps @param {string} job */
  show(rows, steps, job) {
    this.byRank = rows;
    this.rows = sortedRows(rows, this.sortKey, this.descending);
    this.steps = steps;
    const s = slowestSentence(rows, steps);
    this.slowest = s.rank;
    this.sentence.textContent = s.text;
    this.sentence.dataset.rank = s.rank === null ? '' : String(s.rank);
    this.sentence.title = `job ${job}: ${rows.length} ranks, from the traces in the dashboard's logdir`;
    this.spacer.style.height = `${rows.length * ROW_PX}px`;
    this.drawn = '';
    this.draw();
  }

  /** @param {number|null} rank the rank whose live picture is on screen */
  select(rank) {
    if (rank === this.shown) return;
    this.shown = rank;
    this.drawn = '';
    this.draw();
  }

  /** Put in the page the rows in view, and only those. */
  draw() {
    const { first, last } = visibleRows(this.scroller.scrollTop, this.scroller.clientHeight || 10 * ROW_PX, this.rows.length);
    const key = `${first}:${last}`;
    if (key === this.drawn) return;
    this.drawn = key;
    const out = [];
    for (let i = first; i < last; i++) out.push(this.rowElement(this.rows[i], i));
    this.spacer.replaceChildren(...out);
  }

  /** @param {JobRow} r @param {number} i */
  rowElement(r, i) {
    const row = el('div', 'vrow rank-line');
    row.setAttribute('data-testid', 'job-row');
    row.dataset.i = String(i);
    row.dataset.rank = String(r.rank);
    row.style.top = `${i * ROW_PX}px`;
    row.classList.toggle('last', r.rank === this.slowest);
    row.classList.toggle('selected', r.rank === this.shown);
    row.title = `rank ${r.rank}: click to open its live picture`;
    for (const c of COLUMNS) row.appendChild(el('span', '')).textContent = c.text(r, this.steps);
    return row;
  }
}

/** @param {string} tag @param {string} className */
function el(tag, className) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  return e;
}

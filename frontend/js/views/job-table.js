// A logdir job's table as GET /api/jobs/{job}/table gives it (DuckDB over the traces,
// backend/loaderscope/traces/jobquery.py): a row per loader of each rank (a job is ranks × loaders: an
// ignite job's train and val loaders are two loaders of each rank, never more ranks), no rank opened
// to draw it. The table is virtual: rows have one height, a spacer gives the scroll its length, and
// only the rows in view are in the page, so a 1,024-rank job costs what a screenful does. A click on
// a row opens that rank's live picture.

import { fmtDuration } from '../model/time-window.js';

export const ROW_PX = 22; // every row's height: the window of rows follows from the scroll offset
const OVERSCAN = 4; // rows drawn past each edge, so a fast scroll shows no blank strip

/**
 * A row as the endpoint gives it: a loader of a rank (jobquery.RANKS_SQL, less the server's file path, plus
 * that run on this dashboard, null when none holds its trace). `loader`: the loader's name as its run_start
 * gave it, numbered (`name #2`) when one process had several of that name.
 * @typedef {{run:string|null, dashboard_run?:string|null, rank:number, loader:string, name:string|null,
 *   job:string|null,
 *   batches:number, batches_per_s:number, input_bound:number, slowest_worker:number|null,
 *   slowest_worker_mean:number|null,
 *   slowest_worker_p95:number|null, slowest_steps:number, worst_lag:number|null}} JobRow
 */
/**
 * A loader of the job (jobquery.JobTable.loaders): how many ranks and steps it has, its slowest rank (none
 * with one rank: one process waits for no other).
 * @typedef {{job:string|null, loader:string, name:string|null, ranks:number, steps:number,
 *   slowest:{rank:number, steps:number, of:number, worst_lag:number}|null, world_size?:number|null,
 *   missing_ranks?:number[]}} JobLoader
 * @typedef {{loader:string, epoch:number, report:import('../model/ranks.js').ShardReport|{error:string}}} ShardCheck
 * @typedef {{job:string, ranks:JobRow[], steps:{loader:string, epoch:number, step:number, rank:number|null,
 *   lag:number}[],
 *   shards:ShardCheck[], loaders:JobLoader[], notices?:string[]}} JobAnswer
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
 * The loader the open run is one rank of: its row's (the row whose run it is), else the first loader's.
 * @param {JobAnswer} answer @param {string|null} runId the open run
 * @returns {string|null}
 */
export function openLoader(answer, runId) {
  const mine = answer.ranks.find((r) => r.dashboard_run != null && r.dashboard_run === runId);
  return mine ? mine.loader : (answer.loaders[0]?.loader ?? null);
}

/** @param {number} n @param {string} noun */
const counted = (n, noun) => `${n} ${noun}${n === 1 ? '' : 's'}`;

/**
 * One loader's sentence, as `loaderscope job` prints it (cli/job.py slowest_sentence): the rank most often last
 * to deliver a step (lowest rank on a tie, jobquery.slowest_rank), or why none was.
 * @param {JobLoader} loader
 */
export function slowestSentence(loader) {
  const top = loader.slowest;
  if (!top) {
    const counts = `${counted(loader.ranks, 'rank')}, ${counted(loader.steps, 'step')}`;
    if (loader.ranks === 1) return `${counts}: one rank waits for no other`;
    return `${counts}: no rank was last to deliver a step (every step's batches came within 1 µs of each other)`;
  }
  return (
    `rank ${top.rank} is the slowest: last to deliver ${top.steps} of ${top.of} steps, ` +
    `up to ${((top.worst_lag ?? 0) * 1000).toFixed(1)} ms after the first rank; ranks step together, so it ` +
    `sets the pace`
  );
}

/**
 * A sentence per loader (cli/job.py sentences), named by its loader when the job has several.
 * @param {JobLoader[]} loaders
 * @returns {{loader:string, rank:number|null, text:string}[]}
 */
export function sentences(loaders) {
  return loaders.map((l) => ({
    loader: l.loader,
    rank: l.slowest ? l.slowest.rank : null,
    text: `${loaders.length > 1 ? `${l.loader}: ` : ''}${slowestSentence(l)}`,
  }));
}

/** @param {number|null} v a figure, or none (sorted below every figure) */
const orNone = (v) => (v === null ? -Infinity : v);

/**
 * @type {{label:string, key:string, title:string, text:(r:JobRow, steps:number) => string,
 *   value:(r:JobRow) => number|string}[]}
 */
const COLUMNS = [
  {
    label: 'loader',
    key: 'loader',
    title:
      'the loader: its name as its run_start gave it (a job is ranks × loaders: each loader’s figures are its own)',
    text: (r) => r.loader,
    value: (r) => r.loader,
  },
  {
    label: 'rank',
    key: 'rank',
    title: 'the rank; click a row to open its live picture',
    text: (r) => `rank ${r.rank}`,
    value: (r) => r.rank,
  },
  {
    label: 'batches',
    key: 'batches',
    title: 'batches the rank handed out',
    text: (r) => String(r.batches),
    value: (r) => r.batches,
  },
  {
    label: 'batches/s',
    key: 'batches_per_s',
    title: 'batches over the rank’s time from its first event to its last batch',
    text: (r) => r.batches_per_s.toFixed(1),
    value: (r) => r.batches_per_s,
  },
  {
    label: 'waiting for data',
    key: 'input_bound',
    title: 'share of the run the training loop waited for a batch',
    text: (r) => `${(r.input_bound * 100).toFixed(0)}%`,
    value: (r) => r.input_bound,
  },
  {
    label: 'slowest worker',
    key: 'slowest_worker_mean',
    title: 'the worker with the longest mean fetch (sorted by that mean)',
    text: (r) => (r.slowest_worker === null ? '–' : `worker ${r.slowest_worker}`),
    value: (r) => orNone(r.slowest_worker_mean),
  },
  {
    label: 'its p95',
    key: 'slowest_worker_p95',
    title: 'that worker’s 95th percentile fetch time',
    text: (r) => (r.slowest_worker_p95 === null ? '–' : fmtDuration(r.slowest_worker_p95)),
    value: (r) => orNone(r.slowest_worker_p95),
  },
  {
    label: 'last in',
    key: 'slowest_steps',
    title: 'steps this rank delivered last of all ranks, and its worst lag',
    text: (r, steps) =>
      `${r.slowest_steps} of ${steps} steps${r.worst_lag === null ? '' : ` · worst ${fmtDuration(r.worst_lag)}`}`,
    value: (r) => r.slowest_steps,
  },
];

/** @param {number|string} a @param {number|string} b */
const compare = (a, b) => (a < b ? -1 : a > b ? 1 : 0);

/**
 * The rows sorted by one column: rank and loader ascending first, any other column largest first (where
 * the slow rank is); ties in rank order, then loader order.
 * @param {JobRow[]} rows @param {string} key a column's key @param {boolean} descending
 */
export function sortedRows(rows, key, descending) {
  const column = COLUMNS.find((c) => c.key === key) ?? COLUMNS[1];
  const sign = descending ? -1 : 1;
  return [...rows].sort(
    (a, b) => sign * compare(column.value(a), column.value(b)) || a.rank - b.rank || compare(a.loader, b.loader),
  );
}

export class JobTableView {
  /** @param {(row: JobRow) => void} onOpen a row was clicked */
  constructor(onOpen) {
    this.onOpen = onOpen;
    /** @type {JobRow[]} */
    this.rows = [];
    /** @type {Map<string, JobLoader>} each loader of the job, by its name in the table */
    this.loaders = new Map();
    /** @type {string|null} the loader whose ranks the open run is one of */
    this.loader = null;
    /** @type {number|null} the open loader's slowest rank */
    this.slowest = null;
    /** @type {number|null} the rank (of the open loader) whose picture is shown */
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
      cell.tabIndex = 0; // Enter or Space sorts (keys.js)
      cell.setAttribute('role', 'button');
      cell.dataset.key = c.key;
      cell.title = `${c.title}; click to sort by it (again: the other way)`;
      cell.addEventListener('click', () => this.sortBy(c.key));
    }
    this.notice = el('div', 'job-notice');
    this.notice.setAttribute('data-testid', 'job-notice');
    this.notice.hidden = true;
    // what the table lacks, as `loaderscope job` says it (jobquery.JobTable.notices): the ranks its world
    // size expects that it has not, and each trace unreadable, empty or cut short
    this.damage = el('div', 'job-notice');
    this.damage.setAttribute('data-testid', 'job-damage');
    this.damage.hidden = true;
    this.scroller = el('div', 'vscroll');
    this.spacer = el('div', 'vspacer');
    this.scroller.append(this.spacer);
    this.scroller.addEventListener('scroll', () => this.draw());
    this.scroller.addEventListener('click', (ev) => {
      const row = /** @type {HTMLElement|null} */ (/** @type {HTMLElement} */ (ev.target).closest('.vrow'));
      const r = row ? this.rows[Number(row.dataset.i)] : undefined;
      if (r) this.onOpen(r);
    });
    this.root.append(this.sentence, this.damage, this.notice, this.head, this.scroller);
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

  /** @param {JobAnswer} answer @param {string|null} loader the open run's loader */
  show(answer, loader) {
    this.byRank = answer.ranks;
    this.rows = sortedRows(answer.ranks, this.sortKey, this.descending);
    this.loaders = new Map(answer.loaders.map((l) => [l.loader, l]));
    this.loader = loader;
    const lines = sentences(answer.loaders);
    const mine = lines.find((l) => l.loader === loader) ?? null;
    this.slowest = mine ? mine.rank : null;
    this.sentence.replaceChildren(
      ...lines.map((l) => {
        const line = el('div', '');
        line.dataset.loader = l.loader;
        line.dataset.rank = l.rank === null ? '' : String(l.rank);
        line.textContent = l.text;
        return line;
      }),
    );
    this.sentence.dataset.rank = this.slowest === null ? '' : String(this.slowest);
    const notices = answer.notices ?? [];
    this.damage.replaceChildren(...notices.map((text) => Object.assign(el('div', ''), { textContent: text })));
    this.damage.hidden = !notices.length;
    const ranks = new Set(answer.ranks.map((r) => r.rank)).size;
    this.sentence.title =
      `job ${answer.job}: ${counted(ranks, 'rank')} × ${counted(answer.loaders.length, 'loader')}, ` +
      "from the traces in the dashboard's logdir";
    this.spacer.style.height = `${answer.ranks.length * ROW_PX}px`;
    this.drawn = '';
    this.draw();
  }

  /** @param {number|null} rank the rank whose live picture is on screen */
  select(rank) {
    if (rank === this.shown) return;
    this.shown = rank;
    // marked in place: rows drawn anew would take the keyboard's focus from the row just opened
    for (const row of /** @type {HTMLElement[]} */ ([...this.spacer.children])) {
      row.classList.toggle('selected', row.dataset.loader === this.loader && row.dataset.rank === String(rank));
    }
  }

  /** Put in the page the rows in view, and only those. */
  draw() {
    const { first, last } = visibleRows(
      this.scroller.scrollTop,
      this.scroller.clientHeight || 10 * ROW_PX,
      this.rows.length,
    );
    const key = `${first}:${last}`;
    if (key === this.drawn) return;
    this.drawn = key;
    const out = [];
    for (let i = first; i < last; i++) out.push(this.rowElement(this.rows[i], i));
    // the row that had the keyboard's focus keeps it in its new element, if it is still in view
    const focused = /** @type {HTMLElement|null} */ (document.activeElement);
    const had = focused && this.spacer.contains(focused) ? focused : null;
    this.spacer.replaceChildren(...out);
    const same = had && out.find((r) => r.dataset.loader === had.dataset.loader && r.dataset.rank === had.dataset.rank);
    same?.focus({ preventScroll: true });
  }

  /** @param {JobRow} r @param {number} i */
  rowElement(r, i) {
    const row = el('div', 'vrow rank-line');
    row.setAttribute('data-testid', 'job-row');
    row.tabIndex = 0; // Enter or Space opens the rank (keys.js)
    row.setAttribute('role', 'button');
    row.dataset.i = String(i);
    row.dataset.rank = String(r.rank);
    row.style.top = `${i * ROW_PX}px`;
    row.dataset.loader = r.loader;
    row.classList.toggle('last', r.rank === this.loaders.get(r.loader)?.slowest?.rank);
    row.classList.toggle('selected', r.loader === this.loader && r.rank === this.shown);
    row.title = `${r.loader}, rank ${r.rank}: click to open its live picture`;
    const steps = this.loaders.get(r.loader)?.steps ?? 0;
    for (const c of COLUMNS) row.appendChild(el('span', '')).textContent = c.text(r, steps);
    return row;
  }
}

/** @param {string} tag @param {string} className */
function el(tag, className) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  return e;
}

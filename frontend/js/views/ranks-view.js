// The job: a table of its ranks (batches, rate, waiting share, the slowest worker, how often the
// rank was the last to deliver a step), a strip naming the slowest rank of the recent steps, and
// the shard check per epoch. Click a rank to drill into it (the picture and the timeline show its
// workers). Built for 64 ranks: the rows stay in the page and only the cells whose text changed
// are written, and the slowest rank per step is computed incrementally (ranks.js JobSteps).
// A logdir job the server can query shows its table instead (job-table.js): every rank's figures
// from GET /api/jobs/{job}/table, and a rank's live picture only once its row is clicked.

import { JobSteps, rankRate, shardReport, shardText, slowestWorker } from '../model/ranks.js';
import { fmtDuration } from '../model/time-window.js';
import { inputBound } from '../model/stats.js';
import { ENDED } from '../model/schema.js';
import { JobTableView, openLoader } from './job-table.js';

// A worker this close to its rank's median is not called slow: equal workers differ by noise only.
const EVEN = 1.05;

/**
 * The table's columns: what each shows, and the number it sorts by (descending first, except rank).
 * @type {{key:string, label:string, title:string, text:(r:RankRow) => string, sort:(r:RankRow) => number}[]}
 */
const COLUMNS = [
  {
    key: 'rank',
    label: 'rank',
    title: 'the rank; click a row to drill into its workers',
    text: (r) => `rank ${r.rank}${r.selected ? ' · shown' : ''}`,
    sort: (r) => r.rank,
  },
  {
    key: 'batches',
    label: 'batches',
    title: 'batches handed out so far',
    text: (r) => String(r.batches),
    sort: (r) => r.batches,
  },
  {
    key: 'rate',
    label: 'batches/s',
    title:
      'batches over the rank’s time from its first event to its last batch (as `loaderscope run --ranks` prints it)',
    text: (r) => r.rate.toFixed(1),
    sort: (r) => r.rate,
  },
  {
    key: 'wait',
    label: 'waited',
    title: 'share of the run the training loop waited for a batch',
    text: (r) => `${(r.wait * 100).toFixed(0)}%`,
    sort: (r) => r.wait,
  },
  {
    key: 'worker',
    label: 'slowest worker',
    title: 'the worker with the longest mean fetch, against the median of the rank’s workers',
    text: (r) =>
      !r.worker
        ? '–'
        : r.worker.ratio < EVEN
          ? 'none: workers even'
          : `worker ${r.worker.worker} · ${r.worker.ratio.toFixed(2)}× median`,
    sort: (r) => r.worker?.ratio ?? 0,
  },
  {
    key: 'slow',
    label: 'last to deliver',
    title: 'steps this rank delivered last of all ranks (the others waited for it), and its worst lag',
    text: (r) => r.slowText,
    sort: (r) => r.slowSteps,
  },
];

/** @typedef {{i:number, rank:number, selected:boolean, batches:number, rate:number, wait:number,
 *   worker:{worker:number, mean:number, ratio:number}|null, slowSteps:number, slowText:string,
 *   workers:string[], file:string}} RankRow */
/** @typedef {import('../model/track.js').Track} Track */
/** @typedef {import('../model/ranks.js').ShardReport | {error: string} | null} ShardCheck null while decoding */

export class RanksView {
  /**
   * @param {HTMLElement} host @param {(i:number) => void} onSelect @param {() => void} onChange
   * @param {(row:import('./job-table.js').JobRow) => string|null|void} onOpenRank a row of the job's table was
   *   clicked: open that loader's rank (or say why it cannot be)
   */
  constructor(host, onSelect, onChange, onOpenRank) {
    this.host = host;
    this.onSelect = onSelect;
    this.onChange = onChange;
    this.onOpenRank = onOpenRank;
    /** @type {JobTableView|null} the server's table of a logdir job, when it answered for the open run */
    this.jobView = null;
    this.sortKey = 'rank';
    this.descending = false;
    // the parts that stay: a heading, the strip of recent steps, the table, the shard checks
    this.head = el('div', 'ranks-head');
    this.strip = el('div', 'step-strip');
    this.table = el('table', 'job-table');
    this.scroll = el('div', 'job-scroll');
    /** @type {HTMLElement[]} */
    this.headCells = [];
    this.body = el('tbody', '');
    this.shardBox = el('div', 'shards');
    this.build();
    this.steps = new JobSteps();
    /** @type {Map<number, {row:HTMLTableRowElement, cells:HTMLElement[], chips:HTMLElement, chipKey:string}>} */
    this.rows = new Map();
    this.order = '';
    this.stripKey = '';
    /** @type {Map<number, ShardCheck>} epoch -> shard report (null while decoding) */
    this.shards = new Map();
    this.shardKey = '';
    /** @type {[Track[], Track]|null} what render() showed last */
    this.shown = null;
  }

  /** The next render writes every row again (another rank was selected, the sort changed). */
  invalidate() {
    this.order = '';
  }

  /** A new run: forget the old job's rows, steps and shard checks. */
  reset() {
    if (this.jobView) {
      this.jobView = null;
      this.host.replaceChildren(this.head, this.strip, this.scroll, this.shardBox);
    }
    this.steps = new JobSteps();
    this.rows = new Map();
    this.body.replaceChildren();
    this.order = '';
    this.stripKey = '';
    this.shards = new Map();
    this.shardKey = '';
    this.shown = null;
  }

  /** Put the parts that stay together: heading, strip, table (its head row), shard checks. */
  build() {
    this.strip.setAttribute('data-testid', 'step-strip');
    this.table.setAttribute('data-testid', 'job-table');
    const headRow = el('tr', '');
    this.headCells = COLUMNS.map((c) => {
      const th = el('th', '');
      th.textContent = c.label;
      th.title = `${c.title} — click to sort`;
      th.dataset.key = c.key;
      th.tabIndex = 0; // Enter or Space sorts (keys.js)
      th.addEventListener('click', () => this.sortBy(c.key));
      headRow.append(th);
      return th;
    });
    const workersTh = el('th', '');
    workersTh.textContent = 'workers';
    headRow.append(workersTh);
    const thead = el('thead', '');
    thead.append(headRow);
    this.table.append(thead, this.body);
    this.scroll.append(this.table);
    this.shardBox.setAttribute('data-testid', 'shards');
    this.host.replaceChildren(this.head, this.strip, this.scroll, this.shardBox);
  }

  /**
   * The server's table of the open run's logdir job: it takes the place of the table built from
   * open ranks, whose websockets are then opened one at a time, as rows are clicked. A row per loader
   * of each rank: the ranks are counted once, whatever the loaders.
   * @param {import('./job-table.js').JobAnswer} answer @param {string|null} runId the open run
   */
  showJob(answer, runId) {
    const loader = openLoader(answer, runId);
    this.jobView = new JobTableView((row) => this.jobView?.say(this.onOpenRank(row) || null));
    const ranks = new Set(answer.ranks.map((r) => r.rank)).size;
    const loaders = answer.loaders.length;
    const steps = answer.loaders.length === 1 ? ` · ${answer.loaders[0].steps} steps` : '';
    this.head.textContent =
      `job ${answer.job} · ${ranks} rank${ranks === 1 ? '' : 's'}` +
      `${loaders > 1 ? ` × ${loaders} loaders (${answer.loaders.map((l) => l.loader).join(', ')})` : ''}${steps}, ` +
      'from the traces in the dashboard’s logdir — click a row to open its live picture';
    const named = loaders > 1 ? (/** @type {string} */ l) => `${l}: ` : () => '';
    const shards = [...answer.shards].sort((a, b) =>
      a.loader < b.loader ? -1 : a.loader > b.loader ? 1 : a.epoch - b.epoch,
    );
    if (shards.length)
      this.shardBox.replaceChildren(...shards.map((c) => shardLine(c.epoch, c.report, named(c.loader))));
    else
      this.shardBox.textContent =
        'sample shards: not checked — no epoch of this job has a shard digest from every rank ' +
        '(a loader reports one at each epoch’s end when it has a DistributedSampler or runs in an initialized ' +
        'process group)';
    this.host.replaceChildren(this.head, this.jobView.root, this.shardBox);
    this.host.hidden = false;
    this.jobView.show(answer, loader);
    this.onChange(); // the timeline's choice of ranks follows the slowest rank named
  }

  /** @param {string} key a column's key: the same column again flips the order */
  sortBy(key) {
    this.descending = key === this.sortKey ? !this.descending : key !== 'rank';
    this.sortKey = key;
    this.invalidate();
    if (this.shown) this.render(...this.shown); // at once: a click should not wait for the next refresh
  }

  /** @param {import('../model/track.js').Track[]} tracks @param {import('../model/track.js').Track} selected */
  render(tracks, selected) {
    if (this.jobView) {
      this.jobView.select(selected.rank);
      return;
    }
    if (tracks.length < 2) {
      this.host.hidden = true;
      return;
    }
    this.host.hidden = false;
    this.shown = [tracks, selected];
    if (this.steps.update(tracks)) this.onChange(); // the timeline's choice of ranks may change
    this.checkShards(tracks);
    const rows = tracks.map((tr, i) => this.rowOf(tr, i, tr === selected));
    this.head.textContent =
      `job ${selected.player.full.meta.job ?? '(files)'} · ${tracks.length} ranks · ` +
      `${this.steps.total} steps every rank delivered — click a rank to drill into its workers` +
      (tracks.length > 4 ? ' (the timeline shows the rank you pick and the one most often last)' : '');
    this.renderStrip();
    this.renderRows(rows);
    this.renderShards(tracks);
  }

  /** @param {Track} tr @param {number} i @param {boolean} selected @returns {RankRow} */
  rowOf(tr, i, selected) {
    const s = tr.player.state;
    const c = this.steps.counts.get(tr.rank);
    const total = this.steps.total;
    return {
      i,
      rank: tr.rank,
      selected,
      file: tr.source === 'file' ? tr.label : '',
      batches: s.batches,
      rate: rankRate(s),
      wait: inputBound(s),
      worker: slowestWorker(s.workers.values()),
      slowSteps: c ? c.steps : 0,
      slowText: total
        ? `slowest in ${c ? c.steps : 0} of ${total}${c ? ` · worst ${fmtDuration(c.worst)}` : ''}`
        : 'no step yet',
      workers: [...s.workers.values()].sort((a, b) => a.id - b.id).map((w) => w.status),
    };
  }

  /** @param {RankRow[]} rows write the cells that changed; reorder only when the order changed */
  renderRows(rows) {
    const col = COLUMNS.find((c) => c.key === this.sortKey) ?? COLUMNS[0];
    const sign = this.descending ? -1 : 1;
    rows.sort((a, b) => sign * (col.sort(a) - col.sort(b)) || a.rank - b.rank);
    for (const r of rows) this.writeRow(r);
    const order = rows.map((r) => r.rank).join(',');
    if (order !== this.order) {
      this.order = order;
      // a row moved keeps the keyboard's focus (taking a node out of the page drops its focus)
      const focused = /** @type {HTMLElement|null} */ (document.activeElement);
      this.body.replaceChildren(...rows.flatMap((r) => this.rows.get(r.rank)?.row ?? [])); // writeRow made each
      if (focused && this.body.contains(focused)) focused.focus({ preventScroll: true });
      for (const th of this.headCells)
        th.dataset.sorted = th.dataset.key === this.sortKey ? (this.descending ? 'desc' : 'asc') : '';
    }
    const leader = this.mostOftenLast();
    for (const [rank, { row }] of this.rows) row.classList.toggle('last', rank === leader);
  }

  /** @param {RankRow} r */
  writeRow(r) {
    let entry = this.rows.get(r.rank);
    if (!entry) {
      const row = /** @type {HTMLTableRowElement} */ (el('tr', 'rank-row'));
      row.setAttribute('data-testid', 'rank-card');
      row.tabIndex = 0; // Enter or Space shows the rank (keys.js)
      row.dataset.rank = String(r.rank);
      const cells = COLUMNS.map(() => row.appendChild(el('td', '')));
      const chips = row.appendChild(el('td', 'chips'));
      row.addEventListener('click', () => this.onSelect(Number(row.dataset.index)));
      entry = { row, cells, chips, chipKey: '' };
      this.rows.set(r.rank, entry);
    }
    entry.row.dataset.index = String(r.i);
    entry.row.title = r.file || `rank ${r.rank}: click to show its workers`;
    entry.row.classList.toggle('selected', r.selected);
    const { cells } = entry;
    COLUMNS.forEach((c, k) => {
      const text = c.text(r);
      if (cells[k].textContent !== text) cells[k].textContent = text;
    });
    const chipKey = r.workers.join(',');
    if (chipKey !== entry.chipKey) {
      entry.chipKey = chipKey;
      entry.chips.title = `workers: ${r.workers.join(', ')}`;
      entry.chips.replaceChildren(...r.workers.map((st) => el('i', `wchip ${st}`)));
    }
  }

  /** The rank most often the last to deliver a step (null before the first step). */
  mostOftenLast() {
    if (this.jobView) return this.jobView.slowest;
    let best = null,
      most = 0;
    for (const [rank, c] of this.steps.counts)
      if (c.steps > most) {
        most = c.steps;
        best = rank;
      }
    return best;
  }

  /** The slowest rank of each recent step, newest on the right, and a sentence about the newest. */
  renderStrip() {
    const recent = this.steps.recent;
    const last = recent[recent.length - 1];
    const key = last ? `${this.steps.total}` : '';
    if (key === this.stripKey) return;
    this.stripKey = key;
    if (!last) {
      this.strip.textContent = 'slowest rank per step: named once every rank has delivered a step';
      return;
    }
    const worst = Math.max(...recent.map((s) => s.lag)) || 1;
    const cells = recent.map((s) => {
      const cell = el('span', 'step');
      cell.textContent = s.rank === null ? '=' : String(s.rank);
      cell.title =
        s.rank === null
          ? `epoch ${s.epoch}, step ${s.step}: every rank delivered together`
          : `epoch ${s.epoch}, step ${s.step}: rank ${s.rank}, ${fmtDuration(s.lag)} after the first rank`;
      cell.style.setProperty('--late', (s.lag / worst).toFixed(2));
      return cell;
    });
    const line = el('b', 'step-last');
    line.setAttribute('data-testid', 'slowest-rank');
    line.dataset.rank = last.rank === null ? '' : String(last.rank);
    line.textContent =
      last.rank === null
        ? `step ${last.step} (epoch ${last.epoch}): every rank delivered together`
        : `step ${last.step} (epoch ${last.epoch}): rank ${last.rank} last, ${fmtDuration(last.lag)} after the first`;
    const label = el('span', 'step-label');
    label.textContent = 'slowest rank, recent steps:';
    this.strip.replaceChildren(label, ...cells, line);
  }

  /**
   * Start decoding the shard digests of each epoch every rank has reported (once, asynchronously).
   * @param {Track[]} tracks
   */
  checkShards(tracks) {
    for (const ep of this.shardEpochs(tracks)) {
      if (this.shards.has(ep)) continue;
      /** @type {Map<number, import('../model/types.js').LoaderEvent>} */
      const ends = new Map();
      for (const tr of tracks) {
        const end = tr.epochEnds.get(ep);
        if (end) ends.set(tr.rank, end);
      } // shardEpochs: every rank has it
      this.shards.set(ep, null);
      shardReport(ends, tracks[0].epochEnds.get(ep)?.shard_length ?? 0).then(
        (r) => {
          this.shards.set(ep, r);
          this.shardKey = '';
          this.onChange();
        },
        (err) => {
          this.shards.set(ep, { error: String(err?.message ?? err) });
          this.shardKey = '';
          this.onChange();
        },
      );
    }
  }

  /** @param {Track[]} tracks */
  shardEpochs(tracks) {
    return [...tracks[0].epochEnds.keys()].filter((ep) => tracks.every((tr) => tr.epochEnds.has(ep)));
  }

  /** @param {Track[]} tracks */
  renderShards(tracks) {
    const epochs = this.shardEpochs(tracks);
    const ended = tracks.every((tr) => tr.complete || ENDED.has(tr.player.full.status));
    const key = `${tracks.length}:${epochs.join(',')}:${ended}`;
    if (key === this.shardKey) return;
    this.shardKey = key;
    const box = this.shardBox;
    if (!epochs.length) {
      box.textContent = ended
        ? uncheckedShards(tracks)
        : 'sample shards: checked when every rank has ended an epoch (runs with a DistributedSampler report what ' +
          'each rank read)';
      return;
    }
    box.replaceChildren(...epochs.map((ep) => shardLine(ep, this.shards.get(ep))));
  }
}

/** Why a job whose ranks have all ended has no shard check. @param {Track[]} tracks */
function uncheckedShards(tracks) {
  const reported = tracks.filter((tr) => tr.epochEnds.size).map((tr) => tr.rank);
  if (!reported.length) {
    return (
      'sample shards: not checked — no rank reported which samples it read (a loader reports them at each ' +
      'epoch’s end ' +
      'when it has a DistributedSampler or runs in an initialized process group)'
    );
  }
  const silent = tracks.filter((tr) => !tr.epochEnds.size).map((tr) => tr.rank);
  return (
    `sample shards: not checked — no epoch was reported by every rank (rank${reported.length > 1 ? 's' : ''} ` +
    `${reported.join(', ')} reported theirs` +
    `${silent.length ? `; rank${silent.length > 1 ? 's' : ''} ${silent.join(', ')} none` : ''})`
  );
}

/**
 * One epoch's shard check, as a line.
 * @param {number} ep
 * @param {ShardCheck|undefined} r
 * @param {string} [loader] the loader's name and a colon, in a job of several
 */
function shardLine(ep, r, loader = '') {
  const div = el('div', '');
  if (!r) div.textContent = `${loader}epoch ${ep}: checking shards…`;
  else if ('error' in r) div.textContent = `${loader}epoch ${ep}: the shards were not checked: ${r.error}`;
  else {
    div.className = r.disjoint && r.complete ? 'ok' : 'bad';
    div.dataset.disjoint = String(r.disjoint);
    div.dataset.complete = String(r.complete);
    div.textContent = `${loader}${shardText(ep, r)} (${perRank(r.per_rank)})`;
  }
  return div;
}

/**
 * The samples each rank read, in a line that stays short at 1,024 ranks: each rank named up to 16 of
 * them, else how many every rank read, or the range and the rank that read fewest.
 * @param {Record<number, number>} perRank
 */
export function perRank(perRank) {
  const entries = Object.entries(perRank)
    .map(([rank, n]) => [Number(rank), n])
    .sort((a, b) => a[0] - b[0]);
  if (entries.length <= 16) return `${entries.map(([rank, n]) => `rank ${rank}: ${n}`).join(', ')} samples`;
  const counts = entries.map(([, n]) => n);
  const low = Math.min(...counts),
    high = Math.max(...counts);
  if (low === high) return `every one of ${entries.length} ranks: ${low} samples`;
  const fewest = entries.find(([, n]) => n === low);
  return `${low}–${high} samples a rank over ${entries.length} ranks, fewest rank ${fewest ? fewest[0] : '?'}`;
}

/** @param {string} tag @param {string} className */
function el(tag, className) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  return e;
}

export const TIMELINE_ALL_RANKS = 4; // a job of more ranks shows two of them in the timeline

/**
 * The ranks whose workers the timeline draws, in rank order: all of a small job; of a larger one
 * the selected rank and the rank most often last to deliver a step (the one worth comparing).
 * @template {{rank:number}} T @param {T[]} tracks @param {T} selected @param {number|null} slowest
 */
export function timelineRanks(tracks, selected, slowest) {
  if (tracks.length <= TIMELINE_ALL_RANKS) return tracks;
  return tracks.filter((tr) => tr === selected || tr.rank === slowest);
}

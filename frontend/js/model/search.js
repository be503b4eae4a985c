// Search the open run: tasks by id, samples by index, workers, ranks, and the notes' texts (stuck,
// died, errors, timeouts, gaps...). A hit knows where it is: the spans to outline in the timeline,
// the tasks to ring in the picture, and the run time the playhead jumps to. Pure: the page hands in
// the selected rank's timeline store and event table, and the notes with their texts.

/** @typedef {import('./timeline-store.js').TimelineStore} TimelineStore */

/**
 * What was asked: `task 17`, `t17`, `#17`; `sample 13`, `index 13`, `s13`; `worker 2`, `w2`;
 * `rank 1`, `r1`; a bare number asks for all four; anything else is looked for in the notes.
 * @typedef {{number: number|null, kinds: Set<'task'|'sample'|'worker'|'rank'>, text: string}} Query
 */

/**
 * A hit. `t`: run time the playhead jumps to (null: it stays), `row` instead when the hit is an
 * event (a note: the playhead goes to just after it); `spans`: fetches (worker) and waits
 * in next() (worker null) to outline, on the run's clock; `tasks`: `epoch:idx` keys to ring in the
 * picture.
 * @typedef {{kind: 'task'|'sample'|'worker'|'rank'|'finding', text: string, t: number|null, row?: number,
 *   worker?: number, rank?: number, epoch?: number, idx?: number,
 *   spans: {worker: number|null, t0: number, t1: number}[], tasks: string[]}} Hit
 */

/**
 * A note as search reads it: its words (panels.js noteText), its time, the events before it, its worker.
 * @typedef {{text: string, t: number, row: number, worker?: number|null}} NoteEntry
 */

const PREFIXES = /** @type {const} */ ([
  ['task', /^(?:task|t|#)\s*(\d+)$/],
  ['sample', /^(?:sample|index|idx|s)\s*(\d+)$/],
  ['worker', /^(?:worker|w)\s*(\d+)$/],
  ['rank', /^(?:rank|r)\s*(\d+)$/],
]);

/** @param {string} input @returns {Query} */
export function parseQuery(input) {
  const text = input.trim().toLowerCase().replace(/\s+/g, ' ');
  if (/^\d+$/.test(text)) return { number: Number(text), kinds: new Set(['task', 'sample', 'worker', 'rank']), text };
  for (const [kind, re] of PREFIXES) {
    const m = re.exec(text);
    if (m) return { number: Number(m[1]), kinds: new Set([kind]), text };
  }
  return { number: null, kinds: new Set(), text };
}

/**
 * Every fetch of task `idx` (any epoch), finished or still running, as hits in run order.
 * @param {TimelineStore} store @param {number} idx @param {'task'|'sample'} kind @param {string} why
 * @returns {Hit[]}
 */
function taskHits(store, idx, kind, why) {
  /** @type {Hit[]} */
  const hits = [];
  for (const [worker, col] of store.workers) {
    for (let i = 0; i < col.n; i++) {
      if (col.idx[i] !== idx) continue;
      hits.push(fetchHit(kind, why, worker, col.epoch[i], idx, col.start[i], col.end[i]));
    }
    const open = store.open.get(worker);
    if (open && open.idx === idx) hits.push(fetchHit(kind, why, worker, open.epoch, idx, open.start, store.tmax, true));
  }
  return hits.sort((a, b) => (a.t ?? 0) - (b.t ?? 0));
}

/**
 * @param {'task'|'sample'} kind @param {string} why @param {number} worker @param {number} epoch
 * @param {number} idx @param {number} t0 @param {number} t1 @param {boolean} [running]
 * @returns {Hit}
 */
function fetchHit(kind, why, worker, epoch, idx, t0, t1, running = false) {
  return {
    kind,
    worker,
    epoch,
    idx,
    t: t0,
    text:
      `${why}task ${idx} · epoch ${epoch} · worker ${worker} · ` +
      `${running ? 'still fetching' : `fetched in ${fmtMs(t1 - t0)}`}`,
    spans: [{ worker, t0, t1 }],
    tasks: [`${epoch}:${idx}`],
  };
}

/** @param {number} s */
const fmtMs = (s) => (s < 1 ? `${(s * 1e3).toFixed(1)} ms` : `${s.toFixed(2)} s`);

/**
 * Tasks whose samples include index `sample`: read from each fetch's dispatch (its `indices`; a
 * task of more than 64 samples lists only its first 64, so a later one is not found).
 * @param {TimelineStore} store @param {import('./event-table.js').EventTable} table @param {number} sample
 * @returns {Hit[]}
 */
function sampleHits(store, table, sample) {
  /** @type {Hit[]} */
  const hits = [];
  for (const [worker, col] of store.workers) {
    for (let i = 0; i < col.n; i++) {
      const row = col.ref2[i];
      if (row < 0) continue;
      const indices = table.indicesOf(row);
      const pos = indices ? indices.indexOf(sample) : -1;
      if (pos < 0) continue;
      hits.push(
        fetchHit(
          'sample',
          `sample index ${sample} (${pos + 1} of ${indices?.length}) in `,
          worker,
          col.epoch[i],
          col.idx[i],
          col.start[i],
          col.end[i],
        ),
      );
    }
  }
  return hits.sort((a, b) => (a.t ?? 0) - (b.t ?? 0));
}

/**
 * @param {{store: TimelineStore, table: import('./event-table.js').EventTable, notes: NoteEntry[],
 *   ranks: number[], rank: number}} run the selected rank's timeline and events, its notes, the
 *   open job's ranks and which one is shown
 * @param {string} input what was typed
 * @returns {Hit[]} in the order they are listed: tasks, samples, workers, ranks, then notes
 */
export function search(run, input) {
  const q = parseQuery(input);
  if (!q.text) return [];
  /** @type {Hit[]} */
  const hits = [];
  const n = q.number;
  if (n !== null) {
    if (q.kinds.has('task')) hits.push(...taskHits(run.store, n, 'task', ''));
    if (q.kinds.has('sample')) hits.push(...sampleHits(run.store, run.table, n));
    if (q.kinds.has('worker') && run.store.workers.has(n)) {
      const col = run.store.workers.get(n);
      hits.push({
        kind: 'worker',
        worker: n,
        t: null,
        text: `worker ${n} · ${col?.n ?? 0} fetches`,
        spans: [],
        tasks: [],
      });
    }
    if (q.kinds.has('rank') && run.ranks.includes(n) && (run.ranks.length > 1 || q.kinds.size === 1)) {
      hits.push({
        kind: 'rank',
        rank: n,
        t: null,
        text: `rank ${n}${n === run.rank ? ' (shown)' : ''}`,
        spans: [],
        tasks: [],
      });
    }
  }
  if (q.text.length >= 2) {
    for (const note of run.notes) {
      if (!note.text.toLowerCase().includes(q.text)) continue;
      const worker = typeof note.worker === 'number' ? note.worker : undefined;
      hits.push({
        kind: 'finding',
        text: note.text,
        t: note.t,
        row: note.row,
        ...(worker === undefined ? {} : { worker }),
        spans: [],
        tasks: [],
      });
    }
  }
  return hits;
}

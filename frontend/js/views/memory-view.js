// The memory card: each process of the run at its latest memory sample up to the playhead (USS, shared,
// RSS, its high RSS), the host's headroom now and at its lowest, /dev/shm at its fullest and the batches
// in flight at their most: the figures of memory.js, the same as `loaderscope show` prints.

import { memorySummary } from '../model/memory.js';

/** @param {number|null|undefined} v bytes @returns {string} MB as the CLI prints them (10^6 bytes) */
export function mb(v) {
  return v === undefined || v === null ? '–' : (v / 1e6).toFixed(1);
}

/**
 * The card's rows and lines for a run's memory (null: no sample yet: the card hides).
 * @param {import('../model/memory.js').MemoryModel} model
 * @returns {{rows: string[][], pids: number[], lines: string[]}|null}
 */
export function memoryFigures(model) {
  const m = memorySummary(model);
  if (m === null) return null;
  const procs = m.main ? [m.main, ...m.workers] : m.workers;
  // the pid goes in the process cell's tooltip: six columns overflow the side panel at 1024 px
  const rows = procs.map((p) => [
    p.worker === null ? 'main' : `worker ${p.worker}`,
    mb(p.uss),
    mb(p.shared),
    mb(p.rss),
    mb(p.high_rss),
  ]);
  const pids = procs.map((p) => p.pid);
  const lines = [
    `${m.samples} sample${m.samples === 1 ? '' : 's'} (${m.source ?? '?'}), ${m.full_samples} full; USS and ` +
      "shared at each process's last full one, the others RSS alone; MB = 10^6 bytes",
  ];
  if (m.headroom !== null) {
    const limit = m.cgroup_limit !== null ? ` (cgroup limit ${mb(m.cgroup_limit)} MB)` : '';
    lines.push(`host headroom ${mb(m.headroom)} MB now, ${mb(m.headroom_low)} MB at the lowest${limit}`);
  }
  if (m.shm_total) lines.push(`/dev/shm: ${mb(m.shm_high)} MB of ${mb(m.shm_total)} MB used at the fullest`);
  lines.push(`batches in flight: ${mb(m.in_flight)} MB now, ${mb(m.in_flight_high)} MB at the most`);
  return { rows, pids, lines };
}

const HEAD = ['process', 'USS', 'shared', 'RSS', 'high RSS'];

export class MemoryCard {
  /** @param {HTMLElement} card @param {HTMLElement} body */
  constructor(card, body) {
    this.card = card;
    this.body = body;
    this.last = '';
  }

  /** @param {import('../model/reducer.js').LoaderState} state the run at the playhead */
  render(state) {
    const figures = state.memory.samples ? memoryFigures(state.memory) : null;
    const key = figures === null ? '' : JSON.stringify(figures);
    if (key === this.last) return;
    this.last = key;
    this.card.hidden = figures === null;
    if (figures === null) {
      this.body.replaceChildren();
      return;
    }
    const table = document.createElement('table');
    table.className = 'memory-table';
    const head = table.createTHead().insertRow();
    for (const name of HEAD) head.append(Object.assign(document.createElement('th'), { textContent: name }));
    const body = table.createTBody();
    figures.rows.forEach((row, i) => {
      const tr = body.insertRow();
      for (const cell of row) tr.insertCell().textContent = cell;
      tr.cells[0].title = `pid ${figures.pids[i]}`;
    });
    const notes = figures.lines.map((text) =>
      Object.assign(document.createElement('p'), { className: 'desc', textContent: text }),
    );
    this.body.replaceChildren(table, ...notes);
  }
}

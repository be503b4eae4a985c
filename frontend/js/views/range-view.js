// The panel under the timeline once a time range is selected (Shift+drag): what the range holds, by
// range.js — fetches per worker with their median and p95, the training loop's batches and wait,
// results parked and their cost, the events — with buttons to zoom to it and to clear it. The
// figures are kept as data attributes too (the tests compare them with Python's).

import { rangeFigures } from '../model/range.js';
import { plural } from '../model/run-list.js';
import { fmtDuration } from '../model/time-window.js';

const $ = (/** @type {string} */ id) => /** @type {HTMLElement} */ (document.getElementById(id));

/** @typedef {import('../model/range.js').RangeFigures} RangeFigures */

/** @param {string} tag @param {string} [text] @param {Record<string, string>} [data] */
function el(tag, text = '', data = {}) {
  const node = document.createElement(tag);
  if (text) node.textContent = text;
  for (const [k, v] of Object.entries(data)) node.dataset[k] = v;
  return node;
}

export class RangeView {
  /** @param {{zoom: () => void, clear: () => void}} host zoom the timeline to the range; drop it */
  constructor(host) {
    this.host = host;
    this.key = '';
    /** @type {RangeFigures|null} */
    this.figures = null;
  }

  bind() {
    $('range-zoom').addEventListener('click', () => this.host.zoom());
    $('range-clear').addEventListener('click', () => this.host.clear());
  }

  /**
   * Show the figures of [t0, t1] of `player` (recomputed only when the range or its rows changed).
   * @param {import('../model/player.js').Player} player @param {{t0: number, t1: number}|null} sel
   */
  render(player, sel) {
    const box = $('range');
    if (!sel || !player.length) {
      box.hidden = true;
      this.key = '';
      this.figures = null;
      return;
    }
    const key = `${sel.t0}:${sel.t1}:${player.rowAt(sel.t1)}:${player.length}`;
    if (key === this.key) return;
    this.key = key;
    const f = rangeFigures(player, sel.t0, sel.t1);
    this.figures = f;
    box.hidden = false;
    Object.assign(box.dataset, {
      from: String(f.from),
      to: String(f.to),
      events: String(f.events),
      batches: String(f.batches),
      wait: String(f.wait),
      parked: String(f.parked),
      parkedCost: String(f.parkedCost),
    });
    $('range-title').textContent =
      `${fmtDuration(f.t0)} – ${fmtDuration(f.t1)} (${fmtDuration(f.t1 - f.t0)}) · ` +
      `${plural(f.events, 'event')} (${f.from.toLocaleString('en')}–${f.to.toLocaleString('en')})`;
    const head = el('tr');
    for (const h of ['worker', 'fetches finished', 'median', 'p95']) {
      const th = el('th', h);
      th.setAttribute('scope', 'col');
      head.append(th);
    }
    const rows = f.workers.map((w) => {
      const tr = el('tr', '', {
        testid: 'range-worker',
        worker: String(w.worker),
        fetches: String(w.fetches),
        p50: String(w.p50 ?? ''),
        p95: String(w.p95 ?? ''),
      });
      const th = el('th', `worker ${w.worker}`);
      th.setAttribute('scope', 'row');
      tr.append(
        th,
        el('td', String(w.fetches)),
        el('td', w.p50 === null ? '–' : fmtDuration(w.p50)),
        el('td', w.p95 === null ? '–' : fmtDuration(w.p95)),
      );
      return tr;
    });
    $('range-workers').replaceChildren(head, ...rows);
    const mean = f.batches ? ` (${fmtDuration(f.wait / f.batches)} a batch)` : '';
    $('range-loop').textContent =
      `training loop: ${plural(f.batches, 'batch', 'batches')} handed over, ` +
      `${fmtDuration(f.wait)} waiting inside next()${mean}`;
    $('range-parked').textContent = f.parked
      ? `reorder buffer: ${plural(f.parked, 'result')} parked out of order, ` +
        `costing ${fmtDuration(f.parkedCost)} of waiting ` +
        '(the part of the waits after a later result had arrived)'
      : `reorder buffer: no result parked` +
        `${f.parkedCost ? `; ${fmtDuration(f.parkedCost)} of waiting behind results parked before` : ''}`;
  }
}

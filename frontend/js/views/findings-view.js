// What the run found, kept after it ends: a button per finding (stuck, died, error, timeout, the
// training loop stuck) that seeks to its moment and reopens the worker's card, and marks on the
// time slider for those moments and for every result parked in the reorder buffer.

import { fmtDuration } from '../model/time-window.js';

const $ = (/** @type {string} */ id) => /** @type {HTMLElement} */ (document.getElementById(id));
const FINDING_KINDS = new Set(['worker_stuck', 'worker_died', 'consumer_stuck', 'error', 'timeout', 'doctor_verdict']);
const MAX_PARK_MARKS = 300; // marks on the time slider for parked results, thinned evenly past this

/** @typedef {import('../model/types.js').Note} Note */

/** A finding in a few words: "worker 1 stuck on task 7". @param {Note} n */
export function findingText(n) {
  const who = n.worker !== undefined && n.worker !== null ? `worker ${n.worker}` : 'the training loop';
  switch (n.kind) {
    case 'worker_stuck':
      return `${who} stuck on task ${n.idx ?? '?'}`;
    case 'worker_died':
      return (
        `${who} died${n.signal ? ` (${n.signal})` : n.exitcode != null ? ` (exit ${n.exitcode})` : ''}` +
        `${n.idx != null ? ` on task ${n.idx}` : ''}`
      );
    case 'consumer_stuck':
      return `training loop stuck in next(), waiting for task ${n.waiting_for ?? '?'}`;
    case 'timeout':
      return `timeout= expired after ${n.seconds ?? '?'} s`;
    case 'doctor_verdict':
      return `doctor: ${n.text}`;
    default:
      return `error${n.worker != null ? ` in ${who}` : ''}${n.idx != null ? ` on task ${n.idx}` : ''}`;
  }
}

/** The findings of a rank's whole run, in the order they came. @param {import('../model/track.js').Track} tr */
export function findingsOf(tr) {
  return tr.noteItems.filter((n) => FINDING_KINDS.has(n.kind ?? ''));
}

export class FindingsView {
  /** @param {(finding: Note) => void} onShow a finding was clicked: go there and open its card */
  constructor(onShow) {
    this.onShow = onShow;
    this.findingsKey = '';
    this.marksKey = '';
  }

  /** Another run or rank: its own findings and marks come with its events. */
  reset() {
    this.findingsKey = '';
    this.marksKey = '';
    $('findings').replaceChildren();
    $('findings-box').hidden = true;
    $('pb-marks').replaceChildren();
  }

  /** @param {import('../model/track.js').Track} tr */
  render(tr) {
    const found = findingsOf(tr);
    this.renderFindings(tr, found);
    this.renderMarks(tr, found);
  }

  /**
   * Findings of the whole run (not cut at the playhead).
   * @param {import('../model/track.js').Track} tr
   * @param {Note[]} items
   */
  renderFindings(tr, items) {
    const key = `${tr.rank}:${items.length}`;
    if (this.findingsKey === key) return;
    this.findingsKey = key;
    $('findings-box').hidden = !items.length;
    $('findings').replaceChildren(
      ...items.map((n) => {
        const li = document.createElement('li');
        const b = document.createElement('button');
        b.type = 'button';
        b.dataset.kind = n.kind ?? '';
        if (n.worker !== undefined && n.worker !== null) b.dataset.worker = String(n.worker);
        b.textContent = `▶ ${fmtDuration(n.t ?? 0)} · ${findingText(n)}`;
        b.title = 'go to this moment and show the worker, its task and its stack';
        b.addEventListener('click', () => this.onShow(n));
        li.append(b);
        return li;
      }),
    );
  }

  /**
   * Marks on the time slider: stuck, died, error, timeout, and where results were parked.
   * @param {import('../model/track.js').Track} tr
   * @param {Note[]} found
   */
  renderMarks(tr, found) {
    const p = tr.player;
    if (!p.length) return;
    const t0 = p.table.t[0],
      t1 = p.table.t[p.length - 1];
    const key = `${tr.rank}:${found.length}:${tr.parked.length}:${Math.round((t1 - t0) * 20)}`;
    if (this.marksKey === key) return;
    this.marksKey = key;
    const span = Math.max(t1 - t0, 1e-9);
    /** @param {number} t @param {string} cls @param {string} title */
    const mark = (t, cls, title) => {
      const i = document.createElement('i');
      i.className = cls;
      i.style.left = `${(Math.min(1, Math.max(0, (t - t0) / span)) * 100).toFixed(2)}%`;
      i.title = title;
      return i;
    };
    const parked = tr.parked;
    const every = Math.max(1, Math.ceil(parked.length / MAX_PARK_MARKS));
    const marks = [];
    for (let k = 0; k < parked.length; k += every)
      marks.push(mark(parked[k], 'parked', 'a result parked in the reorder buffer'));
    for (const n of found) {
      const cls =
        n.kind === 'worker_died' ? 'died' : n.kind === 'timeout' ? 'timeout' : n.kind === 'error' ? 'error' : 'stuck';
      marks.push(mark(n.t ?? t0, cls, n.kind ?? ''));
    }
    const box = $('pb-marks');
    box.replaceChildren(...marks);
    box.dataset.parked = String(parked.length);
    box.dataset.alarms = String(found.length);
  }
}

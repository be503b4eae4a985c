// The cards about workers in the side column and the banner above the picture: the selected
// worker (its detail and live stack, "your code is here"), the training loop stuck in next(), and
// the alarms (stuck, died, timeout) that select their worker so its stack is on screen at once. A
// `loaderscope doctor` snapshot's banner leads with its verdict and what to do about it. Once the run
// has ended (and the playhead is at its end), the banner keeps its findings, each a link to its moment.

import { workerDetail, stackItems, alarms } from './panels.js';
import { fmtDuration } from '../model/time-window.js';
import { findingText } from './findings-view.js';

const $ = (/** @type {string} */ id) => /** @type {HTMLElement} */ (document.getElementById(id));

/**
 * What the cards read of the page.
 * @typedef {{
 *   state: () => import('../model/reducer.js').LoaderState,
 *   now: () => number,
 *   rankLabel: () => string,
 *   verdict: () => import('../model/types.js').Note|null,
 *   past: () => import('../model/types.js').Note[],
 *   show: (finding: import('../model/types.js').Note) => void,
 * }} CardsHost `now`: run time the clocks tick to; `rankLabel`: the rank's name when several are open;
 * `verdict`: a doctor snapshot's `doctor_verdict`, else null; `past`: the findings of a run that
 * ended, shown at its end; `show`: go to a finding's moment
 */

export class WorkerCards {
  /** @param {CardsHost} host */
  constructor(host) {
    this.host = host;
    /** @type {number|null} the worker whose card is open */
    this.selected = null;
  }

  /** Another run or rank: no card, no banner. */
  reset() {
    this.selected = null;
    $('worker-card').hidden = true;
    $('consumer-card').hidden = true;
    $('banner').hidden = true;
    $('banner').dataset.key = '';
  }

  /** @param {number|null} worker */
  select(worker) {
    this.selected = worker;
    this.renderWorker();
  }

  render() {
    this.renderAlarms();
    this.renderWorker();
    this.renderConsumer();
  }

  /** The red banner of alarms; a stuck or dead worker is selected so its card shows at once. */
  renderAlarms() {
    const state = this.host.state();
    /** @type {{worker: number|null, text: string, testid?: string, finding?: import('../model/types.js').Note}[]} */
    const items = [...verdictLines(this.host.verdict()), ...alarms(state, this.host.now())];
    if (!items.length) items.push(...pastLines(this.host.past()));
    const banner = $('banner');
    const key = items.map((a) => a.text).join('|');
    if (banner.dataset.key === key) return;
    banner.dataset.key = key;
    banner.hidden = !items.length;
    banner.replaceChildren(
      ...items.map((a) => {
        const div = document.createElement('div');
        div.textContent = a.text;
        if (a.testid) div.dataset.testid = a.testid;
        const finding = a.finding;
        if (finding) {
          div.className = 'alarm-link';
          div.tabIndex = 0;
          div.setAttribute('role', 'button');
          div.addEventListener('click', () => this.host.show(finding));
        } else if (a.worker !== null) {
          div.className = 'alarm-link';
          div.tabIndex = 0;
          div.setAttribute('role', 'button');
          div.addEventListener('click', () => this.select(a.worker));
        }
        return div;
      }),
    );
    // a stuck or dead worker opens its own card, so its stack is on screen without a click
    const first = items.find((a) => a.worker !== null && !a.finding);
    const current = this.selected === null ? undefined : state.workers.get(this.selected);
    if (first && (!current || (current.status !== 'stuck' && current.status !== 'died'))) this.selected = first.worker;
  }

  /** The selected worker's card: status, task, and its stack with the user's frame marked. */
  renderWorker() {
    const state = this.host.state();
    const card = $('worker-card');
    const w = this.selected === null ? undefined : state.workers.get(this.selected);
    if (!w) {
      card.hidden = true;
      return;
    }
    card.hidden = false;
    card.dataset.status = w.status;
    const title = state.config.num_workers === 0 ? 'main process' : `worker ${this.selected}`;
    const rank = this.host.rankLabel();
    $('worker-title').textContent = rank ? `${rank} · ${title}` : title;
    const text = workerDetail(state, w.id, this.host.now());
    if ($('worker-detail').textContent !== text) $('worker-detail').textContent = text;
    const stuck = w.stuck;
    const list = $('worker-stack');
    const key = stuck ? `${stuck.seq}:${stuck.t}` : '';
    if (list.dataset.seq !== key) {
      list.dataset.seq = key;
      list.replaceChildren(...stackItems(stuck?.stack ?? null));
      list.hidden = !stuck?.stack;
      const head = $('stack-head');
      head.hidden = !stuck?.stack;
      head.textContent = stuck
        ? `its Python stack, read from the live worker (pid ${stuck.pid ?? w.pid ?? '?'}) ` +
          `${fmtDuration(stuck.elapsed)} into the fetch; outermost call ` +
          `first, your code highlighted:`
        : '';
      const here = /** @type {HTMLElement|null} */ (list.querySelector('.here'));
      if (here) list.scrollTop = Math.max(0, here.offsetTop - list.offsetTop - list.clientHeight / 2);
    }
  }

  /** The training loop stuck in next(): what it waits for, who holds it, its stack. */
  renderConsumer() {
    const state = this.host.state();
    const c = state.consumer_stuck;
    const card = $('consumer-card');
    card.hidden = !c;
    if (!c) return;
    const now = this.host.now();
    const waited = +c.elapsed + (state.status === 'running' ? Math.max(0, now - c.t) : 0);
    const lines = [
      `waiting ${waited.toFixed(1)} s for task ${c.waiting_for ?? '?'}`,
      c.held_by !== undefined && c.held_by !== null
        ? `held by worker ${c.held_by}${c.has_data ? ' (its result is ready)' : ' (still fetching it)'}`
        : '',
      `reported stuck after ${(+(c.threshold ?? 0)).toFixed(1)} s`,
    ].filter(Boolean);
    const text = lines.join('\n');
    if ($('consumer-detail').textContent !== text) $('consumer-detail').textContent = text;
    const list = $('consumer-stack');
    const key = `${c.seq}:${c.t}`;
    if (list.dataset.seq !== key) {
      list.dataset.seq = key;
      list.replaceChildren(...stackItems(c.stack ?? null));
    }
  }
}

/**
 * The findings of a run that ended, as the banner's lines: what happened, when (a link there).
 * @param {import('../model/types.js').Note[]} found
 * @returns {{worker: number|null, text: string, testid: string, finding: import('../model/types.js').Note}[]}
 */
function pastLines(found) {
  return found
    .filter((n) => n.kind !== 'doctor_verdict')
    .map((n) => ({
      worker: typeof n.worker === 'number' ? n.worker : null,
      text: `this run had: ${findingText(n)} at ${fmtDuration(n.t ?? 0)} — show that moment`,
      testid: 'past-finding',
      finding: n,
    }));
}

/**
 * A doctor snapshot's verdict as the banner's first lines: what the samples showed, then what to do.
 * @param {import('../model/types.js').Note|null} v
 * @returns {{worker: number|null, text: string, testid?: string}[]}
 */
function verdictLines(v) {
  if (!v) return [];
  const worker = typeof v.worker === 'number' ? v.worker : null;
  const lines = [{ worker, text: `doctor: ${v.text}`, testid: 'doctor-verdict' }];
  if (v.advice) lines.push({ worker: null, text: `what to do: ${v.advice}`, testid: 'doctor-advice' });
  return lines;
}

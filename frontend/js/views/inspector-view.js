// The batch inspector: the batches the probe described (batch_info), picked from a list or by
// clicking a fetch span in the timeline; their structure, and how much of the run was pickled
// rather than passed through shared memory. "Sample values" asks the live workers for values.

import { structureItems } from './panels.js';
import { fmtDuration } from '../model/time-window.js';

const $ = (/** @type {string} */ id) => /** @type {HTMLElement} */ (document.getElementById(id));

/** 1536 -> "1.5 kB" @param {number} n */
function fmtBytes(n) {
  if (n < 1e3) return `${n} B`;
  if (n < 1e6) return `${(n / 1e3).toFixed(1)} kB`;
  if (n < 1e9) return `${(n / 1e6).toFixed(1)} MB`;
  return `${(n / 1e9).toFixed(2)} GB`;
}

export class InspectorView {
  /**
   * @param {{
   *   full: () => import('../model/reducer.js').LoaderState,
   *   onServer: () => boolean,
   *   askValues: () => void,
   * }} host `full`: the selected rank's state after every event; `onServer`: a run on the server
   *   is open (it can be asked for values); `askValues`: ask it
   */
  constructor(host) {
    this.host = host;
    this.key = ''; // the batch drawn last: pick value and number of samples
  }

  bind() {
    $('btn-values').addEventListener('click', () => {
      $('inspector-note').textContent = 'asked: the next batch of each worker will be listed here with its values';
      this.host.askValues();
    });
    $('inspector-pick').addEventListener('change', () => {
      $('inspector-note').textContent = '';
      this.render();
    });
  }

  /** Another run or rank: nothing of the old one's batches stays. */
  reset() {
    $('inspector-note').textContent = '';
    $('inspector-pick').replaceChildren();
    $('inspector').replaceChildren();
    $('inspector-count').textContent = '';
    $('inspector-card').hidden = true;
    this.key = '';
  }

  /**
   * A fetch span was clicked: its batch in the inspector when the probe described it, else say so.
   * @param {{idx: number, epoch: number, worker: number}} span
   */
  inspect({ idx, epoch, worker }) {
    const samples = this.host.full().batch_samples;
    const k = samples.findIndex((b) => b.idx === idx && b.epoch === epoch);
    const note = $('inspector-note');
    if (k >= 0) {
      /** @type {HTMLSelectElement} */ ($('inspector-pick')).value = String(k);
      note.textContent = '';
      this.key = '';
    } else {
      note.textContent =
        `task ${idx} (worker ${worker}, epoch ${epoch}) was not among the batches the probe described; ` +
        (samples.length
          ? 'pick one of those above'
          : 'this run has no batch descriptions (the simulator and older traces have none)');
    }
    $('inspector-card').hidden = false;
    this.render();
    $('inspector-card').scrollIntoView({ block: 'nearest' });
  }

  /** The sampled batches (a pick list) and the chosen one's structure and sizes. */
  render() {
    const full = this.host.full();
    const samples = full.batch_samples;
    const card = $('inspector-card');
    $('btn-values').hidden = !(this.host.onServer() && full.mode === 'real' && full.status === 'running');
    if (!samples.length) {
      card.hidden = !$('inspector-note').textContent;
      $('inspector-pick').hidden = true;
      return;
    }
    card.hidden = false;
    $('inspector-pick').hidden = false;
    const pick = /** @type {HTMLSelectElement} */ ($('inspector-pick'));
    if (pick.options.length !== samples.length) {
      const chosen = pick.value;
      pick.replaceChildren(
        ...samples.map(
          (b, i) =>
            new Option(
              `batch ${b.idx} · worker ${b.worker} · epoch ${b.epoch}` +
                `${b.pickle_bytes ? ` · ${b.pickle_bytes} B pickled` : ''}` +
                (b.values ? ' · with values' : ''),
              String(i),
            ),
        ),
      );
      pick.value = chosen || '0';
      $('inspector-count').textContent = `(${samples.length} sampled)`;
      this.key = '';
    }
    const b = samples[Number(pick.value) || 0];
    const key = `${pick.value}:${samples.length}`;
    if (this.key === key || !b) return;
    this.key = key;
    const ul = document.createElement('ul');
    ul.className = 'tree';
    ul.append(structureItems(b.structure));
    const facts = [];
    if (full.fetched_bytes) {
      facts.push(
        `the run so far: ${fmtBytes(full.fetched_bytes)} fetched, ${fmtBytes(full.pickled_bytes)} of it pickled ` +
          `(${((full.pickled_bytes / full.fetched_bytes) * 100).toFixed(0)}%; tensors travel through shared ` +
          `memory instead)`,
      );
    }
    if (b.pickle_bytes !== undefined && b.pickle_bytes !== null) {
      facts.push(
        `this batch pickles to ${fmtBytes(b.pickle_bytes)}` +
          `${b.pickle_s != null ? ` in ${fmtDuration(b.pickle_s)}` : ''}` +
          ' (for tensors only the handles of their shared memory)',
      );
    }
    const p = document.createElement('p');
    p.className = 'desc';
    p.textContent = facts.join('; ') || 'structure as collated in the worker';
    $('inspector').replaceChildren(p, ul);
  }
}

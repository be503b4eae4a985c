// The compare view's memory card: both runs' processes at their last sample and at their highs (USS, PSS,
// RSS), the host's headroom and the loader's totals, and each run's memory verdicts in the run page's
// words. The figures come from memory-compare.js (stats.summary()['memory'] of each run); a run without
// memory samples is said so in place of its figures.

import { mb } from './memory-view.js';

/** @typedef {import('../model/memory-compare.js').MemoryComparison} MemoryComparison */

const $ = (/** @type {string} */ id) => /** @type {HTMLElement} */ (document.getElementById(id));

/**
 * An element with attributes and children.
 * @param {string} tag @param {Record<string, string>} [attrs] @param {(Node|string)[]} [kids]
 */
function el(tag, attrs = {}, kids = []) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  node.append(...kids);
  return node;
}

const SIDES = /** @type {const} */ (['a', 'b']);
const FIGURES = /** @type {const} */ (['uss', 'pss', 'rss']);

/** The card for two runs' memory. @param {MemoryComparison} m */
export function renderCompareMemory(m) {
  const missing = SIDES.filter((_, i) => m.sides[i] === null).map((s) => s.toUpperCase());
  const note = $('compare-memory-missing');
  note.hidden = !missing.length;
  note.textContent =
    missing.length === 2
      ? 'neither run has memory samples: nothing to compare of their memory'
      : missing.length
        ? `${missing[0]} has no memory samples: its column is empty`
        : '';
  $('compare-memory-figures').hidden = missing.length === 2;
  renderProcs(m);
  renderHost(m);
  SIDES.forEach((side, i) => {
    const sampled = m.sides[i];
    const items =
      sampled === null
        ? [el('li', { class: 'muted' }, ['no memory samples'])]
        : sampled.verdicts.length
          ? sampled.verdicts.map((text) => el('li', {}, [text]))
          : [el('li', { class: 'muted' }, ['no memory verdict'])];
    $(`compare-memory-verdicts-${side}`).replaceChildren(...items);
  });
}

/** Two rows a process: its last sample, its highs; a column per run and figure. @param {MemoryComparison} m */
function renderProcs(m) {
  const sideHead = SIDES.map((side, i) => {
    const s = m.sides[i];
    const what = s === null ? 'no samples' : `${s.samples} sample${s.samples === 1 ? '' : 's'}`;
    return el('th', { colspan: '3', scope: 'colgroup', class: 'run-col' }, [`${side.toUpperCase()} · ${what}`]);
  });
  const head = el('thead', {}, [
    el('tr', {}, [
      el('th', { scope: 'col', rowspan: '2' }, ['process']),
      el('th', { scope: 'col', rowspan: '2' }, ['MB at']),
      ...sideHead,
    ]),
    el(
      'tr',
      {},
      SIDES.flatMap(() => FIGURES.map((f) => el('th', { scope: 'col', class: 'run-col' }, [f.toUpperCase()]))),
    ),
  ]);
  const rows = m.procs.flatMap((p) =>
    /** @type {const} */ (['last', 'high']).map((which, k) =>
      el(
        'tr',
        {
          'data-testid': 'compare-memory-proc',
          'data-name': p.name,
          'data-at': which,
          class: k ? 'high' : 'proc-first',
        },
        [
          ...(k ? [] : [el('th', { scope: 'rowgroup', rowspan: '2' }, [p.name])]),
          el('th', { scope: 'row' }, [which === 'last' ? 'last sample' : 'highest']),
          ...SIDES.flatMap((side) => FIGURES.map((f) => el('td', {}, [mb(p[side]?.[which][f])]))),
        ],
      ),
    ),
  );
  $('compare-memory-procs').replaceChildren(head, el('tbody', {}, rows));
}

/** The runs' own rows: headroom, all processes' PSS at its high, in flight, /dev/shm. @param {MemoryComparison} m */
function renderHost(m) {
  const head = el('tr', {}, [
    el('th', { scope: 'col' }, ['MB']),
    ...SIDES.map((s) => el('th', { scope: 'col', class: 'run-col' }, [s.toUpperCase()])),
  ]);
  const rows = m.host.map((r) =>
    el('tr', { 'data-testid': 'compare-memory-row', 'data-key': r.key }, [
      el('th', { scope: 'row' }, [r.label]),
      el('td', {}, [mb(r.a)]),
      el('td', {}, [mb(r.b)]),
    ]),
  );
  $('compare-memory-host').replaceChildren(head, ...rows);
}

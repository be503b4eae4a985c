// The search box in the top bar (`/` or Ctrl+K): as you type, the hits of search.js are listed under
// it and highlighted, spans outlined in the timeline and task tokens ringed in the picture; ↑/↓
// choose one, Enter (or a click) jumps the playhead to it, Escape clears. The box says how many hits
// there are and which one is chosen.

import { search } from '../model/search.js';

const $ = (/** @type {string} */ id) => /** @type {HTMLElement} */ (document.getElementById(id));
const SHOWN = 12; // hits listed; the rest are counted, and all of them highlighted
const TYPE_MS = 120; // typing pauses this long before a search runs

/** @typedef {import('../model/search.js').Hit} Hit */

/**
 * What the search reads and drives.
 * @typedef {{
 *   run: () => Parameters<typeof search>[0],
 *   highlight: (hits: Hit[]) => void,
 *   go: (hit: Hit) => void,
 * }} SearchHost `run`: the selected rank's store, table, notes and the job's ranks; `highlight`:
 *   outline and ring these hits (none: clear); `go`: move there
 */

export class SearchView {
  /** @param {SearchHost} host */
  constructor(host) {
    this.host = host;
    /** @type {Hit[]} */
    this.hits = [];
    this.active = 0;
    /** @type {ReturnType<typeof setTimeout>|undefined} */
    this.timer = undefined;
    this.input = /** @type {HTMLInputElement} */ ($('search'));
    this.list = $('search-results');
  }

  bind() {
    this.input.addEventListener('input', () => {
      clearTimeout(this.timer);
      this.timer = setTimeout(() => this.run(), TYPE_MS);
    });
    this.input.addEventListener('keydown', (ev) => this.key(ev));
    this.input.addEventListener('blur', () => {
      setTimeout(() => {
        if (document.activeElement !== this.input) this.list.hidden = true;
      }, 150);
    });
    this.input.addEventListener('focus', () => {
      if (this.hits.length) this.list.hidden = false;
    });
  }

  focus() {
    this.input.focus();
    this.input.select();
  }

  /** Search for what the box holds now. */
  run() {
    clearTimeout(this.timer);
    this.hits = search(this.host.run(), this.input.value);
    this.active = 0;
    this.host.highlight(this.hits);
    this.render();
  }

  /** The run changed (events came, another rank): the same query again, if there is one. */
  refresh() {
    if (this.input.value.trim()) this.run();
  }

  /** Another run opened: nothing found, nothing highlighted. */
  clear() {
    this.input.value = '';
    this.hits = [];
    this.host.highlight([]);
    this.render();
  }

  /** @param {KeyboardEvent} ev */
  key(ev) {
    if (ev.key === 'ArrowDown' || ev.key === 'ArrowUp') {
      if (!this.hits.length) return;
      const n = Math.min(this.hits.length, SHOWN);
      this.active = (this.active + (ev.key === 'ArrowDown' ? 1 : n - 1)) % n;
      this.render();
    } else if (ev.key === 'Enter') {
      if (this.timer !== undefined) this.run(); // typed faster than the pause: search first
      const hit = this.hits[this.active];
      if (hit) this.host.go(hit);
    } else if (ev.key === 'Escape') {
      this.clear();
      this.input.blur();
    } else return;
    ev.preventDefault();
    ev.stopPropagation();
  }

  render() {
    const q = this.input.value.trim();
    const n = this.hits.length;
    $('search-count').textContent = !q
      ? ''
      : n
        ? `${this.active + 1} of ${n}${n > SHOWN ? ` (${SHOWN} listed, all outlined)` : ''}`
        : 'no match';
    this.input.setAttribute('aria-activedescendant', n ? `search-hit-${this.active}` : '');
    this.input.setAttribute('aria-expanded', String(n > 0));
    const items = this.hits.slice(0, SHOWN).map((hit, i) => {
      const li = document.createElement('li');
      li.id = `search-hit-${i}`;
      li.setAttribute('role', 'option');
      li.setAttribute('aria-selected', String(i === this.active));
      li.dataset.testid = 'search-hit';
      li.dataset.kind = hit.kind;
      li.textContent = hit.text;
      // mousedown, not click: the box keeps its focus (its blur would hide the list first)
      li.addEventListener('mousedown', (ev) => {
        ev.preventDefault();
        this.active = i;
        this.render();
        this.host.go(hit);
      });
      return li;
    });
    this.list.replaceChildren(...items);
    this.list.hidden = !items.length || document.activeElement !== this.input;
  }
}

// `UrlWriter` writes the page's view (url-state.js's parameters) into the address bar at most every
// WRITE_MS: a deliberate change (a zoom, a selection, a worker, a search jump) adds a history entry,
// the playhead moving as it plays only replaces the current one.

import { viewSearch } from '../model/url-state.js';

/** @typedef {import('../model/url-state.js').ViewParams} ViewParams */

const WRITE_MS = 300; // a burst of changes (a wheel zoom, a drag, playing) becomes one write

/** Writes the page's view into the address bar, a burst of changes at a time. */
export class UrlWriter {
  /**
   * @param {() => ViewParams} read the view now
   * @param {(view: ViewParams) => void} wrote told the view a write put in the address bar: it reads the view as
   *   it is at the write, which may be newer than the change that asked for it
   */
  constructor(read, wrote) {
    this.read = read;
    this.wrote = wrote;
    /** @type {ReturnType<typeof setTimeout>|undefined} */
    this.timer = undefined;
    this.push = false; // a deliberate change is among those waiting: a new history entry
    this.paused = 0; // while the page applies a view from the URL, its own changes are not written
  }

  /**
   * The view changed; written within WRITE_MS.
   * @param {boolean} push a deliberate change (a new history entry), else the entry is replaced
   */
  changed(push) {
    if (this.paused) return;
    this.push ||= push;
    if (this.timer === undefined) this.timer = setTimeout(() => this.flush(), WRITE_MS);
  }

  /** Write now what is waiting. */
  flush() {
    clearTimeout(this.timer);
    this.timer = undefined;
    const push = this.push;
    this.push = false;
    const view = this.read();
    this.wrote(view);
    const search = viewSearch(view, location.search);
    if (search === location.search) return;
    const url = `${location.pathname}${search}${location.hash}`;
    if (push) history.pushState(history.state, '', url);
    else history.replaceState(history.state, '', url);
  }

  /** Apply a view read from the URL without writing it back. @param {() => void} apply */
  quietly(apply) {
    this.paused += 1;
    try {
      apply();
    } finally {
      this.paused -= 1;
    }
  }
}

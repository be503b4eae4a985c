// The page's keys besides playback's (playback.js: Space, ←/→, Home, End): the timeline's, once it
// has focus (W/S zoom and A/D pan around the pointer, as in Perfetto; the arrows too; F fits the
// selection or the run; Enter moves the playhead there; Escape drops the selection), `/` and
// Ctrl+K to search, `?` for the list of keys, and Enter or Space on anything focusable that is not
// a native control (a worker lane, a rank's row, a sort header) acts as a click on it.

const $ = (/** @type {string} */ id) => /** @type {HTMLElement} */ (document.getElementById(id));
const ZOOM = 0.8; // one W: the window shrinks to 80% (S: grows by 1/0.8)
const PAN = 0.15; // one A or D: 15% of the window

/** Native controls: they already act on Enter and Space themselves. */
const NATIVE = 'button, a[href], input, select, textarea, summary, canvas, dialog, [contenteditable="true"]';

/**
 * The timeline keys, for the list and the tests: key, what it does.
 * @type {ReadonlyArray<readonly [string, string]>}
 */
export const KEYS = [
  ['W / ↑', 'zoom in around the pointer (timeline focused)'],
  ['S / ↓', 'zoom out'],
  ['A / ←', 'pan earlier'],
  ['D / →', 'pan later'],
  ['F', 'fit the selected range, or the whole run'],
  ['Shift + drag', 'select a time range: its summary opens under the timeline'],
  ['Enter', 'move the playhead to the selection (or the middle of the window)'],
  ['Esc', 'clear the selection; close a dialog or the comparison'],
  ['/ or Ctrl+K', 'search: task 17, sample 13, worker 2, rank 1, or words of a finding'],
  ['Space', 'play or pause the replay (not while a button has focus: Space presses that button)'],
  ['← / →', 'one event back or forward (Shift: one batch); Home, End: the ends'],
  ['?', 'this list'],
];

/**
 * What the keys drive.
 * @typedef {{
 *   timeline: import('./timeline-view.js').TimelineView,
 *   focusSearch: () => void,
 *   seekTime: (t: number) => void,
 *   clearSelection: () => void,
 * }} KeysHost
 */

export class Keys {
  /** @param {KeysHost} host */
  constructor(host) {
    this.host = host;
  }

  bind() {
    this.renderHelp();
    this.host.timeline.canvas.addEventListener('keydown', (ev) => this.timelineKey(ev));
    window.addEventListener('keydown', (ev) => this.pageKey(ev));
    $('btn-keys').addEventListener('click', () => this.toggleHelp());
    $('keys-close').addEventListener('click', () => this.toggleHelp(false));
  }

  /** The list of keys in the dialog. */
  renderHelp() {
    const rows = KEYS.map(([key, what]) => {
      const tr = document.createElement('tr');
      const th = document.createElement('th');
      th.scope = 'row';
      th.append(
        ...key.split(' ').map((k) => {
          if (k === '/' || k === '+' || k === 'or') return ` ${k} `;
          const kbd = document.createElement('kbd');
          kbd.textContent = k;
          return kbd;
        }),
      );
      const td = document.createElement('td');
      td.textContent = what;
      tr.append(th, td);
      return tr;
    });
    $('keys-table').replaceChildren(...rows);
  }

  /** @param {boolean} [open] */
  toggleHelp(open) {
    const dialog = /** @type {HTMLDialogElement} */ ($('keys-help'));
    const show = open ?? !dialog.open;
    if (show && !dialog.open) dialog.showModal();
    else if (!show && dialog.open) dialog.close();
  }

  /** Keys on the focused timeline: they move the view, not the playback. @param {KeyboardEvent} ev */
  timelineKey(ev) {
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    const tl = this.host.timeline;
    const key = ev.key.length === 1 ? ev.key.toLowerCase() : ev.key;
    switch (key) {
      case 'w':
      case 'ArrowUp':
        tl.zoomBy(ZOOM);
        break;
      case 's':
      case 'ArrowDown':
        tl.zoomBy(1 / ZOOM);
        break;
      case 'a':
      case 'ArrowLeft':
        tl.panBy(-PAN);
        break;
      case 'd':
      case 'ArrowRight':
        tl.panBy(PAN);
        break;
      case 'f':
        if (tl.selection) tl.setView(tl.selection);
        else tl.fit(true);
        break;
      case 'Enter': {
        const sel = tl.selection;
        this.host.seekTime(sel ? sel.t0 : (tl.view.t0 + tl.view.t1) / 2);
        break;
      }
      case 'Escape':
        if (!tl.selection) return;
        this.host.clearSelection();
        break;
      default:
        return;
    }
    ev.preventDefault();
    ev.stopPropagation(); // playback's keys (window) are not the timeline's
  }

  /** @param {KeyboardEvent} ev */
  pageKey(ev) {
    const t = /** @type {HTMLElement|null} */ (ev.target instanceof HTMLElement ? ev.target : null);
    const typing =
      !!t && (t.tagName === 'INPUT' || t.tagName === 'SELECT' || t.tagName === 'TEXTAREA' || t.isContentEditable);
    if ((ev.key === 'k' || ev.key === 'K') && (ev.ctrlKey || ev.metaKey)) {
      ev.preventDefault();
      this.host.focusSearch();
      return;
    }
    if (typing || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    if (ev.key === '/') {
      ev.preventDefault();
      this.host.focusSearch();
    } else if (ev.key === '?') {
      ev.preventDefault();
      this.toggleHelp();
    } else if (
      (ev.key === 'Enter' || ev.key === ' ') &&
      t &&
      t.tabIndex >= 0 &&
      t.hasAttribute('tabindex') &&
      !t.matches(NATIVE)
    ) {
      // a lane, a rank's row, a sort header: focusable elements that act on a click act on Enter too
      ev.preventDefault();
      ev.stopPropagation();
      t.click();
    }
  }
}

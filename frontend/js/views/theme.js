// Light or dark: the browser's `prefers-color-scheme` unless the user chose with the toggle (kept in
// localStorage) or a link names one (`?theme=`). The CSS follows `:root[data-theme]` (its colours are
// light-dark() pairs); the canvases draw with colors.js's palette of the same theme.

import { usePalette } from '../model/colors.js';

const STORE_KEY = 'loaderscope.theme';
const $ = (/** @type {string} */ id) => /** @type {HTMLElement} */ (document.getElementById(id));

/** @typedef {'light'|'dark'} Theme */

/** @param {unknown} v @returns {v is Theme} */
const isTheme = (v) => v === 'light' || v === 'dark';

export class ThemeSwitch {
  /** @param {() => void} changed the canvases redraw (their colours changed) */
  constructor(changed) {
    this.changed = changed;
    this.media = window.matchMedia('(prefers-color-scheme: light)');
    /** @type {Theme|null} the user's explicit choice; null: the browser's */
    this.chosen = this.stored(); // null with storage off (a private window's policy): the browser's theme
    this.media.addEventListener('change', () => this.apply());
  }

  /** The theme remembered in this browser, or null. @returns {Theme|null} */
  stored() {
    try {
      const v = localStorage.getItem(STORE_KEY);
      return isTheme(v) ? v : null;
    } catch {
      return null;
    }
  }

  /** The theme shown now. @returns {Theme} */
  get effective() {
    return this.chosen ?? (this.media.matches ? 'light' : 'dark');
  }

  bind() {
    $('btn-theme').addEventListener('click', () => this.choose(this.effective === 'dark' ? 'light' : 'dark'));
    this.apply();
  }

  /**
   * Show `theme` and remember it; `remember` false: a link's theme, shown without becoming the default.
   * @param {Theme|null} theme null: follow the browser again @param {boolean} [remember]
   */
  choose(theme, remember = true) {
    this.chosen = theme;
    if (remember) {
      try {
        if (theme) localStorage.setItem(STORE_KEY, theme);
        else localStorage.removeItem(STORE_KEY);
      } catch {
        /* not remembered: storage is off */
      }
    }
    this.apply();
  }

  apply() {
    const root = document.documentElement;
    if (this.chosen) root.dataset.theme = this.chosen;
    else delete root.dataset.theme;
    const theme = this.effective;
    usePalette(theme);
    const button = $('btn-theme');
    const other = theme === 'dark' ? 'light' : 'dark';
    button.textContent = theme === 'dark' ? '☀ light' : '☾ dark';
    button.title = `switch to the ${other} theme (remembered in this browser)`;
    button.setAttribute('aria-label', `switch to the ${other} theme`);
    button.dataset.theme = theme;
    this.changed();
  }
}

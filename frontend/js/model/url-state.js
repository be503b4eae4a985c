// The URL is the view: the run, the playhead, the zoom window, the selected worker, batch and
// range, the compare pair and an explicit theme are query parameters (DESIGN §21 ◆), so that a
// reload or a shared link shows the same view, and Back and Forward move between views. Parsing and
// formatting, here, are pure (`parseView`, `viewSearch`); url-writer.js writes the address bar.

/** The view parameters, in the order the address shows them (`run` is ServerRun's). */
export const VIEW_KEYS = /** @type {const} */ (['at', 'view', 'worker', 'batch', 'range', 'compare', 'theme']);
/** The parameters that belong to the open run: forgotten when another run opens. */
export const RUN_VIEW_KEYS = /** @type {const} */ (['at', 'view', 'worker', 'batch', 'range']);

/**
 * A view as the URL holds it. `at`: the playhead, as the number of the run's events applied (absent:
 * at the end, following a live run); `view`, `range`: [t0, t1] on the run's clock (s); `batch`: the
 * selected batch as [epoch, task].
 * @typedef {{at?: number, view?: [number, number], worker?: number, batch?: [number, number],
 *   range?: [number, number], compare?: [string, string], theme?: 'light'|'dark'}} ViewParams
 */

/** A time for the address: to the microsecond, no trailing zeros. @param {number} t */
export const fmtTime = (t) => String(+t.toFixed(6));

/** @param {string|null} v @returns {[number, number]|undefined} two finite numbers, the first below the second */
function pair(v) {
  const parts = (v ?? '').split(',');
  if (parts.length !== 2) return undefined;
  const [a, b] = parts.map(Number);
  return parts.every((p) => p.trim() !== '') && Number.isFinite(a) && Number.isFinite(b) && a < b ? [a, b] : undefined;
}

/** @param {string|null} v @returns {number|undefined} a whole number ≥ 0 */
function count(v) {
  if (v === null || !/^\d{1,12}$/.test(v)) return undefined;
  return Number(v);
}

/**
 * The view a query string names; a parameter that does not parse is left out (the page then shows
 * its default for it), never an error: a link shared from an older page still opens.
 * @param {string} search location.search @returns {ViewParams}
 */
export function parseView(search) {
  const q = new URLSearchParams(search);
  /** @type {ViewParams} */
  const v = {};
  const at = count(q.get('at'));
  if (at !== undefined) v.at = at;
  const view = pair(q.get('view'));
  if (view) v.view = view;
  const worker = count(q.get('worker'));
  if (worker !== undefined) v.worker = worker;
  const batch = (q.get('batch') ?? '').split('.');
  if (batch.length === 2 && batch.every((b) => count(b) !== undefined)) v.batch = [Number(batch[0]), Number(batch[1])];
  const range = pair(q.get('range'));
  if (range) v.range = range;
  const compare = (q.get('compare') ?? '').split(',');
  if (compare.length === 2 && compare.every(Boolean)) v.compare = [compare[0], compare[1]];
  const theme = q.get('theme');
  if (theme === 'light' || theme === 'dark') v.theme = theme;
  return v;
}

/**
 * `search` with the view parameters replaced by `v`'s (others, such as `run`, kept as they are).
 * @param {ViewParams} v @param {string} search the current location.search @returns {string} with its `?`, or ''
 */
export function viewSearch(v, search) {
  const q = new URLSearchParams(search);
  for (const k of VIEW_KEYS) q.delete(k);
  q.delete('token');
  if (v.at !== undefined) q.set('at', String(v.at));
  if (v.view) q.set('view', v.view.map(fmtTime).join(','));
  if (v.worker !== undefined) q.set('worker', String(v.worker));
  if (v.batch) q.set('batch', v.batch.join('.'));
  if (v.range) q.set('range', v.range.map(fmtTime).join(','));
  if (v.compare) q.set('compare', v.compare.join(','));
  if (v.theme) q.set('theme', v.theme);
  const s = q.toString().replace(/%2C/g, ',');
  return s ? `?${s}` : '';
}

/** A URL without the open run's view (another run opens). @param {URL} url */
export function withoutRunView(url) {
  for (const k of RUN_VIEW_KEYS) url.searchParams.delete(k);
  return url;
}

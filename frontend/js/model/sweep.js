// What-if sweeps (POST /api/sweeps): the request from the panel's fields, and the rows turned into
// chart series. Pure: unit-tested with node --test.

/** @typedef {number|boolean|string} SweepValue a value the panel sweeps a parameter over */
/**
 * A row of a sweep's answer (POST /api/sweeps): the swept values by parameter name, and the run's figures.
 * @typedef {Record<string, unknown> & {batches_per_s?: number, input_bound?: number, status?: string}} SweepRow
 */
/**
 * The request body: the scenario, its parameters, the values per swept parameter, the cost model.
 * @typedef {{scenario: string, params: object, grid: Record<string, SweepValue[]>, costs?: object}} SweepBody
 */

/** The grid the server accepts at most (combinations). */
export const MAX_COMBINATIONS = 36;

/**
 * "1, 2,4 8" → [1, 2, 4, 8]; numbers stay numbers, true/false booleans, anything else a string.
 * @param {unknown} text
 * @returns {{values?: SweepValue[], error?: string}}
 */
export function parseValues(text) {
  const parts = String(text ?? '')
    .split(/[\s,;]+/)
    .filter(Boolean);
  if (!parts.length) return { error: 'give one or more values, e.g. 1,2,4,8' };
  const values = parts.map((p) =>
    /^-?(\d+\.?\d*|\.\d+)(e-?\d+)?$/i.test(p) ? Number(p) : p === 'true' ? true : p === 'false' ? false : p,
  );
  if (new Set(values.map(String)).size !== values.length) return { error: 'each value once' };
  return { values };
}

/**
 * The request body, or the problems per panel field (`key`, `values`, `key2`, `values2`).
 * @param {{scenario:string, params:object, costs?:object|null, key:string, values:string, key2?:string,
 *   values2?:string}} f
 * @returns {{body?: SweepBody, errors: Record<string, string>}}
 */
export function sweepRequest(f) {
  /** @type {Record<string, string>} */
  const errors = {};
  /** @type {Record<string, SweepValue[]>} */
  const grid = {};
  if (!f.key) errors.key = 'pick a parameter to sweep';
  const a = parseValues(f.values);
  if (a.error) errors.values = a.error;
  else if (f.key && a.values) grid[f.key] = a.values;
  if (f.key2) {
    if (f.key2 === f.key) errors.key2 = 'pick a different parameter (or none)';
    const b = parseValues(f.values2);
    if (b.error) errors.values2 = b.error;
    else if (f.key2 !== f.key && b.values) grid[f.key2] = b.values;
  }
  const n = Object.values(grid).reduce((m, v) => m * v.length, 1);
  if (!Object.keys(errors).length && n > MAX_COMBINATIONS) {
    errors[f.key2 ? 'values2' : 'values'] = `${n} combinations: at most ${MAX_COMBINATIONS} per sweep`;
  }
  if (Object.keys(errors).length) return { errors };
  /** @type {SweepBody} */
  const body = { scenario: f.scenario, params: f.params ?? {}, grid };
  if (f.costs) body.costs = f.costs;
  return { body, errors };
}

/**
 * Which panel field a 422 problem (`field`: "grid.num_workers", "grid", "params.x", "scenario") belongs to.
 * @param {unknown} field @param {string} key @param {string} [key2]
 * @returns {'key'|'values'|'key2'|'values2'|null}
 */
export function sweepErrorField(field, key, key2) {
  const f = String(field ?? '').replace(/^body\./, '');
  if (f === 'grid') return key2 ? 'values2' : 'values';
  const m = /^grid\.([^.]+)/.exec(f);
  if (m) return m[1] === key2 ? 'values2' : 'values';
  return null;
}

/**
 * Rows → one series per value of the second key (or one series): points in the order of the first
 * key's values as sent, x = position of the value (categorical: 1, 2, 4, 8 are evenly spaced).
 * @param {SweepRow[]} rows
 * @param {string} key
 * @param {string|undefined|null} key2
 * @param {SweepValue[]|undefined|null} xs
 * @returns {{xs: string[], series: {label: string, points: SweepPoint[]}[]}}
 */
export function sweepSeries(rows, key, key2, xs) {
  const order = (xs && xs.length ? xs : [...new Set(rows.map((r) => r[key]))]).map(String);
  /** @type {Map<string, SweepPoint[]>} */
  const groups = new Map();
  for (const r of rows) {
    const g = key2 ? `${key2}=${r[key2]}` : '';
    let points = groups.get(g);
    if (points === undefined) groups.set(g, (points = []));
    const i = order.indexOf(String(r[key]));
    points.push({
      i: i < 0 ? order.length : i,
      x: r[key],
      batches_per_s: Number(r.batches_per_s) || 0,
      input_bound: Number(r.input_bound) || 0,
    });
  }
  const series = [...groups.entries()].map(([label, points]) => ({ label, points: points.sort((p, q) => p.i - q.i) }));
  return { xs: order, series };
}

/**
 * @typedef {{i: number, x: unknown, batches_per_s: number, input_bound: number}} SweepPoint i: the x value's position
 */

/** A chart axis ceiling: 1, 2, 2.5, 5 × 10^k at or above v. @param {number} v */
export function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v * 0.999) return m * p;
  return 10 * p;
}

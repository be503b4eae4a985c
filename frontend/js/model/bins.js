// Log-scaled histogram bins for fetch times: the worker panel and the compare view share them.
// Pure: no DOM.

/**
 * Log-spaced bin edges covering [lo, hi] seconds; a flat range is widened a little.
 * @param {number} lo
 * @param {number} hi
 * @param {number} bins
 */
export function logEdges(lo, hi, bins) {
  lo = Math.max(lo, 1e-6);
  hi = Math.max(hi, lo * 1.5);
  const a = Math.log(lo / 1.05),
    b = Math.log(hi * 1.05);
  return Array.from({ length: bins + 1 }, (_, i) => Math.exp(a + ((b - a) * i) / bins));
}

/**
 * How many values fall in each bin of `edges` (values outside go to the end bins).
 * @param {Iterable<number>} values
 * @param {number[]} edges
 */
export function binCounts(values, edges) {
  const bins = edges.length - 1;
  const out = new Array(bins).fill(0);
  const a = Math.log(edges[0]),
    span = Math.log(edges[bins]) - a;
  for (const v of values) {
    const k = Math.floor(((Math.log(Math.max(v, 1e-9)) - a) / span) * bins);
    out[Math.min(Math.max(k, 0), bins - 1)] += 1;
  }
  return out;
}

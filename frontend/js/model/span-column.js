// One row of spans, stored column-wise in growable typed arrays so a million events stay cheap,
// with the queries the canvas needs: which spans are visible (binary search) and, when zoomed out,
// how busy each pixel column is (prefix sums: O(width · log n), whatever n is). Pure.

/** One row of non-overlapping spans, appended roughly in start order. */
export class SpanColumn {
  constructor(capacity = 256) {
    this.n = 0;
    this.start = new Float64Array(capacity);
    this.end = new Float64Array(capacity);
    this.idx = new Int32Array(capacity);
    this.epoch = new Int32Array(capacity);
    /** event rows (in the run's EventTable) behind each span, -1 if unknown: what hover shows */
    this.ref = new Int32Array(capacity);
    this.ref2 = new Int32Array(capacity);
    /** prefix sums of durations: cum[i] = total duration of spans 0..i-1 */
    this.cum = new Float64Array(capacity + 1);
  }

  grow() {
    const cap = this.start.length * 2;
    for (const key of /** @type {const} */ (['start', 'end', 'cum'])) {
      const old = this[key];
      const next = new Float64Array(key === 'cum' ? cap + 1 : cap);
      next.set(old);
      this[key] = next;
    }
    for (const key of /** @type {const} */ (['idx', 'epoch', 'ref', 'ref2'])) {
      const next = new Int32Array(cap);
      next.set(this[key]);
      this[key] = next;
    }
  }

  /**
   * Append a span; one that starts before the last is inserted in order (rare clock skew).
   * @param {number} start @param {number} end @param {number} idx @param {number} epoch
   * @param {number} [ref] @param {number} [ref2]
   */
  push(start, end, idx, epoch, ref = -1, ref2 = -1) {
    if (end < start) end = start;
    if (this.n === this.start.length) this.grow();
    let i = this.n;
    if (i > 0 && start < this.start[i - 1]) {
      i = upperBound(this.start, this.n, start);
      for (const key of /** @type {const} */ (['start', 'end', 'idx', 'epoch', 'ref', 'ref2']))
        this[key].copyWithin(i + 1, i, this.n);
    }
    this.start[i] = start;
    this.end[i] = end;
    this.idx[i] = idx;
    this.epoch[i] = epoch;
    this.ref[i] = ref;
    this.ref2[i] = ref2;
    this.n += 1;
    for (let k = i; k < this.n; k++) this.cum[k + 1] = this.cum[k] + (this.end[k] - this.start[k]);
  }

  /**
   * [i0, i1): spans that intersect [t0, t1]. Ends are monotone because spans do not overlap.
   * @param {number} t0 @param {number} t1 @returns {[number, number]}
   */
  visible(t0, t1) {
    const i0 = lowerBound(this.end, this.n, t0);
    const i1 = upperBound(this.start, this.n, t1);
    return [i0, Math.max(i0, i1)];
  }

  /** Total span time inside [a, b). @param {number} a @param {number} b */
  busy(a, b) {
    if (b <= a || this.n === 0) return 0;
    // first span ending after a, first span starting at/after b
    return this.covered(a, b, upperBound(this.end, this.n, a), lowerBound(this.start, this.n, b));
  }

  /**
   * busy(a, b) given its two searches' answers.
   * @param {number} a
   * @param {number} b
   * @param {number} i
   * @param {number} j
   */
  covered(a, b, i, j) {
    if (j <= i) return 0;
    let sum = this.cum[j] - this.cum[i];
    sum -= Math.max(0, a - this.start[i]);
    sum -= Math.max(0, this.end[j - 1] - b);
    return Math.max(0, sum);
  }

  /**
   * Busy fraction of each of `buckets` equal slices of [t0, t1). The slices' edges ascend, so each
   * search gallops on from the last one's answer: a frame reads the columns near the view, not
   * log n cold cache lines per slice (ten million events are a million spans a row).
   * @param {number} t0 @param {number} t1 @param {number} buckets
   */
  occupancy(t0, t1, buckets) {
    const out = new Float32Array(buckets);
    const w = (t1 - t0) / buckets;
    if (w <= 0 || this.n === 0) return out;
    let i = 0,
      j = 0;
    for (let k = 0; k < buckets; k++) {
      const a = t0 + k * w,
        b = a + w;
      i = gallop(this.end, this.n, a, i, true);
      j = gallop(this.start, this.n, b, j, false);
      out[k] = Math.min(1, this.covered(a, b, i, j) / w);
    }
    return out;
  }

  /** The span containing time t, or -1. @param {number} t */
  at(t) {
    const i = upperBound(this.start, this.n, t) - 1;
    return i >= 0 && this.end[i] >= t ? i : -1;
  }
}

/**
 * lowerBound (`upper` false) or upperBound (`upper` true) of ascending `arr`, searched from `from`
 * on (no index before it qualifies): steps of 1, 2, 4, … then a binary search in the last step.
 * @param {ArrayLike<number>} arr @param {number} n @param {number} v @param {number} from @param {boolean} upper
 */
export function gallop(arr, n, v, from, upper) {
  let lo = from,
    hi = from,
    step = 1;
  while (hi < n && (upper ? arr[hi] <= v : arr[hi] < v)) {
    lo = hi + 1;
    hi += step;
    step *= 2;
  }
  if (hi > n) hi = n;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (upper ? arr[mid] <= v : arr[mid] < v) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * First i in [0, n) with arr[i] >= v (n if none).
 * @param {ArrayLike<number>} arr
 * @param {number} n
 * @param {number} v
 */
export function lowerBound(arr, n, v) {
  let lo = 0,
    hi = n;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (arr[mid] < v) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** First i in [0, n) with arr[i] > v (n if none). @param {ArrayLike<number>} arr @param {number} n @param {number} v */
export function upperBound(arr, n, v) {
  let lo = 0,
    hi = n;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (arr[mid] <= v) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

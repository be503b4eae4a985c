// Many ranks, one job (mirrors backend/loaderscope/model/ranks.py): which rank is slowest to deliver
// each step, and whether the ranks' sample shards overlap or miss indices. Each rank's probe
// reports at every epoch end how often it read each dataset index: base64(zlib(one byte per
// index)), decoded here with the browser's own DecompressionStream('deflate') (zlib framing).
// Pure apart from that decoder.

import { say } from './wording.gen.js';

/** The bytes of a base64 string. @param {string} text */
export function fromBase64(text) {
  const bin = atob(text);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

// The most indices a digest may count (ranks.MAX_SHARD_LENGTH): whatever an epoch_end claims, a check
// holds a byte per index and a sum of two bytes per index, no more.
export const MAX_SHARD_LENGTH = 2 ** 27;

/**
 * Per-index read counts of one rank's epoch (ranks.decode_shard): inflated into `length` bytes, and
 * never past them (a digest that inflates further, a zip bomb, is stopped there).
 * @param {string} digest @param {number} length
 */
export async function decodeShard(digest, length) {
  if (!(Number.isInteger(length) && length >= 0 && length <= MAX_SHARD_LENGTH)) {
    throw new Error(`a shard digest for a dataset of ${length} samples: at most ${MAX_SHARD_LENGTH} are checked`);
  }
  const reader = new Blob([fromBase64(digest)]).stream().pipeThrough(new DecompressionStream('deflate')).getReader();
  const counts = new Uint8Array(length);
  let filled = 0;
  for (let part = await reader.read(); !part.done; part = await reader.read()) {
    if (filled + part.value.length > length) {
      reader.cancel();
      throw new Error(`shard digest holds more than ${length} counts for a dataset of ${length}`);
    }
    counts.set(part.value, filled);
    filled += part.value.length;
  }
  if (filled !== length) throw new Error(`shard digest holds ${filled} counts for a dataset of ${length}`);
  return counts;
}

/**
 * Whether the indices read twice are DistributedSampler's padding (ranks.is_padding): with
 * drop_last=False it gives each of R ranks ceil(length / R) samples, topping the last ranks up with
 * the epoch's first indices (torch/utils/data/distributed.py), so every index is read, ranks read
 * equally many, and R·ceil(length / R) − length of them twice.
 * @param {number[]} reads @param {number} length @param {number} twice @param {number} missing
 */
export function isPadding(reads, length, twice, missing) {
  const perRank = reads.length ? Math.ceil(length / reads.length) : 0;
  return twice > 0 && missing === 0 && reads.every((n) => n === perRank) && twice === perRank * reads.length - length;
}

/**
 * Overlap and coverage of one epoch's shards across ranks (ranks.shard_report); the indices that
 * DistributedSampler's padding explains are `padding`, not `overlap`.
 * @param {Map<number, {shard?: string|null}>|Record<number, {shard?: string|null}>} epochEnds rank -> epoch_end event
 *   (with shard)
 * @param {number} length dataset length
 * @param {number} [sample] indices named per list
 * @returns {Promise<ShardReport>}
 */
export async function shardReport(epochEnds, length, sample = 10) {
  /** @type {Array<[number, {shard?: string|null}]>} */
  const entries = (
    epochEnds instanceof Map
      ? [...epochEnds]
      : Object.entries(epochEnds).map(([r, e]) => /** @type {[number, {shard?: string|null}]} */ ([Number(r), e]))
  ).sort((a, b) => a[0] - b[0]);
  const total = new Uint16Array(length);
  /** @type {Record<number, number>} */
  const perRank = {};
  const reads = [];
  for (const [rank, event] of entries) {
    const counts = await decodeShard(event.shard ?? '', length);
    let read = 0,
      all = 0;
    for (let i = 0; i < length; i++) {
      if (counts[i]) read += 1;
      all += counts[i];
      total[i] += counts[i];
    }
    perRank[rank] = read;
    reads.push(all);
  }
  /** @type {number[]} */
  let overlap = [];
  let nOverlap = 0,
    nMissing = 0,
    twice = 0;
  const missing = [];
  for (let i = 0; i < length; i++) {
    if (total[i] > 1) {
      nOverlap += 1;
      if (overlap.length < sample) overlap.push(i);
    }
    if (total[i] === 2) twice += 1;
    if (total[i] === 0) {
      nMissing += 1;
      if (missing.length < sample) missing.push(i);
    }
  }
  /** @type {number[]} */
  let padding = [];
  let nPadding = 0;
  if (nOverlap === twice && isPadding(reads, length, twice, nMissing)) {
    [padding, nPadding, overlap, nOverlap] = [overlap, nOverlap, [], 0];
  }
  return {
    ranks: entries.map(([r]) => r),
    per_rank: perRank,
    overlap: nOverlap,
    overlap_sample: overlap,
    padding: nPadding,
    padding_sample: padding,
    missing: nMissing,
    missing_sample: missing,
    disjoint: nOverlap === 0,
    complete: nMissing === 0,
  };
}

/**
 * @typedef {{ranks: number[], per_rank: Record<number, number>, overlap: number, overlap_sample: number[],
 *   padding: number, padding_sample: number[], missing: number, missing_sample: number[], disjoint: boolean,
 *   complete: boolean}} ShardReport
 */

/** One epoch's shard check in words (ranks.shard_text). @param {number} epoch @param {ShardReport} r */
export function shardText(epoch, r) {
  const indices = (/** @type {number} */ n) => say('n.indices_read', { n });
  const verdict = r.overlap
    ? say('shards.overlap', { indices: indices(r.overlap), sample: r.overlap_sample.join(', ') })
    : r.padding
      ? say('shards.padding', { indices: indices(r.padding) })
      : say('shards.disjoint');
  const coverage = r.complete
    ? say('shards.complete')
    : say('shards.missing', { indices: indices(r.missing), sample: r.missing_sample.join(', ') });
  return say('shards', { epoch, verdict, coverage });
}

// Ranks whose batches came within this of each other delivered together: no rank was last
// (ranks.TIE_S: simulated ranks tie exactly; wall_start + t rounds to about 0.2 µs).
export const TIE_S = 1e-6;

const RECENT_STEPS = 48; // steps kept for the "slowest rank of recent steps" strip

/**
 * The slowest rank per step, kept up to date as deliveries arrive: each update looks only at the
 * steps every rank has delivered since the last one (O(new steps × ranks)), not at the whole run,
 * so a job of 64 ranks and thousands of steps costs the page nothing between steps.
 */
export class JobSteps {
  constructor() {
    this.reset('');
  }

  /** @param {string} ranksKey the ranks these steps were computed over */
  reset(ranksKey) {
    this.ranksKey = ranksKey;
    /** @type {Map<number, number>} epoch -> steps already looked at */
    this.done = new Map();
    /** @type {number} steps every rank delivered */
    this.total = 0;
    /** @type {Map<number, {steps:number, worst:number, total:number}>} rank -> how often it was last */
    this.counts = new Map();
    /**
     * @type {{epoch:number, step:number, rank:number|null, lag:number}[]} the newest steps, oldest first (rank null:
     *   delivered together)
     */
    this.recent = [];
  }

  /**
   * Take in the steps all ranks have delivered since the last call. A rank that joins (found later
   * on the server) starts the count again over the new set of ranks. Each track's `slow` gets the
   * run times of the steps it delivered last (the timeline marks them).
   * @param {{rank:number, wall0:number, yields:Map<number, number[]>, slow:number[]}[]} tracks
   * @returns {boolean} whether any step was added
   */
  update(tracks) {
    const key = tracks.map((tr) => tr.rank).join(',');
    if (key !== this.ranksKey) {
      this.reset(key);
      for (const tr of tracks) tr.slow = [];
    }
    if (tracks.length < 2) return false;
    const epochs = new Set();
    for (const tr of tracks) for (const ep of tr.yields.keys()) epochs.add(ep);
    let added = false;
    for (const ep of [...epochs].sort((a, b) => a - b)) {
      const lists = tracks.map((tr) => tr.yields.get(ep) ?? []);
      let steps = Infinity;
      for (const l of lists) steps = Math.min(steps, l.length);
      for (let step = this.done.get(ep) ?? 0; step < steps; step++) {
        let last = 0,
          min = Infinity;
        for (let k = 0; k < lists.length; k++) {
          const t = lists[k][step];
          if (t > lists[last][step]) last = k;
          if (t < min) min = t;
        }
        const at = lists[last][step];
        const tie = at - min <= TIE_S;
        this.add({ epoch: ep, step, rank: tie ? null : tracks[last].rank, lag: at - min });
        if (!tie) tracks[last].slow.push(at - tracks[last].wall0);
        added = true;
      }
      this.done.set(ep, Math.max(this.done.get(ep) ?? 0, steps));
    }
    return added;
  }

  /** @param {{epoch:number, step:number, rank:number|null, lag:number}} s */
  add(s) {
    this.total += 1;
    this.recent.push(s);
    if (this.recent.length > RECENT_STEPS) this.recent.shift();
    if (s.rank === null) return;
    const c = this.counts.get(s.rank) ?? { steps: 0, worst: 0, total: 0 };
    c.steps += 1;
    c.worst = Math.max(c.worst, s.lag);
    c.total += s.lag;
    this.counts.set(s.rank, c);
  }
}

/**
 * A rank's batches per second: its batches over its wall time from its first event to its last
 * batch. The one definition of a rank's rate: state.py summary()'s batches_per_s, which
 * `loaderscope run --ranks` prints (sim/job.py rank_figures). A rate over the last seconds read 0.0
 * for a rank whose job had ended, and a few steps' noise in a short job.
 * @param {{batches:number, t:number, first_t:number|null, last_yield_t:number|null}} state
 */
export function rankRate(state) {
  const wall = rankWall(state);
  return wall > 0 ? state.batches / wall : 0;
}

/**
 * The wall time a rank's rate and waiting share are over (`or` as state.py's summary has it).
 * @param {{t:number, first_t:number|null, last_yield_t:number|null}} state
 */
export function rankWall(state) {
  return (state.last_yield_t || state.t) - (state.first_t || 0);
}

/**
 * A rank's slowest worker by mean fetch time, and how much slower it is than the median of its
 * rank's workers (1.0: no slower). Null until a worker has finished a fetch.
 * @param {Iterable<{id:number, busy:number, fetch_times:number[]}>} workers
 * @returns {{worker:number, mean:number, ratio:number}|null}
 */
export function slowestWorker(workers) {
  const means = [];
  for (const w of workers) if (w.fetch_times.length) means.push({ worker: w.id, mean: w.busy / w.fetch_times.length });
  if (!means.length) return null;
  means.sort((a, b) => a.mean - b.mean);
  const mid = means.length >> 1;
  const median = means.length % 2 ? means[mid].mean : (means[mid - 1].mean + means[mid].mean) / 2;
  const slowest = means[means.length - 1];
  return { ...slowest, ratio: median > 0 ? slowest.mean / median : 1 };
}

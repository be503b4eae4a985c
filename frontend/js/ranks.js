// Many ranks, one job (mirrors backend/loaderscope/ranks.py): which rank is slowest to deliver
// each step, and whether the ranks' sample shards overlap or miss indices. Each rank's probe
// reports at every epoch end how often it read each dataset index: base64(zlib(one byte per
// index)), decoded here with the browser's own DecompressionStream('deflate') (zlib framing).
// Pure apart from that decoder.

/** The bytes of a base64 string. */
export function fromBase64(text) {
  const bin = atob(text);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/** Per-index read counts of one rank's epoch (ranks.decode_shard). */
export async function decodeShard(digest, length) {
  const stream = new Blob([fromBase64(digest)]).stream().pipeThrough(new DecompressionStream('deflate'));
  const counts = new Uint8Array(await new Response(stream).arrayBuffer());
  if (counts.length !== length) throw new Error(`shard digest holds ${counts.length} counts for a dataset of ${length}`);
  return counts;
}

/**
 * Overlap and coverage of one epoch's shards across ranks (ranks.shard_report).
 * @param {Map<number, any>|Record<number, any>} epochEnds rank -> epoch_end event (with shard)
 * @param {number} length dataset length
 */
export async function shardReport(epochEnds, length, sample = 10) {
  const entries = (epochEnds instanceof Map ? [...epochEnds] : Object.entries(epochEnds).map(([r, e]) => [Number(r), e]))
    .sort((a, b) => a[0] - b[0]);
  const total = new Uint16Array(length);
  /** @type {Record<number, number>} */
  const perRank = {};
  for (const [rank, event] of entries) {
    const counts = await decodeShard(event.shard, length);
    let read = 0;
    for (let i = 0; i < length; i++) {
      if (counts[i]) read += 1;
      total[i] += counts[i];
    }
    perRank[rank] = read;
  }
  const overlap = [], missing = [];
  let nOverlap = 0, nMissing = 0;
  for (let i = 0; i < length; i++) {
    if (total[i] > 1) { nOverlap += 1; if (overlap.length < sample) overlap.push(i); }
    if (total[i] === 0) { nMissing += 1; if (missing.length < sample) missing.push(i); }
  }
  return {
    ranks: entries.map(([r]) => r),
    per_rank: perRank,
    overlap: nOverlap,
    overlap_sample: overlap,
    missing: nMissing,
    missing_sample: missing,
    disjoint: nOverlap === 0,
    complete: nMissing === 0,
  };
}

/**
 * When each rank handed out its batches in `epoch`, on the wall clock (run_start's wall_start + t).
 * @param {Iterable<any>} events one rank's events
 */
export function deliveries(events, epoch = 0) {
  let wall0 = 0, current = -1;
  const times = [];
  for (const e of events) {
    if (e.kind === 'run_start') wall0 = e.wall_start ?? 0;
    else if (e.kind === 'epoch_start') current = e.epoch;
    else if (e.kind === 'yield' && current === epoch) times.push(wall0 + e.t);
  }
  return times;
}

/**
 * For each step, the rank whose batch came last and how late (ranks.slowest_per_step); ranks step
 * together (gradients are all-reduced), so the slowest rank's loader sets the pace.
 * @param {Map<number, number[]>} times rank -> delivery times of one epoch
 * @returns {{step:number, rank:number, lag:number}[]}
 */
export function slowestPerStep(times) {
  const ranks = [...times.keys()];
  const steps = ranks.length ? Math.min(...ranks.map((r) => times.get(r).length)) : 0;
  const out = [];
  for (let step = 0; step < steps; step++) {
    let slowest = ranks[0], min = Infinity;
    for (const r of ranks) {
      const t = times.get(r)[step];
      if (t > times.get(slowest)[step]) slowest = r;
      if (t < min) min = t;
    }
    out.push({ step, rank: slowest, lag: times.get(slowest)[step] - min });
  }
  return out;
}

/** How many steps each rank was the slowest in, and its worst lag. */
export function slowestCounts(steps) {
  /** @type {Map<number, {steps:number, worst:number, total:number}>} */
  const out = new Map();
  for (const s of steps) {
    const c = out.get(s.rank) ?? { steps: 0, worst: 0, total: 0 };
    c.steps += 1;
    c.worst = Math.max(c.worst, s.lag);
    c.total += s.lag;
    out.set(s.rank, c);
  }
  return out;
}

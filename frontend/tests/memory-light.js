// A recorded run's memory samples with light ones (probe/memory.py: RSS and swap only, `light: true`)
// after each, as the probe takes them between full ones: for the tests that check what the models keep
// of each kind.

/**
 * After each memory sample, a light one 0.05 s later whose processes hold 1 MiB more resident than that
 * sample says (so the high-water marks of RSS, and the latest RSS, are light samples').
 * @param {any[]} events @returns {any[]}
 */
export function withLightSamples(events) {
  const out = [];
  for (const e of events) {
    out.push(e);
    if (e.kind !== 'memory') continue;
    const procs = e.procs.map((/** @type {any} */ p) =>
      p.worker === undefined
        ? { pid: p.pid, rss: p.rss + 2 ** 20, swap: p.swap }
        : { worker: p.worker, pid: p.pid, rss: p.rss + 2 ** 20, swap: p.swap },
    );
    out.push({ ...e, t: e.t + 0.05, procs, light: true, cost: 0.0001 });
  }
  return out.map((e, i) => ({ ...e, seq: i }));
}

// The run picker's list, from GET /api/runs's briefs (or WS /ws/runs's pushes): each loader by the
// name its run_start gave it, its rank, epochs, batches and start time, in the order the runs
// started; a job's loaders grouped together, by name and then rank. Pure: no DOM.

/** @typedef {import('./types.js').RunBrief} RunBrief */

/** @typedef {{label:string|null, options:{id:string, text:string}[]}} PickerGroup  label null: a run on its own */

/** When a run started (seconds since 1970): its loader's first event, else when the dashboard listed it. */
export function startOf(/** @type {RunBrief} */ r) {
  return r.started ?? r.created ?? 0;
}

/** What the user calls the loader: run_start's name, else the scenario, else the trace file's name. */
export function runName(/** @type {RunBrief} */ r) {
  if (r.name) return r.name;
  if (r.scenario) return r.scenario;
  if (r.path) return r.path.slice(r.path.lastIndexOf('/') + 1).replace(/\.trace\.(jsonl|parquet)$/, '');
  return 'run';
}

const pad = (/** @type {number} */ n) => String(n).padStart(2, '0');

/**
 * Local wall-clock time of `seconds`; the date too when it is not the day of `now`.
 * @param {number} seconds
 * @param {number} [now]
 */
export function clockText(seconds, now = Date.now() / 1000) {
  const d = new Date(seconds * 1000);
  const time = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  if (new Date(now * 1000).toDateString() === d.toDateString()) return time;
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${time}`;
}

// One formatter for every count: `toLocaleString('en')` builds one per call, which took 63 ms of a
// 1,024-rank job's page boot (two counts per run in the picker).
const COUNT = new Intl.NumberFormat('en');

/** `n` with its thousands separated, and its noun. @param {number} n @param {string} one @param {string} [many] */
export const plural = (n, one, many = `${one}s`) => `${COUNT.format(n)} ${n === 1 ? one : many}`;

/** One run's line in the picker: name, rank, epochs, batches, start time, status, and whether it was moved to disk. */
export function runText(/** @type {RunBrief} */ r, now = Date.now() / 1000, { rank = false } = {}) {
  const parts = [runName(r)];
  if (r.mode === 'sim') parts.push('sim');
  if (rank || (r.world_size ?? 1) > 1) parts.push(`rank ${r.rank ?? 0}`);
  if (typeof r.epochs === 'number') parts.push(plural(r.epochs, 'epoch'));
  if (typeof r.batches === 'number') parts.push(plural(r.batches, 'batch', 'batches'));
  const start = startOf(r);
  if (start) parts.push(clockText(start, now));
  if (r.status) parts.push(r.status);
  if (r.on_disk) parts.push('on disk'); // parked (DESIGN §9): read from its trace, resumed when its producer returns
  return parts.join(' · ');
}

/**
 * How many loaders a job's runs are: a run is one loader of one rank, so a rank with two runs has two
 * loaders, whatever their names (an ignite job's train and val loaders may share one), and the job has
 * at least as many as the names it lists.
 * @param {RunBrief[]} job @param {number} names
 */
export function loaderCount(job, names) {
  /** @type {Map<number, number>} */
  const perRank = new Map();
  for (const r of job) perRank.set(r.rank ?? 0, (perRank.get(r.rank ?? 0) ?? 0) + 1);
  return Math.max(names, ...perRank.values());
}

/**
 * The picker's groups in the order they started: a run on its own, or every run of a job that
 * lists more than one (its loaders by name in the order they first started, then by rank).
 * @param {RunBrief[]} runs @returns {PickerGroup[]}
 */
export function pickerGroups(runs, now = Date.now() / 1000) {
  const sorted = [...runs].sort((a, b) => startOf(a) - startOf(b) || a.id.localeCompare(b.id));
  /** @type {Map<string, RunBrief[]>} */
  const jobs = new Map();
  for (const r of sorted) if (r.job != null) jobs.set(r.job, [...(jobs.get(r.job) ?? []), r]);
  /** @type {PickerGroup[]} */
  const groups = [];
  const placed = new Set();
  for (const r of sorted) {
    const job = r.job != null ? jobs.get(r.job) : undefined;
    if (!job || job.length < 2) {
      groups.push({ label: null, options: [{ id: r.id, text: runText(r, now) }] });
      continue;
    }
    if (placed.has(r.job)) continue;
    placed.add(r.job);
    const names = [...new Set(job.map(runName))]; // in the order they first started
    const ordered = [...job].sort(
      (a, b) =>
        names.indexOf(runName(a)) - names.indexOf(runName(b)) ||
        (a.rank ?? 0) - (b.rank ?? 0) ||
        startOf(a) - startOf(b),
    );
    const ranks = new Set(job.map((x) => x.rank ?? 0)).size;
    const what = `${plural(loaderCount(job, names.length), 'loader')}${ranks > 1 ? ` × ${ranks} ranks` : ''}`;
    groups.push({
      label: `job ${r.job} · ${what} · ${clockText(startOf(job[0]), now)}`,
      options: ordered.map((x) => ({ id: x.id, text: runText(x, now, { rank: ranks > 1 }) })),
    });
  }
  return groups;
}

/**
 * The run to compare `id` with: the latest run of the same loader (same name, same rank) that
 * started before it; else the latest other run that started before it; else the newest other run.
 * Null when `id` is the only run.
 * @param {RunBrief[]} runs @param {string} id @returns {string|null}
 */
export function previousRun(runs, id) {
  const me = runs.find((r) => r.id === id);
  const others = [...runs]
    .filter((r) => r.id !== id)
    .sort((a, b) => startOf(b) - startOf(a) || b.id.localeCompare(a.id));
  if (!me) return others[0]?.id ?? null;
  const before = others.filter((r) => startOf(r) < startOf(me) || (startOf(r) === startOf(me) && r.id < me.id));
  const same = before.find((r) => runName(r) === runName(me) && (r.rank ?? 0) === (me.rank ?? 0));
  return (same ?? before[0] ?? others[0])?.id ?? null;
}

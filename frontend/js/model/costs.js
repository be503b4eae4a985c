// The simulator's cost model in the run form (mode "sim"): the fields of loaderscope.sim.CostModel
// a person would try first, as a JSON-schema `properties` object the form renders, and the mapping
// from the flat form values to the nested `costs` object POST /api/runs accepts. Only values that
// differ from the defaults are sent; the server validates everything (422 per field). Pure.

/** Form fields (flat). Nested CostModel fields are flattened: sample_*, slow_*, stall_*, die_*. */
/** @type {Readonly<Record<string, import('./types.js').FieldSchema>>} */
export const COST_FIELDS = Object.freeze({
  sample_dist: {
    enum: ['plan', 'constant', 'normal', 'lognormal', 'exponential'],
    default: 'plan',
    description: "per-sample fetch time: the scenario's own (plan), or drawn from a distribution",
  },
  sample_mean_ms: {
    type: 'number',
    minimum: 0,
    default: 5,
    description: 'mean fetch time of one sample, ms (with a distribution)',
  },
  sample_sd_ms: {
    type: 'number',
    minimum: 0,
    default: 0,
    description: 'its standard deviation, ms (normal, lognormal)',
  },
  collate_ms: { type: 'number', minimum: 0, default: 0, description: 'collate cost per batch, ms' },
  step_ms: {
    anyOf: [{ type: 'number', minimum: 0 }, { type: 'null' }],
    default: null,
    description: "training step per batch, ms (empty: the scenario's)",
  },
  pin_ms_per_mb: {
    type: 'number',
    minimum: 0,
    default: 0,
    description: 'pin-memory copy cost, ms per MB (needs pin_memory; 0: no pin stage)',
  },
  sample_bytes: {
    type: 'integer',
    minimum: 0,
    default: 32,
    description: 'bytes per collated sample (what pinning copies)',
  },
  slow_worker: {
    anyOf: [{ type: 'integer', minimum: 0 }, { type: 'null' }],
    default: null,
    description: 'a worker that is slower (empty: none)',
  },
  slow_factor: { type: 'number', minimum: 0, default: 3, description: 'how many times slower' },
  stall_task: {
    anyOf: [{ type: 'integer', minimum: 0 }, { type: 'null' }],
    default: null,
    description: 'a task (batch number) whose fetch hangs (empty: none)',
  },
  stall_seconds: { type: 'number', exclusiveMinimum: 0, default: 12, description: 'for how many seconds' },
  die_task: {
    anyOf: [{ type: 'integer', minimum: 0 }, { type: 'null' }],
    default: null,
    description: 'the worker fetching this task is killed (empty: none)',
  },
  startup_ms: { type: 'number', minimum: 0, default: 0, description: "a worker's boot time before its first task, ms" },
  transfer_ms: {
    type: 'number',
    minimum: 0,
    default: 0,
    description: 'result queue latency per batch (pickle, pipe), ms',
  },
  stuck_after_s: {
    type: 'number',
    exclusiveMinimum: 0,
    default: 10,
    description: 'a fetch this long (or 20× the median) is reported stuck, s',
  },
});

const SCALARS = [
  'collate_ms',
  'step_ms',
  'pin_ms_per_mb',
  'sample_bytes',
  'startup_ms',
  'transfer_ms',
  'stuck_after_s',
];

/**
 * The `costs` object for POST /api/runs from the form's values; null when nothing differs from
 * the defaults (the server then charges exactly what the scenario's real dataset sleeps).
 * @param {Record<string, any>} v
 * @returns {Record<string, unknown>|null}
 */
export function costsFromForm(v) {
  /** @type {Record<string, unknown>} */
  const out = {};
  for (const k of SCALARS) {
    if (v[k] !== undefined && v[k] !== null && v[k] !== COST_FIELDS[k].default) out[k] = v[k];
  }
  if (v.sample_dist && v.sample_dist !== 'plan')
    out.sample = { dist: v.sample_dist, mean_ms: v.sample_mean_ms ?? 0, sd_ms: v.sample_sd_ms ?? 0 };
  if (v.slow_worker !== undefined && v.slow_worker !== null)
    out.worker_factor = { [v.slow_worker]: v.slow_factor ?? 1 };
  if (v.stall_task !== undefined && v.stall_task !== null)
    out.stalls = [{ task: v.stall_task, seconds: v.stall_seconds }];
  if (v.die_task !== undefined && v.die_task !== null) out.die = { task: v.die_task };
  return Object.keys(out).length ? out : null;
}

/** The form field a 422 problem about `costs.…` belongs to (the flat name), or null. @param {string} serverField */
export function costField(serverField) {
  const path = String(serverField).replace(/^(body\.)?costs\./, '');
  if (path === String(serverField)) return null;
  const [head, , leaf] = path.split('.');
  if (head === 'sample') return `sample_${path.split('.')[1] ?? 'dist'}`;
  if (head === 'worker_factor') return 'slow_factor';
  if (head === 'stalls') return leaf === 'task' ? 'stall_task' : 'stall_seconds';
  if (head === 'die') return 'die_task';
  return head in COST_FIELDS ? head : null;
}

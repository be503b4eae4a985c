// Event schema v1 (mirrors backend/loaderscope/events.py): validate incoming JSON before use.
// Pure: no DOM, no I/O. Unknown kinds pass validation (they are shown, never dropped).

/** Fields each kind must carry beyond the common ones (events.py REQUIRED). */
/** @type {Readonly<Record<string, string[]>>} */
export const REQUIRED = Object.freeze({
  run_start: ['mode', 'config'],
  run_end: ['reason'],
  epoch_start: ['epoch'],
  epoch_end: ['epoch'],
  epoch_resume: ['epoch', 'batch'],
  worker_start: ['worker', 'pid'],
  worker_exit: ['worker'],
  dispatch: ['idx', 'worker'],
  fetch_start: ['idx', 'worker'],
  fetch_end: ['idx', 'worker'],
  arrive: ['idx', 'worker'],
  pin_start: ['idx'],
  pin_end: ['idx'],
  buffer: ['idx', 'worker', 'waiting_for'],
  yield: ['idx', 'wait'],
  skip: ['idx', 'worker'],
  worker_stuck: ['worker', 'idx', 'elapsed'],
  consumer_stuck: ['elapsed'],
  worker_died: ['worker'],
  error: ['type', 'message'],
  timeout: ['seconds'],
  batch_info: ['idx', 'worker', 'structure'],
  step: ['batch'],
  probe_error: ['where', 'type', 'message'],
  doctor_verdict: ['text'],
});

export const KNOWN_KINDS = Object.freeze(Object.keys(REQUIRED));

/** A run's status as the API and the reducer give it (events.py RunStatus). */
export const RunStatus = Object.freeze({
  PENDING: 'pending', // no run_start yet (a logdir run: its file not read to its end yet)
  STARTING: 'starting', // the server started a run process that has not connected yet
  RUNNING: 'running',
  PAUSED: 'paused', // the dashboard paused the training loop
  DISCONNECTED: 'disconnected', // a watch() producer went away and may reconnect
  DONE: 'done',
  STOPPED: 'stopped',
  ERROR: 'error',
});

/** The statuses of a run that has ended: run_end's reasons (events.py ENDED). */
/** @type {ReadonlySet<string|undefined>} */
export const ENDED = new Set([RunStatus.DONE, RunStatus.STOPPED, RunStatus.ERROR]);

/** JSON's exact integers (events.py MAX_NUMBER): no number an event carries lies beyond. */
export const MAX_NUMBER = 2 ** 53;

const INT_FIELDS = ['seq', 'rank', 'idx', 'worker', 'epoch', 'waiting_for'];
const NUMBER_FIELDS = ['t', 'wait', 'dt', 'elapsed', 'seconds'];

/**
 * Check one decoded event. Returns null when it is usable, else a message naming the field.
 * @param {unknown} e
 * @returns {string|null}
 */
export function invalidReason(e) {
  if (e === null || typeof e !== 'object' || Array.isArray(e)) return `an event must be a JSON object, got ${Array.isArray(e) ? 'array' : typeof e}`;
  const ev = /** @type {Record<string, unknown>} */ (e);
  const kind = ev.kind;
  if (typeof kind !== 'string' || !kind) return "an event needs a non-empty string 'kind'";
  if (!Number.isInteger(ev.seq)) return `${kind} event: 'seq' must be an integer, got ${JSON.stringify(ev.seq)}`;
  if (!('t' in ev)) return `${kind} event is missing 't'`;
  for (const name of REQUIRED[kind] || []) {
    if (!(name in ev)) return `${kind} event is missing its '${name}' field`;
  }
  for (const [name, v] of Object.entries(ev)) { // events.py: every top-level number within ±2**53
    if (typeof v === 'number' && !(Math.abs(v) <= MAX_NUMBER)) return `${kind} event: '${name}' must be a finite number within +-2**53, got ${JSON.stringify(v)}`;
  }
  for (const name of INT_FIELDS) {
    const v = ev[name];
    if (v !== undefined && v !== null && !Number.isInteger(v)) return `${kind} event: '${name}' must be an integer, got ${JSON.stringify(v)}`;
  }
  for (const name of NUMBER_FIELDS) {
    const v = ev[name];
    if (v !== undefined && v !== null && (typeof v !== 'number' || !Number.isFinite(v))) return `${kind} event: '${name}' must be a number, got ${JSON.stringify(v)}`;
  }
  if (kind === 'run_start' && (ev.config === null || typeof ev.config !== 'object')) return "run_start event: 'config' must be an object";
  if (ev.indices !== undefined && ev.indices !== null && !Array.isArray(ev.indices)) return `${kind} event: 'indices' must be a list`;
  return null;
}

/**
 * Classify one websocket message (already JSON-parsed).
 * @param {unknown} msg
 * @returns {{type:'frame', events:unknown[]} | {type:'meta', meta:Record<string, unknown>} | {type:'bad', reason:string}}
 */
export function classifyMessage(msg) {
  if (Array.isArray(msg)) return { type: 'frame', events: msg };
  if (msg !== null && typeof msg === 'object') {
    const m = /** @type {Record<string, unknown>} */ (msg);
    if (typeof m.type === 'string') return { type: 'meta', meta: m };
    if (typeof m.kind === 'string') return { type: 'frame', events: [m] }; // a lone event
  }
  return { type: 'bad', reason: 'message is neither an array of events nor a meta object' };
}

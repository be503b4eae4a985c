// Event schema v1: the tables of backend/loaderscope/contract/ (contract.gen.js), and the check of
// incoming JSON against them before use. Pure: no DOM, no I/O. Unknown kinds pass validation (they
// are shown, never dropped).

import {
  COMMON_FIELDS,
  ENDED as ENDED_STATUSES,
  KINDS,
  LIMITS,
  NAMED,
  RENAMED_FIELDS,
  RENAMED_KINDS,
  REQUIRED as REQUIRED_FIELDS,
  RUN_STATUS,
} from './contract.gen.js';

/** Fields each kind must carry beyond the common ones. */
export const REQUIRED = REQUIRED_FIELDS;

export const KNOWN_KINDS = Object.freeze(Object.keys(REQUIRED));

/** A run's status as the API and the reducer give it (contract RunStatus). */
export const RunStatus = RUN_STATUS;

/** The statuses of a run that has ended: run_end's reasons. */
/** @type {ReadonlySet<string|undefined>} */
export const ENDED = new Set(ENDED_STATUSES);

/** JSON's exact integers: no number an event carries lies beyond. */
export const MAX_NUMBER = LIMITS.MAX_NUMBER;

/** @typedef {{type: string, nullable: boolean, min?: number, max?: number, required?: boolean}} FieldRule */

/** @type {Record<string, (v: unknown) => boolean>} whether a value is of a contract type */
const FITS = {
  int: (v) => Number.isInteger(v),
  number: (v) => typeof v === 'number' && Number.isFinite(v),
  string: (v) => typeof v === 'string',
  bool: (v) => typeof v === 'boolean',
  object: (v) => v !== null && typeof v === 'object' && !Array.isArray(v),
  array: (v) => Array.isArray(v),
  any: () => true,
};
/** @type {Record<string, string>} */
const NOUN = {
  int: 'an integer',
  number: 'a number',
  string: 'a string',
  bool: 'true or false',
  object: 'an object',
  array: 'a list',
};
const COMMON = new Set(COMMON_FIELDS);

/**
 * The rule for field `name` of a `kind` event: the kind's own, else the one by name (null where the
 * contract says nothing), and whether null is allowed.
 * @param {string} kind
 * @param {string} name
 * @returns {{rule: FieldRule|null, nullable: boolean}}
 */
function ruleOf(kind, name) {
  /** @type {Record<string, FieldRule>|undefined} */
  const own = /** @type {any} */ (KINDS)[kind];
  if (own && name in own) return { rule: own[name], nullable: own[name].nullable };
  /** @type {FieldRule|undefined} */
  const named = /** @type {any} */ (NAMED)[name];
  return { rule: named ?? null, nullable: !COMMON.has(name) };
}

/** @type {Map<string, string>} each kind's name today, by the name it had before */
const KIND_RENAMES = new Map(Object.entries(RENAMED_KINDS));
/** @type {Map<string, Map<string, string>>} each kind's fields' names today, by the names they had before */
const FIELD_RENAMES = new Map(
  Object.entries(RENAMED_FIELDS).map(([kind, names]) => [kind, new Map(Object.entries(names))]),
);
/** @type {Map<string, string>} a Parquet trace's columns: one per field name, whatever its kind */
const COLUMN_RENAMES = new Map([...FIELD_RENAMES.values()].flatMap((names) => [...names]));

/** A kind's name as this schema says it, for one it had before (RENAMED_KINDS). @param {string} kind */
export const renamedKind = (kind) => KIND_RENAMES.get(kind) ?? kind;

/** A Parquet trace's column, named as its field is now (RENAMED_FIELDS). @param {string} name */
export const renamedColumn = (name) => COLUMN_RENAMES.get(name) ?? name;

/**
 * `e`, changed in place to this schema's names where it carries a kind or a field by an old name:
 * the contract's RENAMED_KINDS and RENAMED_FIELDS, what traces and probes from before a rename say
 * (events.py's validate renames them the same way). Anything else is left as it is.
 * @template T @param {T} e @returns {T}
 */
export function renamed(e) {
  if (e === null || typeof e !== 'object') return e;
  const ev = /** @type {Record<string, unknown>} */ (e);
  if (typeof ev.kind !== 'string') return e;
  ev.kind = renamedKind(ev.kind);
  for (const [old, now] of FIELD_RENAMES.get(/** @type {string} */ (ev.kind)) ?? []) {
    if (!(old in ev)) continue;
    if (!(now in ev)) ev[now] = ev[old];
    delete ev[old];
  }
  return e;
}

/**
 * Check one decoded event. Returns null when it is usable, else a message naming the field.
 * @param {unknown} e
 * @returns {string|null}
 */
export function invalidReason(e) {
  if (e === null || typeof e !== 'object' || Array.isArray(e))
    return `an event must be a JSON object, got ${Array.isArray(e) ? 'array' : typeof e}`;
  const ev = /** @type {Record<string, unknown>} */ (e);
  const kind = ev.kind;
  if (typeof kind !== 'string' || !kind) return "an event needs a non-empty string 'kind'";
  if (!Number.isInteger(ev.seq)) return `${kind} event: 'seq' must be an integer, got ${JSON.stringify(ev.seq)}`;
  if (!('t' in ev)) return `${kind} event is missing 't'`;
  for (const name of /** @type {any} */ (REQUIRED)[kind] || []) {
    if (!(name in ev)) return `${kind} event is missing its '${name}' field`;
  }
  for (const [name, v] of Object.entries(ev)) {
    if (typeof v === 'number' && !(Math.abs(v) <= MAX_NUMBER))
      return `${kind} event: '${name}' must be a finite number within +-2**53, got ${JSON.stringify(v)}`;
    const { rule, nullable } = ruleOf(kind, name);
    if (rule === null || v === undefined) continue;
    if (v === null) {
      if (!nullable) return `${kind} event: '${name}' must not be null`;
      continue;
    }
    if (!FITS[rule.type](v)) return `${kind} event: '${name}' must be ${NOUN[rule.type]}, got ${JSON.stringify(v)}`;
    const n = /** @type {number} */ (v);
    if (rule.min !== undefined && rule.max !== undefined && !(n >= rule.min && n <= rule.max))
      return `${kind} event: '${name}' must be from ${rule.min} to ${rule.max}, got ${n}`;
  }
  return null;
}

/**
 * Classify one websocket message (already JSON-parsed).
 * @param {unknown} msg
 * @returns {{type:'frame', events:unknown[]} | {type:'meta', meta:Record<string, unknown>} | {type:'bad',
 *   reason:string}}
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

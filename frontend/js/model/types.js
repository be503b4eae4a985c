// Shared JSDoc types of the page, for `tsc --checkJs` (tsconfig.json). The events' fields and the
// shapes they nest are generated from the contract (types.gen.js, by `python -m loaderscope.contract
// --write`); this module builds the unions the page reads events through on them, and types run
// briefs and summaries. Types only: the module exports nothing at run time; other modules name its
// types as `import('./types.js').X`. It imports no module at run time: the trace worker's code uses
// it too (tsconfig.worker.json, no DOM).

/** @typedef {import('./types.gen.js').Frame} Frame */
/** @typedef {import('./types.gen.js').LoaderConfig} LoaderConfig */
/** @typedef {import('./types.gen.js').TimeoutWorker} TimeoutWorker */
/** @typedef {import('./types.gen.js').BatchStructure} BatchStructure */
/** @typedef {import('./types.gen.js').KindFields} KindFields */
/** @typedef {import('./types.gen.js').NoteFields} NoteFields */

/**
 * The common fields as the page holds events: the store numbered each one (`seq`) and wrote its run's
 * id (`run`: a string, never the null a producer may send).
 * @typedef {Omit<import('./types.gen.js').CommonFields, 'seq'|'run'> & {seq: number, run?: string}} Common
 */

/** @typedef {keyof KindFields} Kind */

/**
 * An event of one known kind, its required fields present.
 * @template {Kind} K
 * @typedef {Common & {kind: K} & KindFields[K]} EventOf
 */

/**
 * An event of a known kind, as a union a `switch (e.kind)` narrows. Events reach the page through
 * schema.js invalidReason (stream.js, trace-file.js), which checks each known kind's required
 * fields, so an event whose `kind` is known may be read as this (after checking that it is known).
 * @typedef {{[K in Kind]: EventOf<K>}[Kind]} KnownEvent
 */

/**
 * Any event as the page holds it: a known kind or one it does not know (shown, never dropped), so
 * every field beyond `kind`, `seq` and `t` may be missing; check `kind` (or the field) before use.
 * Each field has the union of the types the kinds that carry it give it.
 * @typedef {Common & {kind: string} & {[F in FieldName]?: FieldType<KindFields[Kind], F>}} LoaderEvent
 */

/** @typedef {KindFields[Kind] extends infer U ? (U extends unknown ? keyof U : never) : never} FieldName */

/**
 * The type of field F in whichever members of the union U carry it.
 * @template U
 * @template {PropertyKey} F
 * @typedef {U extends unknown ? (F extends keyof U ? U[F] : never) : never} FieldType
 */

/**
 * A kept note of kind K: the event and what the reducers add to it (NoteFields).
 * @template {Kind} K
 * @typedef {EventOf<K> & (K extends keyof NoteFields ? NoteFields[K] : {})} NoteOf
 */

/**
 * Sample indices as events carry them: JSON scalars (a map-style dataset's keys need not be numbers).
 * @typedef {NonNullable<KindFields['dispatch']['indices']>} Indices
 */

/**
 * @typedef {NoteFields[keyof NoteFields] extends infer U ? (U extends unknown ? keyof U : never) : never} NoteFieldName
 */

/**
 * A note the page lists (track.js noteItems): an event worth a line (stuck, died, error, …) with
 * what the reducers add to it (NoteFields: `recovered`, a task's `indices`), a protocol violation
 * (`type: 'violation'`, `text`), or what the stream says (`type`: `gap` with `from`/`to`, `invalid`
 * with the `event`, `bad`; a `reason`). `_row`: the events loaded before it.
 * @typedef {Partial<LoaderEvent> & {[F in NoteFieldName]?: FieldType<NoteFields[keyof NoteFields], F>}
 *   & {from?: number, to?: number, event?: unknown, unknown?: boolean, _row?: number}} Note
 */

/**
 * A run as GET /api/runs lists it (docs/DESIGN.md §6, the brief).
 * @typedef {{id: string, scenario?: string|null, mode?: string, origin?: string, status?: string, paused?: boolean,
 *   delay?: number|null, created?: number, events?: number|null, last_seq?: number, first_held?: number,
 *   batches?: number|null, dropped?: number, silent?: boolean, last_event_age?: number|null, name?: string|null,
 *   job?: string|null, rank?: number, world_size?: number, epochs?: number|null, started?: number|null,
 *   path?: string|null, problem?: string|null, on_disk?: boolean}} RunBrief
 */

/**
 * A run as GET /api/runs/{id} gives it: its brief and what the server computed of it.
 * @typedef {RunBrief & {params?: Record<string, unknown>, config?: Record<string, unknown>,
 *   statistics?: Record<string, unknown>|null, diagnosis?: string[]|null, error?: string|null,
 *   exitcode?: number|null, pid?: number|null, trace?: boolean, trace_error?: string|null, log_tail?:
 *   string|null}} RunDetail
 */

/**
 * A page of GET /api/runs/{id}/events.
 * @typedef {{run?: string, after?: number, last_seq?: number, status?: string, next_after?: number, more?: boolean,
 *   gap: {type: 'gap', from: number, to: number, reason?: string}|null, events: unknown[]}} EventsPage
 */

/**
 * A scenario as GET /api/scenarios lists it (scenarios/catalog.py describe): its parameters as a
 * JSON schema's `properties`.
 * @typedef {{name: string, title?: string, description?: string, fails?: boolean,
 *   params: Record<string, FieldSchema>}} Scenario
 */

/**
 * One property of a JSON schema, as pydantic writes the ones the forms show (form.js).
 * @typedef {{type?: string, enum?: unknown[], default?: unknown, minimum?: number, maximum?: number,
 *   exclusiveMinimum?: number, exclusiveMaximum?: number, description?: string, title?: string,
 *   anyOf?: FieldSchema[], oneOf?: FieldSchema[]}} FieldSchema
 */

export {};

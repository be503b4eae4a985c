// Shared JSDoc types of the page, for `tsc --checkJs` (tsconfig.json): the event shapes of
// docs/DESIGN.md §3 (backend/loaderscope/events.py), run briefs and summaries. Types only: the module
// exports nothing at run time; other modules name its types as `import('./types.js').X`. It imports
// no module: the trace worker's code uses it too (tsconfig.worker.json, no DOM).

/**
 * One frame of a Python stack, as probe/stacks.py sends it (`user`: the frame is in the user's code).
 * @typedef {{file: string, line: number, function: string, code?: string|null, user?: boolean}} Frame
 */

/**
 * `run_start.config` (DESIGN §3): the DataLoader's arguments as torch resolved them, what the probe
 * read off the loader, and the simulator's extras; null where unknown. Other keys (a scenario's
 * `describe` fields) are shown as they come.
 * @typedef {{num_workers?: number, batch_size?: number|null, prefetch_factor?: number|null,
 *   persistent_workers?: boolean, in_order?: boolean, drop_last?: boolean, timeout?: number,
 *   pin_memory?: boolean, pin_memory_active?: boolean, multiprocessing_context?: string|null,
 *   sampler?: string|null, batch_sampler?: string|null, collate_fn?: string|null, dataset?: string|null,
 *   dataset_kind?: string|null, dataset_length?: number|null, batches_per_epoch?: number|null,
 *   epochs?: number, costs?: Record<string, unknown>, [key: string]: unknown}} LoaderConfig
 */

/**
 * Fields every event may carry (DESIGN §3, Common fields); `seq` and `t` as the store and reader give them.
 * @typedef {{seq: number, t: number, run?: string, rank?: number, epoch?: number, worker?: number}} Common
 */

/**
 * A timed-out worker: what it was doing when `DataLoader(timeout=…)` expired.
 * @typedef {{worker: number, idx?: number|null, pos?: number|null, sample?: unknown, elapsed?: number|null}} TimeoutWorker
 */

/**
 * The fields of each known kind beyond the common ones: the required ones (events.py REQUIRED) as
 * required, the rest optional. `null` where a producer sends null for "not known".
 * @typedef {{
 *   run_start: {mode: string, config: LoaderConfig, scenario?: string, params?: Record<string, unknown>,
 *     name?: string|null, job?: string|null, world_size?: number, wall_start?: number|null, snapshot?: boolean,
 *     torch?: string|null, python?: string|null, host?: string|null, pid?: number|null},
 *   run_end: {reason: string, stats?: Record<string, unknown>|null, error?: {type: string, message: string}|null,
 *     exitcode?: number|null, truncated?: boolean, source?: string, message?: string},
 *   epoch_start: {epoch: number, batches?: number|null},
 *   epoch_resume: {epoch: number, batch: number, replayed?: number},
 *   epoch_end: {epoch: number, batches?: number, abandoned?: boolean, shard?: string, shard_length?: number},
 *   worker_start: {worker: number, pid: number|null},
 *   worker_exit: {worker: number, pid?: number|null, exitcode?: number|null},
 *   dispatch: {idx: number, worker: number, indices?: number[]|null, n?: number},
 *   fetch_start: {idx: number, worker: number, n?: number},
 *   fetch_end: {idx: number, worker: number, dt?: number|null, nbytes?: number|null, pickled?: number|null, stop?: boolean},
 *   arrive: {idx: number, worker: number},
 *   pin_start: {idx: number},
 *   pin_end: {idx: number, dt?: number|null, nbytes?: number|null, pinned?: boolean|null},
 *   buffer: {idx: number, worker: number, waiting_for: number},
 *   yield: {idx: number, wait: number, from_buffer?: boolean},
 *   skip: {idx: number, worker: number},
 *   worker_stuck: {worker: number, idx: number, elapsed: number, pid?: number|null, threshold?: number,
 *     pos?: number|null, sample?: unknown, stack?: Frame[]|null, recovered?: number},
 *   consumer_stuck: {elapsed: number, threshold?: number, stack?: Frame[]|null, waiting_for?: number,
 *     held_by?: number|null, has_data?: boolean, recovered?: number},
 *   worker_died: {worker: number, pid?: number|null, exitcode?: number|null, signal?: string|null,
 *     idx?: number|null, pos?: number|null, sample?: unknown, elapsed?: number|null, holding?: unknown,
 *     indices?: number[]|null},
 *   error: {type: string, message: string, traceback?: string|null, where?: string|null, idx?: number|null,
 *     indices?: number[]|null},
 *   timeout: {seconds: number, workers?: TimeoutWorker[]},
 *   batch_info: {idx: number, worker: number, structure: BatchStructure, pickle_bytes?: number|null,
 *     pickle_s?: number|null, values?: boolean},
 *   step: {batch: number, h2d?: number|null, compute?: number|null, h2d_pageable?: number|null,
 *     device?: string|null, bytes?: number|null, pinned?: boolean|null},
 *   probe_error: {where: string, type: string, message: string},
 *   loop: {others: number},
 *   doctor_verdict: {text: string, cause?: string|null, advice?: string|null, idx?: number|null,
 *     sample?: unknown, indices?: number[]|null, where?: Frame|null, details?: string[], pid?: number|null,
 *     samples?: number, duration?: number, training?: string|null, job?: string|null},
 * }} KindFields
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
 * A note the page lists (track.js noteItems): an event worth a line (stuck, died, error, …), a
 * protocol violation (`type: 'violation'`, `text`), or what the stream says (`type`: `gap` with
 * `from`/`to`, `invalid` with the `event`, `bad`; a `reason`). `_row`: the events loaded before it.
 * @typedef {Partial<LoaderEvent> & {from?: number, to?: number, event?: unknown, unknown?: boolean,
 *   _row?: number}} Note
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
 *   exitcode?: number|null, pid?: number|null, trace?: boolean, trace_error?: string|null, log_tail?: string|null}} RunDetail
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

/**
 * A batch's structure as probe/batchinfo.py describes it (nested containers down to tensors).
 * @typedef {{type: string, items?: BatchStructure[]|Record<string, BatchStructure>, length?: number,
 *   shape?: number[], dtype?: string, bytes?: number, shared?: boolean, pinned?: boolean|null, via?: string,
 *   values?: unknown[], value?: string}} BatchStructure
 */

export {};

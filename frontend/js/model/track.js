// One rank of an open run: where its events come from and everything kept about them — its
// Player (every event, the state at any point), its TimelineStore, notes, and what the ranks view
// needs (delivery times per epoch, shard digests). No DOM.

import { Player } from './player.js';
import { TimelineStore } from './timeline-store.js';
import { KNOWN_KINDS } from './schema.js';
import { FREQUENT } from './contract.gen.js';

/** @typedef {import('./types.js').LoaderEvent} LoaderEvent */

const KNOWN = new Set(KNOWN_KINDS);
const YIELD = FREQUENT.indexOf('yield') + 1; // a packed row's kind code (EventTable: FREQUENT's order from 1)
const NOTABLE = new Set(['worker_stuck', 'consumer_stuck', 'worker_died', 'error', 'timeout', 'doctor_verdict']);

/** One rank of the open run: where its events come from, and everything kept about them. */
export class Track {
  /** @param {{rank:number, label:string, runId?:string|null, source:'server'|'file'|'demo'|'none'}} o */
  constructor({ rank, label, runId = null, source }) {
    this.rank = rank;
    this.label = label;
    this.runId = runId;
    this.source = source;
    this.player = new Player();
    this.store = new TimelineStore();
    this.store.table = this.player.table;
    /** @type {LoaderEvent[]} events arrived and not yet applied, from queueHead on */
    this.queue = [];
    this.queueHead = 0;
    /**
     * @type {import('./types.js').Note[]} notable events and stream notes, each with `_row` (events loaded before it)
     */
    this.noteItems = [];
    this.violationsShown = 0;
    /**
     * @type {{close: () => void}|null} the run's live connection (views/stream.js's RunStream), closed with the track
     */
    this.stream = null;
    /**
     * @type {Partial<import('./types.js').RunDetail>|null} what the server says of the run (brief, detail, status
     *   messages)
     */
    this.runInfo = null;
    /** @type {Record<string, unknown>|null} a trace file's header line */
    this.header = null;
    /** @type {string|null} why a trace file could not be read to its end */
    this.fileError = null;
    this.complete = false; // every event is here (a file read to its end, a run that ended)
    this.wall0 = 0;
    /** @type {Map<number, number[]>} epoch -> wall-clock times of the batches handed out */
    this.yields = new Map();
    /** @type {Map<number, LoaderEvent>} epoch -> epoch_end carrying a shard digest */
    this.epochEnds = new Map();
    this.offset = 0; // seconds to add to this rank's run times to put it on the selected rank's clock
    /** @type {number[]} run times at which this rank delivered a step last of all ranks */
    this.slow = [];
    /** @type {number[]} run times at which a result was parked in the reorder buffer (arrived early) */
    this.parked = [];
    /** @type {number[]} the rows just after each of those (the state with the result parked) */
    this.parkedRows = [];
    this.parkedLen = 0;
  }

  /** @param {LoaderEvent} e */
  ingest(e) {
    const row = this.player.length;
    this.player.append(e);
    this.applied(e, row);
  }

  /**
   * Take a batch of events in an EventTable (a worker's, from a file): its columns are copied into
   * the player's table at once, then each row is applied as ingest() applies an event. A packed row
   * (a frequent kind) is applied straight from the columns, with no event built: building ten
   * million of them, and collecting them, was half of the page's thread on a big trace.
   * @param {import('./event-table.js').EventTable} rows
   */
  ingestRows(rows) {
    const from = this.player.length;
    const table = this.player.table;
    if (!table.append(rows)) {
      // another run's rows: each is kept whole
      for (let i = 0; i < rows.length; i++) this.ingest(rows.get(i));
      return;
    }
    for (let row = from; row < from + rows.length; row++) {
      if (table.isObject(row)) this.applied(this.player.applyRow(row), row);
      else this.appliedStored(row);
    }
  }

  /**
   * applied() for the packed row at `row` (a frequent kind: neither notable nor unknown), read from
   * the player's table.
   * @param {number} row
   */
  appliedStored(row) {
    const table = this.player.table;
    this.player.applyStored(row);
    this.store.applyRow(table, row);
    if (table.kind[row] === YIELD) this.delivered(table.t[row]);
    this.kept(table.t[row], row);
  }

  /** A server run is one rank: say which (from its run_start, or its info before that). @param {number} rank */
  rankIs(rank) {
    if (this.source !== 'server') return;
    this.rank = rank;
    this.label = `rank ${rank}`;
  }

  /**
   * Everything kept beside the player about event `e`, just applied at `row`.
   * @param {LoaderEvent} e
   * @param {number} row
   */
  applied(e, row) {
    this.store.apply(e, row);
    const kind = e.kind;
    if (!KNOWN.has(kind)) this.noteItems.push({ ...e, unknown: true, _row: row + 1 });
    else if (NOTABLE.has(kind)) this.noteItems.push({ ...e, _row: row + 1 });
    else if (kind === 'yield') this.delivered(e.t);
    else if (kind === 'run_start') {
      this.wall0 = e.wall_start ?? 0;
      if (Number.isInteger(e.rank)) this.rankIs(/** @type {number} */ (e.rank));
    } else if (kind === 'epoch_end' && typeof e.shard === 'string' && typeof e.epoch === 'number')
      this.epochEnds.set(e.epoch, e);
    else if (kind === 'run_end') this.complete = true;
    this.kept(e.t ?? 0, row);
  }

  /** A batch handed out at run time t, kept on the wall clock under the current epoch. @param {number} t */
  delivered(t) {
    const epoch = this.player.full.epoch;
    let list = this.yields.get(epoch);
    if (list === undefined) this.yields.set(epoch, (list = []));
    list.push(this.wall0 + t);
  }

  /**
   * The reorder buffer's parked results and the new violations, after row `row` (at time t).
   * @param {number} t
   * @param {number} row
   */
  kept(t, row) {
    const parked = this.player.full.parked.length;
    if (parked > this.parkedLen) {
      this.parked.push(t);
      this.parkedRows.push(row + 1);
    }
    this.parkedLen = parked;
    const v = this.player.full.violations;
    if (v.length > this.violationsShown) {
      for (const text of v.slice(this.violationsShown)) this.noteItems.push({ type: 'violation', text, _row: row + 1 });
      this.violationsShown = v.length;
    }
  }

  /** @param {import('./types.js').Note} n */
  note(n) {
    this.noteItems.push({ ...n, _row: this.player.length });
  }

  get state() {
    return this.player.state;
  }
}

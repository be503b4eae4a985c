// What a row of the page's event table costs (frontend/js/model/event-table.js): ns per event to pack it
// from an object (push, pushValid), from a trace line's bytes (pushLine), to rebuild it (get) and to
// read a field of it the way the reducer does (EventTable.field). The events are frontend/dev/synth.js's
// (the frequent kinds of a 4-worker run). CPU time, median of ROUNDS rounds, each over every event.
//
//   node bench/event_table.js [batches]   (default 50000 batches, about 250,000 events)

import { EventTable } from '../frontend/js/model/event-table.js';
import { pushLine } from '../frontend/js/model/table-lines.js';
import { synthesize } from '../frontend/dev/synth.js';

const ROUNDS = 7;
const batches = Number(process.argv[2] ?? 50_000);
// as the trace writer writes them: the common fields first (pushLine reads them in that order)
const events = synthesize({ num_workers: 4, batches, epochs: 1 })
  .map(({ seq: _, t, kind, ...rest }, seq) => ({ seq, t, run: 'bench', rank: 0, kind, ...rest }));
const text = new TextEncoder().encode(events.map((e) => JSON.stringify(e)).join('\n'));
const starts = [0];
for (let p = 0; p < text.length; p++) if (text[p] === 10) starts.push(p + 1);

/**
 * CPU ns per event of `work`, the median of ROUNDS rounds: CPU time, not wall-clock, so that other
 * processes on a shared machine count less. @param {() => void} work
 */
function time(work) {
  const rounds = [];
  for (let r = 0; r < ROUNDS; r++) {
    const t0 = process.cpuUsage();
    work();
    const used = process.cpuUsage(t0);
    rounds.push(((used.user + used.system) * 1000) / events.length);
  }
  return rounds.sort((a, b) => a - b)[ROUNDS >> 1];
}

const full = new EventTable(events.length);
for (const e of events) full.push(e);
const dt = EventTable.field('fetch_end', 'dt');
const wait = EventTable.field('yield', 'wait');
let sink = 0;
const cases = {
  push: () => { const t = new EventTable(events.length); for (const e of events) t.push(e); },
  pushValid: () => { const t = new EventTable(events.length); for (const e of events) t.pushValid(e); },
  pushLine: () => {
    const t = new EventTable(events.length);
    for (let k = 0; k < starts.length; k++) pushLine(t, text, starts[k], text.length);
  },
  get: () => { for (let i = 0; i < full.length; i++) sink += full.get(i).seq; },
  field: () => { for (let i = 0; i < full.length; i++) sink += (dt(full, i) ?? 0) + (wait(full, i) ?? 0); },
};
const lines = new EventTable(events.length);
for (let k = 0; k < starts.length; k++) pushLine(lines, text, starts[k], text.length);
console.log(`${events.length} events, ${full.packed} packed (${lines.packed} from lines); CPU ns per event, median of ${ROUNDS}`);
for (const [name, work] of Object.entries(cases)) console.log(`${name.padEnd(10)} ${time(work).toFixed(1)}`);
if (Number.isNaN(sink)) console.log(sink);

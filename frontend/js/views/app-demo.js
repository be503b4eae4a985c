// `/?demo=synth`: the page fed synthetic events (dev/synth.js), no server needed: development and
// tests/browser/test_frame_time.py's measurements. A function of the App (main.js).

import { TORCH_PREFETCH_FACTOR } from '../model/contract.gen.js';
import { Track } from '../model/track.js';
import { renderDiagnosis } from './panels.js';

/** @typedef {import('./main.js').App} App */

const $ = (/** @type {string} */ id) => /** @type {HTMLElement} */ (document.getElementById(id));

/** `/?demo=synth&workers=8&rate=2000`: feed synthetic events, no server needed (development, measurements). */
/** @param {App} app @param {URLSearchParams} params */
export async function startDemo(app, params) {
  app.server.demo = true;
  let synthesize;
  try {
    ({ synthesize } = await import('../../dev/synth.js'));
  } catch {
    // frontend/dev is a development tool and stays out of the wheel
    $('connection').textContent = '?demo=synth needs a source checkout (frontend/dev is not installed)';
    return;
  }
  const workers = Number(params.get('workers') ?? 4);
  const rate = Number(params.get('rate') ?? 0); // events per second; 0 = follow the virtual clock
  const batches = Number(params.get('batches') ?? 400);
  const events = synthesize({
    num_workers: workers,
    batches,
    prefetch_factor: Number(params.get('prefetch') ?? TORCH_PREFETCH_FACTOR),
    step: Number(params.get('step') ?? 0.004),
    pin_ms: Number(params.get('pin') ?? 0),
    cost: (idx) => (0.02 + 0.03 * ((workers - (idx % workers)) / workers)) * Number(params.get('slow') ?? 1),
  });
  app.reset([new Track({ rank: 0, label: 'demo', source: 'demo' })]);
  app.server.runId = 'demo';
  renderDiagnosis($('diagnosis'), [], 'offline demo: the diagnosis comes from the server');
  $('connection').textContent = `demo · ${events.length} events`;
  let i = 0;
  const t0 = performance.now();
  const pump = () => {
    const elapsed = (performance.now() - t0) / 1000;
    const until = rate ? Math.floor(elapsed * rate) : events.findIndex((e) => e.t > elapsed);
    const stop = until < 0 ? events.length : Math.min(events.length, until);
    if (stop > i) {
      const q = app.track.queue;
      for (let k = i; k < stop; k++) q.push(events[k]);
      i = stop;
      app.wake();
    }
    if (i < events.length) setTimeout(pump, 8);
  };
  pump();
}

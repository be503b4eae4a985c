// The page's DOM panels, refreshed at most 5 times a second (the slow ones, histograms, ranks and the
// diagnosis at the playhead, less often): functions of the App (main.js), called from its frame.

import { stragglers } from '../model/stats.js';
import { renderRanks } from './app-ranks.js';
import { diagnosis } from '../model/diagnosis.js';
import { renderDiagnosis } from './panels.js';
import { paceDiagnosis } from './status-bar.js';
import { markLanes, syncUrl } from './app-view.js';

/** @typedef {import('./main.js').App} App */

const $ = (/** @type {string} */ id) => /** @type {HTMLElement} */ (document.getElementById(id));
const SLOW_PANEL_MS = 400; // histograms, ranks, diagnosis at the playhead
const LIVE_SLOW_PANEL_MS = 1000; // the same while following a stream: the socket and the picture come first

/** @param {App} app */
export function renderPanels(app) {
  const state = app.state;
  const p = app.player;
  app.counters.render(state, app.store, p.cursor, app.isLiveRun() && p.following);
  app.memory.render(state);
  const notes = app.track.noteItems;
  let k = notes.length;
  while (k > 0 && (notes[k - 1]._row ?? 0) > p.cursor) k -= 1;
  app.notes.render(k === notes.length ? notes : notes.slice(0, k));
  app.log.render((i) => p.event(i), p.cursor, p.length);
  app.status.render();
  app.cards.render();
  app.inspector.render();
  app.findings.render(app.track);
  app.rangeView.render(p, app.timeline.selection);
  markLanes(app);
  syncUrl(app);
  const wall = performance.now();
  const slowMs = app.isFollowingStream() ? LIVE_SLOW_PANEL_MS : SLOW_PANEL_MS;
  if (wall - app.lastSlowPanels > slowMs) {
    app.lastSlowPanels = wall;
    renderSlowPanels(app);
  } else app.scheduler.later(slowMs);
  const fm = app.perf.frameMs;
  if (fm.length) {
    const avg = fm.reduce((a, b) => a + b, 0) / fm.length;
    $('perf').textContent = `frame ${avg.toFixed(1)} ms avg · ${Math.max(...fm).toFixed(1)} max · ${app.timeline.mode}`;
  }
}

/** Histograms, ranks and the diagnosis at the playhead: heavier, a few times a second. @param {App} app */
export function renderSlowPanels(app) {
  const state = app.state;
  const slow = new Set(stragglers(state).map((s) => s.worker));
  const anyFetch = [...state.workers.values()].some((w) => w.fetch_times.length);
  $('hist-wrap').hidden = !anyFetch;
  if (anyFetch) app.hist.draw(state, slow, state.config.num_workers === 0);
  renderRanks(app);
  renderDiagnosisNow(app);
  if (app.searchHits.length && app.player.length !== app.searchedAt) app.searchView.refresh();
}

/** @param {App} app */
export function renderDiagnosisNow(app) {
  const p = app.player;
  const scope = $('diagnosis-scope');
  if (app.track.source === 'server' && app.server.serverDiagnosis && (p.following || p.cursor === p.length)) {
    renderDiagnosis($('diagnosis'), paceDiagnosis(app.server.serverDiagnosis, app.status.pace()), 'no findings yet');
    scope.textContent = app.complete() ? '(whole run)' : '(live)';
    return;
  }
  if (!p.length) return;
  const key = `${app.track.rank}:${p.cursor}:${p.length}`;
  if (key === app.diagKey) return;
  app.diagKey = key;
  renderDiagnosis($('diagnosis'), paceDiagnosis(diagnosis(app.state), app.status.pace()), 'no findings yet');
  scope.textContent = p.cursor === p.length ? (app.complete() ? '(whole run)' : '(so far)') : `(at event ${p.cursor})`;
}

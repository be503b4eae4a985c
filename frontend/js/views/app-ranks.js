// The open job's ranks: which the timeline draws, the run or rank selected (the picker, the URL), the
// ranks table: functions of the App (main.js).

import { pinStage } from '../model/pin.js';
import { timelineRanks } from './ranks-view.js';

/** @typedef {import('./main.js').App} App */

/**
 * The timeline's rows: every rank of a small job; past TIMELINE_ALL_RANKS ranks only the selected
 * one and the rank most often last to deliver a step (64 ranks of 8 workers would be 512 lanes).
 * @param {App} app
 */
export function syncTimelineTracks(app) {
  const primary = app.track;
  const base = primary.wall0;
  const multi = app.tracks.length > 1;
  for (const tr of app.tracks) tr.offset = multi && base && tr.wall0 ? tr.wall0 - base : 0;
  const shown = timelineRanks(app.tracks, primary, app.ranksView.mostOftenLast()).map((tr) => ({
    store: tr.store,
    label: multi ? `rank ${tr.rank}${tr.source === 'file' ? ` · ${tr.label}` : ''}` : '',
    offset: tr.offset,
    inProcess: tr.player.full.config.num_workers === 0,
    pin: pinStage(tr.player.full),
    slow: multi ? tr.slow : undefined,
    primary: tr === primary,
    memory: tr.player.full.memory,
  }));
  // the timeline gets new rows only when they change: new rows redraw it at once, which would
  // undo its live pacing if done every frame
  // (the stores and the slow-step lists are the same objects as they grow: compared by identity)
  const key = shown.map((t) => `${t.label}:${t.offset}:${t.inProcess}:${JSON.stringify(t.pin)}:${t.primary}`).join('|');
  const objects = shown.flatMap((t) => [t.store, t.slow, t.memory]);
  if (key === app.timelineKey && objects.every((o, i) => o === app.timelineObjects[i])) return;
  app.timelineKey = key;
  app.timelineObjects = objects;
  app.timeline.setTracks(shown);
}

/**
 * Show the rank of the open job whose run is `id`; false when no open rank is that run.
 * @param {string} id
 * @param {boolean} [push]
 * @param {App} app
 */
export function selectRun(app, id, push = true) {
  const i = app.tracks.findIndex((tr) => tr.runId === id);
  if (i < 0) return false;
  selectTrack(app, i, push);
  return true;
}

/** @param {number} i the rank's index in `tracks` @param {boolean} [push] a history entry @param {App} app */
export function selectTrack(app, i, push = true) {
  if (!app.tracks[i] || app.tracks[i] === app.track) return;
  app.track = app.tracks[i];
  app.server.select(app.track, push);
  app.pipeline.invalidate();
  app.cards.selected = null;
  app.diagKey = '';
  app.hist.invalidate();
  app.notes.render([]);
  app.timeline.invalidate();
  app.lastPanels = 0;
  app.lastSlowPanels = 0;
  app.ranksView.invalidate();
  app.searchView.refresh();
  app.wake();
}

/** @param {App} app */
export function renderRanks(app) {
  app.ranksView.render(app.tracks, app.track);
}

// The page's view as the URL holds it (url-state.js: written as it changes, shown again on a load,
// Back and Forward) and search: what it looks through, its hits outlined and ringed, a chosen hit
// gone to; the worker lanes' marks. Functions of the App (main.js).

import { parseView } from '../model/url-state.js';
import { noteText } from './panels.js';
import { selectTrack } from './app-ranks.js';

/** @typedef {import('./main.js').App} App */

/**
 * The view as the URL holds it (url-state.js).
 * @param {App} app
 * @returns {import('../model/url-state.js').ViewParams}
 */
export function viewParams(app) {
  /** @type {import('../model/url-state.js').ViewParams} */
  const v = {};
  const p = app.player;
  if (app.pendingAt !== null) v.at = app.pendingAt;
  else if (p.length && !p.following) v.at = p.cursor;
  if (!app.timeline.follow) v.view = [app.timeline.view.t0, app.timeline.view.t1];
  if (app.cards.selected !== null) v.worker = app.cards.selected;
  if (app.selectedBatch) v.batch = app.selectedBatch;
  const sel = app.timeline.selection;
  if (sel) v.range = [sel.t0, sel.t1];
  const pair = app.compare.pair();
  if (pair) v.compare = pair;
  if (app.theme.chosen) v.theme = app.theme.chosen;
  return v;
}

/**
 * Write the view to the URL when it changed: a new history entry for a deliberate change (zoom,
 * selection, worker, batch, compare, theme, a jump), the current one replaced as the playhead
 * moves on (playing, stepping, scrubbing). UrlWriter spaces the writes out.
 * @param {App} app
 */
export function syncUrl(app) {
  if (app.server.demo) return;
  const { at, ...rest } = viewParams(app);
  const key = JSON.stringify(rest);
  const playhead = at ?? -1;
  if (key === app.urlKey && playhead === app.urlAt) return;
  const push = key !== app.urlKey || app.pushNext;
  app.urlKey = key;
  app.urlAt = playhead;
  app.pushNext = false;
  app.url.changed(push);
}

/**
 * The view the address bar holds now, as syncUrl compares it. A write reads the view when it happens, up to
 * UrlWriter's WRITE_MS after the change that asked for it: a change in between (the compare view's runs picked,
 * then the view closed) is in the URL, and closing it again must be written.
 * @param {App} app @param {import('../model/url-state.js').ViewParams} v
 */
export function urlHolds(app, v) {
  const { at, ...rest } = v;
  app.urlKey = JSON.stringify(rest);
  app.urlAt = at ?? -1;
}

/** Show the view the URL names (a load, Back, Forward): the run itself is ServerRun's. @param {App} app */
export function applyView(app) {
  const v = parseView(location.search);
  if (v.theme || app.theme.chosen) app.theme.choose(v.theme ?? app.theme.stored(), false);
  if (v.view) app.timeline.setView({ t0: v.view[0], t1: v.view[1] }, false);
  else app.timeline.fit();
  app.timeline.select(v.range ? { t0: v.range[0], t1: v.range[1] } : null, false);
  app.cards.selected = v.worker ?? null;
  app.selectedBatch = v.batch ?? null;
  highlight(app, app.searchHits);
  if (v.at !== undefined) app.pendingAt = v.at;
  else if (app.player.length && !app.player.following) app.playback.toEnd();
  const pair = v.compare;
  if (pair && JSON.stringify(pair) !== JSON.stringify(app.compare.pair()))
    app.compare.open(`run:${pair[0]}`, `run:${pair[1]}`);
  else if (!pair && app.compare.isOpen) app.compare.close();
  urlHolds(app, v);
  app.lastPanels = 0;
  app.wake();
}

/** The URL's playhead, once its events are here (all of them, for a run that ended with fewer). @param {App} app */
export function restorePlayhead(app) {
  const at = app.pendingAt;
  const p = app.player;
  if (at === null || !p.length || (p.length < at && !app.allShown())) return;
  app.pendingAt = null;
  app.playback.moveTo(Math.min(at, p.length), true, true);
}

/** What search looks through: the selected rank's spans, events and notes, the job's ranks. @param {App} app */
export function searchable(app) {
  const tr = app.track;
  app.searchedAt = tr.player.length;
  return {
    store: tr.store,
    table: tr.player.table,
    rank: tr.rank,
    ranks: app.tracks.map((t) => t.rank),
    notes: tr.noteItems.map((n) => ({
      text: noteText(n),
      t: typeof n.t === 'number' ? n.t : tr.player.clockAt(n._row ?? 0),
      row: n._row ?? 0,
      worker: typeof n.worker === 'number' ? n.worker : null,
    })),
  };
}

/**
 * Outline the hits in the timeline, ring their tasks in the picture, mark their workers' lanes; and the selected batch.
 * @param {App} app
 * @param {import('../model/search.js').Hit[]} hits
 */
export function highlight(app, hits) {
  app.searchHits = hits;
  const spans = hits.flatMap((h) => h.spans);
  const tasks = new Set(hits.flatMap((h) => h.tasks));
  const batch = app.selectedBatch;
  if (batch) {
    tasks.add(batch.join(':'));
    for (const [worker, col] of app.store.workers) {
      for (let i = 0; i < col.n; i++)
        if (col.idx[i] === batch[1] && col.epoch[i] === batch[0])
          spans.push({ worker, t0: col.start[i], t1: col.end[i] });
    }
  }
  app.timeline.outline(spans);
  app.pipeline.highlight = tasks;
  app.hitWorkers = new Set(hits.filter((h) => h.kind === 'worker').map((h) => /** @type {number} */ (h.worker)));
  app.lastPanels = 0;
  app.wake();
}

/**
 * A search hit was chosen: move the playhead there (a new history entry), select what it names.
 * @param {App} app
 * @param {import('../model/search.js').Hit} hit
 */
export function goTo(app, hit) {
  if (hit.kind === 'rank' && hit.rank !== undefined) {
    const i = app.tracks.findIndex((t) => t.rank === hit.rank);
    if (i >= 0) selectTrack(app, i);
    return;
  }
  app.pushNext = true;
  if (hit.worker !== undefined) app.cards.selected = hit.worker;
  if (hit.epoch !== undefined && hit.idx !== undefined) app.selectedBatch = [hit.epoch, hit.idx];
  if (hit.row !== undefined) app.playback.moveTo(hit.row, true, true);
  else if (hit.t !== null) app.playback.seekTime(hit.t);
  const span = hit.spans[0];
  const view = app.timeline.view;
  if (span && !app.timeline.follow && (span.t1 < view.t0 || span.t0 > view.t1)) {
    const half = (view.t1 - view.t0) / 2;
    app.timeline.setView({ t0: span.t0 - half, t1: span.t0 + half });
  }
  highlight(app, app.searchHits);
}

/** Lanes: a search hit's, and a worker that had a finding (kept after the run or its fetch ended). @param {App} app */
export function markLanes(app) {
  const alarms = app.store.alarms;
  for (const lane of /** @type {NodeListOf<HTMLElement>} */ (document.querySelectorAll('[data-testid=worker-lane]'))) {
    const wid = Number(lane.dataset.worker);
    lane.classList.toggle('hit', app.hitWorkers.has(wid));
    const a = alarms.findLast((x) => x.worker === wid && x.t <= app.player.time);
    const live = lane.dataset.status === 'stuck' || lane.dataset.status === 'died';
    const mark = a && !live ? `${a.kind === 'died' ? 'died' : 'was stuck'} at ${a.t.toFixed(1)} s · task ${a.idx}` : '';
    if ((lane.dataset.finding ?? '') !== mark) {
      if (mark) lane.dataset.finding = mark;
      else delete lane.dataset.finding;
    }
  }
}

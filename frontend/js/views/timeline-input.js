// The timeline's input: wheel zoom, drag pan, Shift+drag range selection, clicks on the time axis
// (the scrubber) and on fetch spans, double-click to fit, and the hover tooltip with its hit tests.
// The keys that zoom and pan are keys.js's (through TimelineView.zoomBy / panBy).

import { AXIS, GUTTER, MIN_DRAG_PX } from './timeline-paint.js';
import { zoomWindow, panWindow, fmtDuration } from '../model/time-window.js';
import { fmtIndices } from './pipeline-view.js';
import { MAIN, fullProcAt, pointAt, procAt } from '../model/memory.js';
import { mb } from './memory-view.js';

/** @typedef {import('./timeline-view.js').TimelineView} TimelineView */
/** @typedef {import('./timeline-view.js').TimeWindow} TimeWindow */
/** @typedef {import('./timeline-view.js').SpanHit} SpanHit */
/** @typedef {import('./timeline-view.js').Geometry} Geometry */
/** @typedef {import('./timeline-view.js').Row} Row */
/** @typedef {import('./timeline-view.js').SpanColumn} SpanColumn */

/** @param {TimelineView} view */
export function bindInput(view) {
  const c = view.canvas;
  c.addEventListener(
    'wheel',
    (ev) => {
      ev.preventDefault();
      const rect = c.getBoundingClientRect();
      const x = ev.clientX - rect.left;
      if (x < GUTTER) return;
      const factor = Math.exp((ev.deltaY || ev.deltaX) * 0.0015);
      view.setView(zoomWindow(view.view, view.timeAt(x), factor));
    },
    { passive: false },
  );
  /**
   * @type {{kind: 'scrub'} | {kind: 'select', x: number, t: number} | {kind: 'pan', x: number, view: TimeWindow,
   *   moved: boolean} | null}
   */
  let drag = null;
  c.addEventListener('pointerdown', (ev) => {
    const rect = c.getBoundingClientRect();
    const x = ev.clientX - rect.left,
      y = ev.clientY - rect.top;
    c.setPointerCapture(ev.pointerId);
    if (y < AXIS && x >= GUTTER && view.onSeek) {
      drag = { kind: 'scrub' };
      view.onSeek(view.timeAt(x));
      return;
    }
    // Shift+drag selects a range of time, as in Perfetto; a plain drag pans
    if (ev.shiftKey && x >= GUTTER) {
      drag = { kind: 'select', x: ev.clientX, t: view.timeAt(x) };
      return;
    }
    drag = { kind: 'pan', x: ev.clientX, view: { ...view.view }, moved: false };
  });
  c.addEventListener('pointermove', (ev) => {
    const rect = c.getBoundingClientRect();
    if (drag?.kind === 'scrub') {
      view.onSeek?.(view.timeAt(Math.max(GUTTER, ev.clientX - rect.left)));
      return;
    }
    if (drag?.kind === 'select') {
      if (Math.abs(ev.clientX - drag.x) >= MIN_DRAG_PX) {
        const t = view.timeAt(Math.max(GUTTER, ev.clientX - rect.left));
        view.select({ t0: Math.min(drag.t, t), t1: Math.max(drag.t, t) }, false);
      }
      return;
    }
    if (drag) {
      const dx = ev.clientX - drag.x;
      if (Math.abs(dx) > 2) {
        drag.moved = true;
        const dt = -(dx / ((view.geo?.width ?? view.width) - GUTTER)) * (drag.view.t1 - drag.view.t0);
        view.setView(panWindow(drag.view, dt), false);
      }
      return;
    }
    view.hover = { x: ev.clientX - rect.left, y: ev.clientY - rect.top };
    c.style.cursor = view.hover.y < AXIS && view.onSeek ? 'col-resize' : 'crosshair';
    view.invalidate();
  });
  c.addEventListener('pointerup', (ev) => {
    const done = drag;
    drag = null;
    if (done?.kind === 'select') {
      // a Shift+click clears the selection; a Shift+drag made one, said once it ends
      if (Math.abs(ev.clientX - done.x) < MIN_DRAG_PX) view.select(null);
      else view.onSelect?.(view.selection);
      return;
    }
    if (done?.kind === 'pan' && done.moved) view.onView?.(view.view);
    if (done?.kind !== 'pan' || done.moved || !view.onSpanClick || !view.geo) return;
    const rect = c.getBoundingClientRect();
    const span = spanAt(view, ev.clientX - rect.left, ev.clientY - rect.top);
    if (span) view.onSpanClick(span);
  });
  c.addEventListener('pointerleave', () => {
    view.hover = null;
    view.tip.hidden = true;
    view.invalidate();
  });
  c.addEventListener('dblclick', (ev) => {
    const rect = c.getBoundingClientRect();
    if (ev.clientY - rect.top >= AXIS) view.fit(true);
  });
}

/**
 * The fetch span under canvas point (x, y), or null.
 * @param {TimelineView} view
 * @param {number} x
 * @param {number} y
 * @returns {SpanHit|null}
 */
export function spanAt(view, x, y) {
  const g = view.geo;
  const row = g?.rows.find((r) => y >= r.y && y < r.y + r.h);
  if (!g || !row || row.kind !== 'worker' || x < GUTTER) return null;
  const col = row.track.store.workers.get(row.wid);
  const t = view.timeAt(x) - row.track.offset;
  const i = col ? nearest(col, t, (2 / (g.width - GUTTER)) * (view.view.t1 - view.view.t0)) : -1;
  return !col || i < 0 ? null : { track: row.track, worker: row.wid, idx: col.idx[i], epoch: col.epoch[i] };
}

/** @param {TimelineView} view @param {Geometry} g @param {number} nowT */
export function hoverTip(view, g, nowT) {
  const h = view.hover;
  if (!h || h.x < GUTTER) {
    view.tip.hidden = true;
    return;
  }
  let text = '';
  if (h.y < AXIS) {
    text = view.onSeek ? `click or drag here to move the playhead\n${fmtDuration(view.timeAt(h.x))}` : '';
  }
  const row = g.rows.find((r) => h.y >= r.y && h.y < r.y + r.h);
  if (row && row.kind !== 'group') {
    const tr = row.track;
    const t = view.timeAt(h.x) - tr.offset;
    const slack = (2 / (g.width - GUTTER)) * (view.view.t1 - view.view.t0);
    const store = tr.store;
    const rank = view.tracks.length > 1 ? `${tr.label} · ` : '';
    if (row.kind === 'worker') {
      const col = store.workers.get(row.wid);
      const open = store.open.get(row.wid);
      const i = col ? nearest(col, t, slack) : -1;
      const who = `${rank}${row.label}`;
      if (col && i >= 0) {
        const samples = store.samplesAt(col.ref2[i]);
        const end = store.eventAt(col.ref[i]);
        text =
          `task ${col.idx[i]} (epoch ${col.epoch[i]}) · ${who}\nfetch took ${fmtDuration(col.end[i] - col.start[i])}` +
          `\nsamples ${fmtIndices(samples?.indices, samples?.n) || '?'}${end?.nbytes ? `\n${end.nbytes} bytes` : ''}`;
      } else if (open && t >= open.start) {
        const samples = store.samplesAt(open.dref);
        text =
          `task ${open.idx} · ${who}\nstill fetching: ` +
          `${fmtDuration((tr === view.primary ? nowT : store.tmax) - open.start)} so far\nsamples ` +
          `${fmtIndices(samples?.indices, samples?.n) || '?'}`;
      } else {
        text = `${who} idle at ${fmtDuration(t)}`;
      }
    } else if (row.kind === 'memory' || row.kind === 'headroom' || row.kind === 'scale') {
      text = memoryTip(row, t, rank);
    } else if (row.kind === 'pin') {
      const i = row.pin.mode === 'active' ? nearest(store.pin, t, slack) : -1;
      if (i >= 0) {
        const e = store.eventAt(store.pin.ref[i]);
        const mb = e?.nbytes ? e.nbytes / 1e6 : null;
        const dt = store.pin.end[i] - store.pin.start[i];
        text =
          `${rank}task ${store.pin.idx[i]} pinned in ${fmtDuration(dt)}` +
          (mb !== null ? `\n${mb.toFixed(2)} MB${dt > 0 ? ` at ${(mb / dt).toFixed(0)} MB/s` : ''}` : '') +
          (e?.pinned === false ? '\nNOT pinned (a custom batch type needs pin_memory())' : '');
      } else text = row.pin.mode === 'active' ? `${rank}pin thread idle` : `${rank}${row.pin.why}`;
    } else {
      const col = store.consumer;
      const i = nearest(col, t, slack * 2);
      if (i >= 0) {
        const e = store.eventAt(col.ref[i]);
        text =
          `${rank}batch ${col.idx[i]} handed to the training loop at ${fmtDuration(col.end[i])}` +
          `\nconsumer waited ${fmtDuration(col.end[i] - col.start[i])}` +
          ` for it${e?.from_parked ? '\n(it was already in the reorder buffer)' : ''}`;
      } else text = `${rank}consumer busy training (not waiting)`;
    }
  }
  if (!text) {
    view.tip.hidden = true;
    return;
  }
  view.tip.textContent = text;
  view.tip.hidden = false;
  const left = Math.min(h.x + 14, g.width - 260);
  view.tip.style.left = `${left}px`;
  view.tip.style.top = `${h.y + 14}px`;
}

/**
 * A memory lane's hover: the sample in force at t (the last one at or before it) and when it was taken.
 * @param {Row & {kind: 'memory' | 'headroom' | 'scale'}} row @param {number} t on the row's clock @param {string} rank
 */
function memoryTip(row, t, rank) {
  if (row.kind === 'scale')
    return `${rank}memory lanes: each process's USS (private) and shared memory, in MB (10^6 bytes)`;
  const series = row.memory.series,
    i = pointAt(series, t);
  const who = row.kind === 'headroom' ? 'host headroom' : row.key === MAIN ? 'main process' : `worker ${row.key}`;
  const at = `${rank}${who} at ${fmtDuration(t)}`;
  if (row.kind === 'headroom') {
    const room = i >= 0 ? series[i][1] : null;
    return room === null
      ? `${at}: no sample`
      : `${at}\nheadroom ${mb(room)} MB\nsampled at ${fmtDuration(series[i][0])}`;
  }
  const p = procAt(series, i, row.key);
  if (p === null) return `${at}: no sample`;
  const full = p.uss === null ? fullProcAt(series, i, row.key) : null;
  const when = `sampled at ${fmtDuration(p.t)}`;
  if (full === null) return `${at}\nUSS ${mb(p.uss)} MB · shared ${mb(p.shared)} MB · RSS ${mb(p.rss)} MB\n${when}`;
  // a light sample: RSS alone; USS and shared from the last full one
  return (
    `${at}\nRSS ${mb(p.rss)} MB, ${when}\n` +
    `USS ${mb(full.uss)} MB · shared ${mb(full.shared)} MB at the last full sample, ${fmtDuration(full.t)}`
  );
}

/** The span under t (within slack), or -1. @param {SpanColumn} col @param {number} t @param {number} slack */
function nearest(col, t, slack) {
  let i = col.at(t);
  if (i >= 0) return i;
  i = col.at(t + slack);
  if (i >= 0) return i;
  return col.at(t - slack);
}

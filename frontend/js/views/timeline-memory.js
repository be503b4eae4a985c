// The timeline's memory lanes (memory.js's series: each sample holds until the next): the rows under
// each sampled worker, the main process's and the host's headroom, their shared scale, and drawing them.

import { PALETTE } from '../model/colors.js';
import { fillLabel, fitText } from './canvas-text.js';
import { MAIN, headroomScale, procAt, rssScale } from '../model/memory.js';
import { mb } from './memory-view.js';
import { FONT, GUTTER } from './timeline-paint.js';

/** @typedef {import('./timeline-view.js').TimelineView} TimelineView */
/** @typedef {import('./timeline-view.js').DrawFrame} DrawFrame */
/** @typedef {import('./timeline-view.js').Row} Row */
/** @typedef {import('./timeline-view.js').Track} Track */

export const GROUP_H = 16;
export const MEMORY_H = 14; // a memory lane: room for its 11 px name in the gutter

/** @type {WeakMap<import('../model/memory.js').MemoryModel, {samples: number, rss: number, headroom: number}>} */
const scaled = new WeakMap();

/**
 * The memory lanes' scales (the process lanes' and the headroom lane's), worked out once per sample:
 * every lane of a draw needs them.
 * @param {import('../model/memory.js').MemoryModel} memory
 */
function scales(memory) {
  let top = scaled.get(memory);
  if (top === undefined || top.samples !== memory.samples) {
    top = { samples: memory.samples, rss: rssScale(memory.series), headroom: headroomScale(memory.series) };
    scaled.set(memory, top);
  }
  return top;
}

/**
 * The scales a track's memory lanes are drawn on: its own, or the largest of `track.memoryScaleWith`'s
 * (the compare view puts both runs on one scale, so that their lanes' heights compare).
 * @param {Track} track @param {import('../model/memory.js').MemoryModel} memory
 */
function laneScales(track, memory) {
  const peers = track.memoryScaleWith ?? [memory];
  let rss = 0,
    headroom = 0;
  for (const peer of peers) {
    const top = scales(peer);
    rss = Math.max(rss, top.rss);
    headroom = Math.max(headroom, top.headroom);
  }
  return { rss, headroom };
}

/**
 * The memory lanes after a rank's consumer row: the scale, the main process's, the host's headroom.
 * @param {Row[]} rows @param {Track} track @param {import('../model/memory.js').MemoryModel} memory @param {number} y
 */
export function memoryRows(rows, track, memory, y) {
  rows.push({ kind: 'scale', track, memory, y, h: GROUP_H, label: '' });
  y += GROUP_H;
  if (memory.procs.has(MAIN)) {
    rows.push({ kind: 'memory', track, key: MAIN, memory, y, h: MEMORY_H, label: 'main memory' });
    y += MEMORY_H;
  }
  if (memory.headroom_low !== null) {
    rows.push({ kind: 'headroom', track, memory, y, h: MEMORY_H, label: 'host headroom' });
    y += MEMORY_H;
  }
  return y + 6;
}

/**
 * What the memory lanes show: the common scale of the process lanes and the headroom lane's, on a
 * header of its own so that the words read.
 * @param {TimelineView} view @param {DrawFrame} frame @param {Row & {kind: 'scale'}} row
 */
export function drawMemoryScale(view, { ctx, g }, row) {
  ctx.fillStyle = PALETTE.groupBg;
  ctx.fillRect(0, row.y, g.width, row.h);
  ctx.fillStyle = PALETTE.ink;
  ctx.font = FONT;
  const top = laneScales(row.track, row.memory);
  const room = row.memory.headroom_low !== null ? ` · headroom lane 0 to ${mb(top.headroom)} MB` : '';
  const shared = row.track.memoryScaleWith ? ' (one scale for every run shown)' : '';
  const text = `memory lanes 0 to ${mb(top.rss)} MB${shared}: USS solid, shared pale above it, up to the RSS${room}`;
  fillLabel(ctx, fitText(ctx, text, g.width - 16), 8, row.y + 12);
}

/**
 * A process's memory (USS filled, shared stacked above it in a lighter tone, on the scale common to
 * the process lanes) or the host's headroom (on its own scale): each sample held until the next,
 * the last one to the end of the run. A light sample (RSS alone) draws its RSS as a line over the
 * last full sample's USS and shared, which hold until the next full one.
 * @param {TimelineView} view @param {DrawFrame} frame @param {Row & {kind: 'memory' | 'headroom'}} row
 */
export function drawMemoryRow(view, frame, row) {
  const { ctx, g } = frame;
  const tr = row.track,
    off = tr.offset,
    series = row.memory.series;
  view.rowFrame(frame, row, PALETTE.rowA, PALETTE.dim, FONT, row.h / 2 + 4);
  const lanes = laneScales(tr, row.memory);
  const top = row.kind === 'memory' ? lanes.rss : lanes.headroom;
  const end = Math.max(tr.store.tmax, row.memory.t);
  const h = row.h - 2,
    floor = row.y + row.h - 1;
  /** @type {ReturnType<typeof procAt>} */
  let full = null; // this lane's last full figures
  for (let i = 0; i < series.length && top > 0; i++) {
    const p = row.kind === 'memory' ? procAt(series, i, row.key) : null;
    if (p !== null && p.uss !== null) full = p;
    const x0 = view.X(series[i][0] + off),
      x1 = view.X((series[i + 1]?.[0] ?? end) + off);
    if (x1 < GUTTER || x0 > g.width) continue;
    const w = Math.max(1, x1 - x0);
    if (row.kind === 'headroom') {
      const room = series[i][1];
      if (room === null) continue;
      ctx.fillStyle = PALETTE.headroom;
      ctx.fillRect(x0, floor - (h * room) / top, w, (h * room) / top);
      continue;
    }
    if (p === null) continue;
    if (full !== null && full.uss !== null) {
      ctx.fillStyle = PALETTE.memShared;
      ctx.fillRect(x0, floor - (h * full.rss) / top, w, (h * (full.rss - full.uss)) / top);
      ctx.fillStyle = PALETTE.memUss;
      ctx.fillRect(x0, floor - (h * full.uss) / top, w, (h * full.uss) / top);
    }
    if (p.uss === null) {
      // a light sample, or psutil without USS: the RSS, as a line at its level
      ctx.fillStyle = PALETTE.dim;
      ctx.fillRect(x0, floor - (h * p.rss) / top, w, 1);
    }
  }
  ctx.restore();
}

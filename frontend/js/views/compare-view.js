// The compare view: two runs side by side (runs on this server, or trace files open in the page),
// over the whole page. What it shows comes from compare.js (the mirror of compare.py): the settings
// that differ, throughput and waiting, per-worker fetch-time histograms on one scale, and how the
// diagnosis changed; each run's memory from memory-compare.js (compare-memory.js draws it); plus both
// timelines on one time axis, each starting at 0 s of its own run.
// It opens on the run being viewed as A and, as B, the previous run of the same loader; `/?compare=
// ID_A,ID_B` opens it on two server runs (main.js reads and writes that parameter: `pair()`).

import { compareRuns } from '../model/compare.js';
import { compareMemory } from '../model/memory-compare.js';
import { renderCompareMemory } from './compare-memory.js';
import { Track } from '../model/track.js';
import { TimelineStore } from '../model/timeline-store.js';
import { fmtDuration } from '../model/time-window.js';
import { TimelineView } from './timeline-view.js';
import { pinStage } from '../model/pin.js';
import { PALETTE } from '../model/colors.js';
import { api } from './api.js';
import { previousRun } from '../model/run-list.js';
import { chartLabels } from './histogram-view.js';
import { clearLabels } from './canvas-text.js';

const $ = (/** @type {string} */ id) => /** @type {HTMLElement} */ (document.getElementById(id));
/** The run pickers (compare-a, compare-b): selects in index.html. @param {string} id */
const pick = (id) => /** @type {HTMLSelectElement} */ ($(id));
const PAGE = 10000; // events per REST request: the route's maximum

/** @typedef {import('../model/compare.js').Comparison} Comparison */

/**
 * An element with text and attributes.
 * @param {string} tag
 * @param {Record<string, string>} [attrs]
 * @param {(Node|string)[]} [kids]
 */
function el(tag, attrs = {}, kids = []) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  node.append(...kids);
  return node;
}

/**
 * A value as the table shows it: JSON for objects (a space after each comma, where it may wrap), a dash for none.
 * @param {unknown} v
 */
function shown(v) {
  return v === null || v === undefined
    ? '—'
    : typeof v === 'object'
      ? JSON.stringify(v).replace(/,/g, ', ')
      : String(v);
}

/** A setting's cell: an object may wrap after its commas, anything else stays on one line. @param {unknown} v */
function settingCell(v) {
  return el('td', v !== null && typeof v === 'object' ? { class: 'long' } : {}, [shown(v)]);
}

/** @param {number} v @param {string} unit */
export function fmtMetric(v, unit) {
  if (unit === 'rate') return `${v.toFixed(1)} batches/s`;
  if (unit === 'share') return `${(v * 100).toFixed(0)}%`;
  if (unit === 'seconds') return fmtDuration(v);
  return v.toFixed(0);
}

/**
 * B against A: percentage points for shares, a factor for the rest (as `loaderscope compare`).
 * @param {import('../model/compare.js').Metric} row
 */
export function fmtChange(row) {
  if (row.unit === 'share') return `${row.delta >= 0 ? '+' : ''}${(row.delta * 100).toFixed(0)} pts`;
  return row.ratio === null ? '' : `×${row.ratio.toFixed(2)}`;
}

/** Every event of a server run, read page by page into a Track of its own. @param {string} id */
async function fetchTrack(id) {
  const tr = new Track({ rank: 0, label: id, runId: id, source: 'server' });
  let after = -1;
  for (;;) {
    const page = await api.events(id, after, PAGE);
    // the server's own events (its store checked them as they came): read as the page holds events
    const events = /** @type {import('../model/types.js').LoaderEvent[]} */ (page?.events ?? []);
    for (const e of events) tr.ingest(e);
    const last = events[events.length - 1];
    if (!last || (page.last_seq !== undefined && last.seq >= page.last_seq)) break;
    after = last.seq;
  }
  tr.complete = true;
  return tr;
}

/** One line naming a run: scenario (or script), mode, workers, status. @param {Track} tr */
function title(tr) {
  const s = tr.player.full;
  const c = s.config;
  const who = s.scenario || s.meta.name || tr.label;
  const workers = c.num_workers === undefined ? '' : `${c.num_workers} worker${c.num_workers === 1 ? '' : 's'}`;
  return [who, s.mode, workers, s.status].filter(Boolean).join(' · ');
}

export class CompareView {
  /**
   * @param {() => Track[]} openTracks the tracks open in the page (trace files among them)
   * @param {() => string|null} viewed the server run the page shows (A by default)
   * @param {() => void} changed the pair shown changed, or the view opened or closed (the URL says it)
   */
  constructor(openTracks, viewed, changed) {
    this.openTracks = openTracks;
    this.viewed = viewed;
    this.changed = changed;
    /** @type {Track[]} the two runs shown, A then B */
    this.shown = [];
    /** @type {Comparison|null} */
    this.result = null;
    this.timeline = new TimelineView($('compare-timeline'), new TimelineStore());
    this.timeline.onInvalidate = () => requestAnimationFrame(() => this.timeline.draw({ now: 0, live: false }));
    $('btn-compare').addEventListener('click', () => this.open());
    $('compare-close').addEventListener('click', () => this.close());
    $('compare-swap').addEventListener('click', () => {
      const a = pick('compare-a').value;
      pick('compare-a').value = pick('compare-b').value;
      pick('compare-b').value = a;
      this.changed();
      this.load();
    });
    $('compare-a').addEventListener('change', () => {
      this.changed();
      this.load();
    });
    $('compare-b').addEventListener('change', () => {
      this.changed();
      this.load();
    });
    window.addEventListener('keydown', (ev) => {
      if (ev.key === 'Escape' && !$('compare').hidden) this.close();
    });
    window.addEventListener('resize', () => {
      if (this.result) this.drawHistograms(this.result);
    });
  }

  /** Draw the canvases again (another theme). */
  redraw() {
    if (this.result) this.drawHistograms(this.result);
    this.timeline.invalidate();
  }

  get isOpen() {
    return !$('compare').hidden;
  }

  /**
   * The two server runs shown, for the URL; null when closed or when a side is a trace file.
   * @returns {[string, string]|null}
   */
  pair() {
    const a = pick('compare-a').value,
      b = pick('compare-b').value;
    if (!this.isOpen || !a.startsWith('run:') || !b.startsWith('run:')) return null;
    return [a.slice(4), b.slice(4)];
  }

  /**
   * Show the view. By default A is the run being viewed and B the previous run of the same loader
   * (run-list.js previousRun); with no run open, the newest two.
   * @param {string} [a] `run:ID` or `track:N` @param {string} [b]
   */
  async open(a, b) {
    $('compare').hidden = false;
    $('compare-close').focus();
    const { options, runs } = await this.options();
    const values = options.map((o) => o.value);
    const viewed = this.viewed();
    const defaultA = viewed && values.includes(`run:${viewed}`) ? `run:${viewed}` : values[0];
    const previous = defaultA?.startsWith('run:') ? previousRun(runs, defaultA.slice(4)) : null;
    const defaultB = previous ? `run:${previous}` : values.find((v) => v !== defaultA);
    /** @type {Array<[string, string|undefined, string|undefined]>} */
    const pickers = [
      ['compare-a', a, defaultA],
      ['compare-b', b, defaultB],
    ];
    for (const [id, want, fallback] of pickers) {
      $(id).replaceChildren(...options.map((o) => new Option(o.text, o.value)));
      pick(id).value = want && values.includes(want) ? want : (fallback ?? '');
    }
    this.changed();
    await this.load();
  }

  close() {
    if (!this.isOpen) return;
    $('compare').hidden = true;
    this.changed();
    $('btn-compare').focus();
  }

  /** Runs to pick from: the server's (newest first) and trace files open in the page. */
  async options() {
    /** @type {{value: string, text: string}[]} */
    const out = [];
    this.openTracks().forEach((tr, i) => {
      if (tr.source === 'file') out.push({ value: `track:${i}`, text: `file ${tr.label} · ${title(tr)}` });
    });
    /** @type {import('../model/types.js').RunBrief[]} */
    let runs = [];
    try {
      runs = await api.runs();
    } catch {
      /* a page opened from files alone has no server runs to offer */
    }
    if (!Array.isArray(runs)) runs = [];
    for (const r of [...runs].reverse()) {
      const rank = (r.world_size ?? 1) > 1 ? ` · rank ${r.rank}` : '';
      out.push({
        value: `run:${r.id}`,
        text: `${r.scenario ?? r.name ?? 'run'} · ${r.mode ?? ''}${rank} · ${r.status ?? ''} · ${r.id}`,
      });
    }
    return { options: out, runs };
  }

  /** @param {string} value @returns {Promise<Track>} */
  async track(value) {
    const [kind, key] = [value.slice(0, value.indexOf(':')), value.slice(value.indexOf(':') + 1)];
    if (kind === 'track') return this.openTracks()[Number(key)];
    return fetchTrack(key);
  }

  /** Read both runs and show them; a run that cannot be read is said in place of the comparison. */
  async load() {
    const a = pick('compare-a').value,
      b = pick('compare-b').value;
    const status = $('compare-status');
    const root = $('compare');
    root.dataset.ready = 'false';
    if (!a || !b) {
      status.textContent = 'pick two runs: start or open a second one first';
      $('compare-body').hidden = true;
      return;
    }
    status.textContent = 'reading both runs…';
    let tracks;
    try {
      tracks = await Promise.all([this.track(a), this.track(b)]);
    } catch (err) {
      status.textContent = `could not read a run: ${err instanceof Error ? err.message : err}`;
      return;
    }
    if (pick('compare-a').value !== a || pick('compare-b').value !== b) return; // picked again meanwhile
    this.shown = tracks;
    const labels = /** @type {[string, string]} */ ([
      pick('compare-a').selectedOptions[0].text,
      pick('compare-b').selectedOptions[0].text,
    ]);
    const [ta, tb] = tracks.map((tr) => ({
      state: tr.player.full,
      start: tr.player.length ? tr.player.event(0) : null,
    }));
    this.result = compareRuns(ta, tb, labels);
    status.textContent = '';
    $('compare-body').hidden = false;
    this.render(this.result);
    renderCompareMemory(compareMemory(ta.state, tb.state));
    root.dataset.ready = 'true';
  }

  /** @param {Comparison} r */
  render(r) {
    this.shown.forEach((tr, i) => {
      const side = i ? 'b' : 'a';
      $(`compare-head-${side}`).replaceChildren(
        el('b', {}, [side.toUpperCase()]),
        ` ${title(tr)}`,
        el('span', { class: 'muted' }, [` · ${tr.player.full.run || tr.label}`]),
      );
    });
    this.renderSettings(r.settings);
    this.renderMetrics(r.metrics);
    this.drawHistograms(r);
    this.renderTimelines();
    this.renderDiagnosis(r.diagnosis);
  }

  /** @param {Comparison['settings']} s */
  renderSettings(s) {
    const rows = s.changed.map((c) =>
      el('tr', { 'data-testid': 'compare-setting', 'data-key': c.key }, [
        el('th', {}, [c.key]),
        settingCell(c.a),
        settingCell(c.b),
      ]),
    );
    const head = el('tr', {}, [el('th', {}, ['setting']), el('th', {}, ['A']), el('th', {}, ['B'])]);
    $('compare-settings').replaceChildren(
      ...(rows.length ? [head, ...rows] : [el('tr', {}, [el('td', {}, ['the two runs have the same settings'])])]),
    );
    $('compare-same').textContent = `${s.same.length} other settings are the same`;
  }

  /** @param {Comparison['metrics']} metrics */
  renderMetrics(metrics) {
    const head = el(
      'tr',
      {},
      ['measure', 'A', 'B', 'B vs A'].map((t) => el('th', { scope: 'col' }, [t])),
    );
    $('compare-metrics').replaceChildren(
      head,
      ...metrics.map((m) =>
        el('tr', { 'data-testid': 'compare-metric', 'data-key': m.key, 'data-a': String(m.a), 'data-b': String(m.b) }, [
          el('th', {}, [m.label]),
          el('td', {}, [fmtMetric(m.a, m.unit)]),
          el('td', {}, [fmtMetric(m.b, m.unit)]),
          el('td', { class: better(m) }, [fmtChange(m)]),
        ]),
      ),
    );
  }

  /** One canvas per run, a small chart per worker, all on the comparison's common edges. @param {Comparison} r */
  drawHistograms(r) {
    const { edges } = r.histograms;
    $('compare-scale').textContent = edges.length
      ? `one log scale for both runs: ${fmtDuration(edges[0])} … ${fmtDuration(edges[edges.length - 1])}; ` +
        `the tick marks the median`
      : 'no fetch finished in either run';
    for (const side of /** @type {const} */ (['a', 'b'])) {
      const canvas = /** @type {HTMLCanvasElement} */ ($(`compare-hist-${side}`));
      const rows = r.histograms[side];
      canvas.dataset.counts = JSON.stringify(rows.map((w) => w.counts));
      drawHistogramRows(canvas, rows, edges);
    }
  }

  /** Both runs in one timeline, each from 0 s of its own run (its run_start). */
  renderTimelines() {
    const memories = this.shown.map((tr) => tr.player.full.memory);
    this.timeline.setTracks(
      this.shown.map((tr, i) => ({
        // without its epoch markers: the view draws the first track's at that run's times, which would
        // be wrong for B and would write "epoch 0" over A's name
        store: Object.create(tr.store, { epochs: { value: [] } }),
        label: `${i ? 'B' : 'A'} · ${title(tr)}`,
        offset: -(tr.player.length ? tr.player.event(0).t : 0),
        inProcess: tr.player.full.config.num_workers === 0,
        pin: pinStage(tr.player.full),
        // its memory lanes, as the run's own timeline draws them (timeline-memory.js), on one scale
        // for both runs: a lane twice as tall holds twice the bytes
        memory: tr.player.full.memory,
        memoryScaleWith: memories,
      })),
    );
    this.timeline.fit();
  }

  /** @param {Comparison['diagnosis']} d */
  renderDiagnosis(d) {
    /** @param {string} id @param {string[]} texts @param {string} none */
    const list = (id, texts, none) =>
      $(id).replaceChildren(
        ...(texts.length ? texts.map((t) => el('li', {}, [t])) : [el('li', { class: 'muted' }, [none])]),
      );
    list('compare-only-a', d.only_a, 'nothing');
    list('compare-only-b', d.only_b, 'nothing');
    $('compare-both').replaceChildren(
      ...(d.both.length
        ? d.both.map((p) =>
            el(
              'li',
              { 'data-changed': String(p.changed) },
              p.changed
                ? [
                    el('span', { class: 'tag' }, ['A']),
                    ` ${p.a}`,
                    el('br'),
                    el('span', { class: 'tag' }, ['B']),
                    ` ${p.b}`,
                  ]
                : [p.a],
            ),
          )
        : [el('li', { class: 'muted' }, ['nothing'])]),
    );
  }
}

/**
 * Whether B's change is good news (class ok) or bad (class bad): more throughput, less waiting.
 * @param {import('../model/compare.js').Metric} m
 */
function better(m) {
  const up = m.key === 'batches_per_s' ? 1 : m.unit === 'share' || m.key === 'startup_wait' ? -1 : 0;
  const sign = Math.sign(m.delta) * up;
  return sign > 0 && Math.abs(m.delta) > 1e-9 ? 'ok' : sign < 0 ? 'bad' : '';
}

/**
 * Histograms of one run, a row of small charts per worker, bins from the shared edges.
 * @param {HTMLCanvasElement} canvas @param {import('../model/compare.js').HistRow[]} rows @param {number[]} edges
 */
function drawHistogramRows(canvas, rows, edges) {
  const width = Math.max(canvas.parentElement?.clientWidth ?? 300, 240);
  const cols = Math.max(1, Math.min(rows.length, Math.floor(width / 240)));
  const cellW = width / cols,
    cellH = 78;
  const height = Math.ceil(rows.length / cols) * cellH + 4;
  const dpr = window.devicePixelRatio || 1;
  canvas.width = Math.round(width * dpr);
  canvas.height = Math.round(height * dpr);
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  const ctx = /** @type {CanvasRenderingContext2D} */ (canvas.getContext('2d'));
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, width, height);
  clearLabels(ctx);
  if (!edges.length) return;
  const bins = edges.length - 1;
  const a = Math.log(edges[0]),
    span = Math.log(edges[bins]) - a;
  rows.forEach((w, i) => {
    const x0 = (i % cols) * cellW + 4,
      y0 = Math.floor(i / cols) * cellH + 2;
    const pw = cellW - 14,
      ph = cellH - 32;
    const max = Math.max(1, ...w.counts);
    ctx.fillStyle = PALETTE.plotBg;
    ctx.fillRect(x0, y0 + 16, pw, ph);
    ctx.fillStyle = PALETTE.fetch;
    const bw = pw / bins;
    w.counts.forEach((c, k) => {
      if (!c) return;
      const h = Math.max(1, (c / max) * (ph - 2));
      ctx.fillRect(x0 + k * bw + 0.5, y0 + 16 + ph - h, Math.max(1, bw - 1), h);
    });
    if (w.tasks) {
      ctx.fillStyle = PALETTE.ink;
      ctx.fillRect(x0 + ((Math.log(w.p50) - a) / span) * pw - 0.5, y0 + 14, 1.5, ph + 4);
    }
    chartLabels(ctx, {
      name: w.in_process ? 'main process' : `worker ${w.worker}`,
      slow: false,
      x0,
      y0,
      pw,
      nameY: 11,
      stat: w.tasks ? `${w.tasks} fetches · p50 ${fmtDuration(w.p50)} · p95 ${fmtDuration(w.p95)}` : 'no fetch',
      axisY: 16 + ph + 12,
      lo: edges[0],
      hi: edges[bins],
    });
  });
  canvas.setAttribute(
    'aria-label',
    rows.map((w) => `worker ${w.worker}: ${w.tasks} fetches, p50 ${fmtDuration(w.p50)}`).join('; '),
  );
}

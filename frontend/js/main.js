// The page: wires streams and trace files, the players (reducer + playback) and the views. Events
// are queued as they arrive and applied in batches at the next animation frame; each frame draws
// at most once. A run is one Track per rank: its Player (every event, the state at any point) and
// its TimelineStore. The selected track is shown in the pipeline picture; all of them in the
// timeline, side by side on one clock.

import { stragglers } from './reducer.js';
import { diagnosis } from './diagnosis.js';
import { Track } from './track.js';
import { TimelineStore } from './timeline-store.js';
import { PipelineView } from './pipeline-view.js';
import { TimelineView } from './timeline-view.js';
import { HistogramView } from './histogram-view.js';
import { ServerRun } from './server-run.js';
import { RunForm } from './run-form.js';
import { SweepPanel } from './sweep-view.js';
import { CompareView } from './compare-view.js';
import {
  Counters, Notes, EventLog, renderDiagnosis, workerDetail, stackItems, alarms, structureItems,
} from './panels.js';
import { pinStage } from './pin.js';
import { TraceOpener } from './trace-open.js';
import { ENDED } from './schema.js';
import { RanksView } from './ranks-view.js';
import { fmtDuration } from './timeline-store.js';
import { Scheduler } from './scheduler.js';
import { Playback } from './playback.js';

const $ = (id) => /** @type {HTMLElement} */ (document.getElementById(id));
const APPLY_BUDGET_MS = 8; // per frame; the rest of a large backlog waits for the next frame
const PANEL_MS = 200; // DOM panels refresh at most 5 times a second
const SLOW_PANEL_MS = 400; // histograms, ranks, diagnosis at the playhead
const FINDING_KINDS = new Set(['worker_stuck', 'worker_died', 'consumer_stuck', 'error', 'timeout']);
const MAX_PARK_MARKS = 300; // marks on the time slider for parked results, thinned evenly past this

/** Seconds as a demo pace: 0.15 -> "0.15 s". */
function fmtPace(s) {
  return `${Number(s.toFixed(3))} s`;
}

/**
 * The diagnosis of a run slowed down by the dashboard (`loaderscope demo`, the speed control): the
 * consumer's time per batch is the pace the dashboard adds, not a training step, and is said so.
 */
export function paceDiagnosis(lines, delay) {
  if (!(delay > 0) || !Array.isArray(lines)) return lines;
  const pace = `the dashboard's pace (one batch per ${fmtPace(delay)}, added so that you can follow the run; not a training step)`;
  return lines.map((line) => String(line)
    .replace(/the training step is the bottleneck \(([\d.]+) ms per batch, ([\d.]+) batches\/s\)/,
      (_, ms, rate) => `the training loop is held to ${pace}: ${ms} ms per batch, ${rate} batches/s; loading keeps up with it`)
    .replace(/the step alone would consume/, 'that pace alone would consume'));
}

/** 1536 -> "1.5 kB" */
function fmtBytes(n) {
  if (n < 1e3) return `${n} B`;
  if (n < 1e6) return `${(n / 1e3).toFixed(1)} kB`;
  if (n < 1e9) return `${(n / 1e6).toFixed(1)} MB`;
  return `${(n / 1e9).toFixed(2)} GB`;
}

class App {
  constructor() {
    this.scheduler = new Scheduler();
    this.scheduler.onFrame((wall) => this.frame(wall));
    this.pipeline = new PipelineView($('pipeline'));
    this.counters = new Counters($('counters'));
    this.notes = new Notes($('notes'), $('notes-count'));
    this.log = new EventLog($('event-log'), $('events-count'));
    this.hist = new HistogramView($('hist'));
    this.sweep = new SweepPanel(() => this.runForm.sweepSource());
    this.compare = new CompareView(() => this.tracks);
    this.ranksView = new RanksView($('ranks'), (i) => this.selectTrack(i), () => this.wake());
    this.timeline = new TimelineView($('timeline'), new TimelineStore());
    this.lastPanels = 0;
    this.lastSlowPanels = 0;
    this.lastEventWall = 0;
    this.selectedWorker = null;
    this.perf = { frames: 0, frameMs: [], applied: 0, maxFrameMs: 0, lastFrameMs: 0, longFrames: 0, split: { apply: 0, pipeline: 0, timeline: 0, panels: 0 }, load: null };
    this.runForm = new RunForm({
      started: (id, mode) => {
        this.server.open(id, { autoplay: mode === 'sim' });
        this.server.refreshRuns();
      },
      fieldsChanged: (fields) => this.sweep.fieldsChanged(fields),
    });
    this.playback = new Playback({
      track: () => this.track,
      tracks: () => this.tracks,
      complete: () => this.complete(),
      isLiveRun: () => this.isLiveRun(),
      moved: (snap) => {
        if (snap) this.pipeline.snap();
        this.timeline.invalidate();
        this.wake();
      },
      wake: () => this.wake(),
    });
    this.server = new ServerRun({
      track: () => this.track,
      tracks: () => this.tracks,
      open: (tracks) => this.reset(tracks),
      runTime: () => this.clock(performance.now()).now,
      stopPlaying: () => this.playback.stop(),
      playFromStart: () => this.playback.playFromStart(),
      diagnosisChanged: () => { this.diagKey = ''; this.renderDiagnosisNow(); },
      unknown: (message) => renderDiagnosis($('diagnosis'), [], message),
      statusChanged: () => this.renderStatus(),
      resumed: () => { this.lastEventWall = performance.now(); },
      wake: () => this.wake(),
    });
    this.files = new TraceOpener(this.perf, (o) => this.openFiles(o));
    /** @type {Track[]} */
    this.tracks = [];
    this.track = /** @type {Track} */ (/** @type {unknown} */ (null));
    this.reset();
    this.pipeline.onLaneClick = (wid) => { this.selectedWorker = wid; this.renderWorker(); };
    this.timeline.onInvalidate = () => this.wake();
    this.timeline.onSeek = (t) => this.playback.seekTime(t);
    this.timeline.onSpanClick = (span) => this.inspect(span);
    window.addEventListener('resize', () => { this.hist.invalidate(); this.wake(); });
    window.loaderscope = this; // for scripts and tests: state, perf, timeline, player
  }

  // --- what tests and scripts read ------------------------------------------------------------------

  get state() { return this.track.player.state; }
  get store() { return this.track.store; }
  get player() { return this.track.player; }
  get stream() { return this.track.stream; }
  get queue() { return this.track.queue; }
  get queueHead() { return this.track.queueHead; }
  get eventCount() { return this.track.player.length; }
  get runInfo() { return this.track.runInfo; }
  set runInfo(v) { this.track.runInfo = v; }
  get playing() { return this.playback.playing; }
  get speed() { return this.playback.speed; }
  moveTo(i, pause = true, snap = false) { this.playback.moveTo(i, pause, snap); }
  play() { this.playback.play(); }
  pause() { this.playback.pause(); }
  get runId() { return this.server.runId; }
  get demo() { return this.server.demo; }
  get offline() { return this.server.offline; }
  get unknownRun() { return this.server.unknownRun; }
  openRun(id, o) { this.server.open(id, o); }
  get form() { return this.runForm.form; }

  reset(tracks = null) {
    for (const tr of this.tracks) tr.stream?.close();
    this.tracks = tracks ?? [new Track({ rank: 0, label: 'rank 0', source: 'none' })];
    this.track = this.tracks[0];
    this.playback.stop();
    this.pipeline.invalidate();
    this.selectedWorker = null;
    this.ranksView.reset();
    this.diagKey = '';
    this.hist.invalidate();
    this.notes.render([]);
    $('worker-card').hidden = true;
    $('consumer-card').hidden = true;
    $('inspector-note').textContent = '';
    $('inspector-pick').replaceChildren();
    $('inspector').replaceChildren();
    $('inspector-count').textContent = '';
    $('inspector-card').hidden = true;
    this.inspectorKey = '';
    $('banner').hidden = true;
    $('banner').dataset.key = '';
    this.server.forget();
    this.findingsKey = '';
    $('findings').replaceChildren();
    $('findings-box').hidden = true;
    this.marksKey = '';
    $('pb-marks').replaceChildren();
    $('demo-caption').hidden = true;
    $('demo-caption').dataset.key = '';
    this.timeline.fit();
    this.syncTimelineTracks();
  }

  // --- frames -------------------------------------------------------------------------------------

  wake() {
    this.scheduler.wake();
  }

  /** Is every event of the selected run here (so that play has an end)? */
  complete() {
    const tr = this.track;
    return tr.complete || ENDED.has(tr.player.full.status) || ENDED.has(tr.runInfo?.status);
  }

  /** A real run still going, shown as it happens: the live controls apply. */
  isLiveRun() {
    const tr = this.track;
    const s = tr.player.full;
    return tr.source === 'server' && s.mode === 'real' && !this.complete() && s.status !== 'pending'
      && !this.offline && !this.unknownRun;
  }

  /** Watching the newest events of a live real run (not scrubbed back). */
  isLive() {
    const status = this.runInfo?.status ?? this.state.status;
    return this.isLiveRun() && this.player.following && status !== 'paused';
  }

  /** Run time now: the playhead's time, or the latest event's t ticking on while a real run is live. */
  clock(wall) {
    const p = this.player;
    // the server is gone: nothing ticks on, so healthy workers do not look hung
    if (this.offline) return { now: this.offline.now, wall, live: false };
    if (!p.following || !this.isLiveRun()) {
      const pb = this.playback;
      return { now: pb.playing ? Math.max(p.time, pb.playT) : p.time, wall, live: false };
    }
    const live = this.isLive();
    let now = this.state.t;
    if (live && this.lastEventWall) now += Math.min(60, (wall - this.lastEventWall) / 1000);
    return { now, wall, live };
  }

  /** @param {number} start the frame's wall clock (performance.now()) */
  frame(start) {
    const applied = this.applyQueued(start);
    this.playback.advance(start);
    const wall = performance.now();
    const clock = this.clock(wall);
    const moving = this.pipeline.draw(this.state, clock);
    const t2 = performance.now();
    this.syncTimelineTracks();
    const p = this.player;
    this.timeline.playhead = p.length && (!p.following || !this.isLiveRun()) ? p.time : null;
    this.timeline.draw(clock);
    const t3 = performance.now();
    this.playback.render({ hidden: !!this.demo });
    if (wall - this.lastPanels > PANEL_MS || (applied && this.backlog() === 0 && wall - this.lastPanels > 50)) {
      this.lastPanels = wall;
      this.renderPanels();
    } else this.scheduler.later(PANEL_MS);
    const ms = performance.now() - start;
    const perf = this.perf;
    const split = perf.split;
    split.apply += wall - start;
    split.pipeline += t2 - wall;
    split.timeline += t3 - t2;
    split.panels += start + ms - t3;
    perf.frames += 1;
    perf.lastFrameMs = ms;
    perf.maxFrameMs = Math.max(perf.maxFrameMs, ms);
    if (ms > 16) perf.longFrames += 1;
    perf.frameMs.push(ms);
    if (perf.frameMs.length > 240) perf.frameMs.shift();
    return this.backlog() > 0 || moving || clock.live || this.playback.playing;
  }

  backlog() {
    let n = 0;
    for (const tr of this.tracks) n += tr.queue.length - tr.queueHead;
    return n;
  }

  applyQueued(start) {
    let n = 0;
    const tBefore = this.track.player.full.t;
    for (const tr of this.tracks) {
      const q = tr.queue;
      let i = tr.queueHead;
      const end = q.length;
      while (i < end) {
        const stop = Math.min(end, i + 512);
        for (; i < stop; i++) tr.ingest(q[i]);
        if (performance.now() - start > APPLY_BUDGET_MS) break;
      }
      n += i - tr.queueHead;
      if (i >= end) {
        tr.queue = [];
        tr.queueHead = 0;
      } else tr.queueHead = i;
      if (performance.now() - start > APPLY_BUDGET_MS) break;
    }
    if (!n) return 0;
    this.perf.applied += n;
    if (this.track.player.full.t !== tBefore) this.lastEventWall = performance.now();
    return n;
  }

  // --- panels ---------------------------------------------------------------------------------------

  renderPanels() {
    const state = this.state;
    const p = this.player;
    this.counters.render(state, this.store, p.cursor);
    const notes = this.track.noteItems;
    let k = notes.length;
    while (k > 0 && notes[k - 1]._row > p.cursor) k -= 1;
    this.notes.render(k === notes.length ? notes : notes.slice(0, k));
    this.log.render((i) => p.event(i), p.cursor, p.length);
    this.renderStatus();
    this.renderAlarms();
    this.renderWorker();
    this.renderConsumer();
    this.renderInspector();
    this.renderFindings();
    this.renderMarks();
    const wall = performance.now();
    if (wall - this.lastSlowPanels > SLOW_PANEL_MS) {
      this.lastSlowPanels = wall;
      this.renderSlowPanels();
    } else this.scheduler.later(SLOW_PANEL_MS);
    const fm = this.perf.frameMs;
    if (fm.length) {
      const avg = fm.reduce((a, b) => a + b, 0) / fm.length;
      $('perf').textContent = `frame ${avg.toFixed(1)} ms avg · ${Math.max(...fm).toFixed(1)} max · ${this.timeline.mode}`;
    }
  }

  /** Histograms, ranks and the diagnosis at the playhead: heavier, a few times a second. */
  renderSlowPanels() {
    const state = this.state;
    const slow = new Set(stragglers(state).map((s) => s.worker));
    const anyFetch = [...state.workers.values()].some((w) => w.fetch_times.length);
    $('hist-wrap').hidden = !anyFetch;
    if (anyFetch) this.hist.draw(state, slow, state.config.num_workers === 0);
    this.renderRanks();
    this.renderDiagnosisNow();
  }

  renderDiagnosisNow() {
    const p = this.player;
    const scope = $('diagnosis-scope');
    if (this.track.source === 'server' && this.server.serverDiagnosis && (p.following || p.cursor === p.length)) {
      renderDiagnosis($('diagnosis'), paceDiagnosis(this.server.serverDiagnosis, this.pace()), 'no findings yet');
      scope.textContent = this.complete() ? '(whole run)' : '(live)';
      return;
    }
    if (!p.length) return;
    const key = `${this.track.rank}:${p.cursor}:${p.length}`;
    if (key === this.diagKey) return;
    this.diagKey = key;
    renderDiagnosis($('diagnosis'), paceDiagnosis(diagnosis(this.state), this.pace()), 'no findings yet');
    scope.textContent = p.cursor === p.length ? (this.complete() ? '(whole run)' : '(so far)') : `(at event ${p.cursor})`;
  }

  renderWorker() {
    const card = $('worker-card');
    const w = this.selectedWorker === null ? undefined : this.state.workers.get(this.selectedWorker);
    if (!w) { card.hidden = true; return; }
    card.hidden = false;
    card.dataset.status = w.status;
    const title = this.state.config.num_workers === 0 ? 'main process' : `worker ${this.selectedWorker}`;
    $('worker-title').textContent = this.tracks.length > 1 ? `${this.track.label} · ${title}` : title;
    const text = workerDetail(this.state, this.selectedWorker, this.clock(performance.now()).now);
    if ($('worker-detail').textContent !== text) $('worker-detail').textContent = text;
    const stuck = w.stuck;
    const list = $('worker-stack');
    const key = stuck ? `${stuck.seq}:${stuck.t}` : '';
    if (list.dataset.seq !== key) {
      list.dataset.seq = key;
      list.replaceChildren(...stackItems(stuck?.stack ?? null));
      list.hidden = !stuck?.stack;
      const head = $('stack-head');
      head.hidden = !stuck?.stack;
      head.textContent = stuck ? `its Python stack, read from the live worker (pid ${stuck.pid ?? w.pid ?? '?'}) ${fmtDuration(stuck.elapsed)} into the fetch; outermost call first, your code highlighted:` : '';
      const here = /** @type {HTMLElement|null} */ (list.querySelector('.here'));
      if (here) list.scrollTop = Math.max(0, here.offsetTop - list.offsetTop - list.clientHeight / 2);
    }
  }

  renderConsumer() {
    const c = this.state.consumer_stuck;
    const card = $('consumer-card');
    card.hidden = !c;
    if (!c) return;
    const now = this.clock(performance.now()).now;
    const waited = +c.elapsed + (this.state.status === 'running' ? Math.max(0, now - c.t) : 0);
    const lines = [
      `waiting ${waited.toFixed(1)} s for task ${c.waiting_for ?? '?'}`,
      c.held_by !== undefined && c.held_by !== null ? `held by worker ${c.held_by}${c.has_data ? ' (its result is ready)' : ' (still fetching it)'}` : '',
      `reported stuck after ${(+(c.threshold ?? 0)).toFixed(1)} s`,
    ].filter(Boolean);
    const text = lines.join('\n');
    if ($('consumer-detail').textContent !== text) $('consumer-detail').textContent = text;
    const list = $('consumer-stack');
    const key = `${c.seq}:${c.t}`;
    if (list.dataset.seq !== key) {
      list.dataset.seq = key;
      list.replaceChildren(...stackItems(c.stack ?? null));
    }
  }

  /** A fetch span was clicked: its batch in the inspector when the probe described it, else say so. */
  inspect({ idx, epoch, worker }) {
    const samples = this.player.full.batch_samples;
    const k = samples.findIndex((b) => b.idx === idx && b.epoch === epoch);
    const note = $('inspector-note');
    if (k >= 0) {
      /** @type {HTMLSelectElement} */ ($('inspector-pick')).value = String(k);
      note.textContent = '';
      this.inspectorKey = '';
    } else {
      note.textContent = `task ${idx} (worker ${worker}, epoch ${epoch}) was not among the batches the probe described; `
        + (samples.length ? 'pick one of those above' : 'this run has no batch descriptions (the simulator and older traces have none)');
    }
    $('inspector-card').hidden = false;
    this.selectedWorker = this.tracks.length > 1 ? this.selectedWorker : worker;
    this.renderInspector();
    $('inspector-card').scrollIntoView({ block: 'nearest' });
  }

  renderInspector() {
    const samples = this.player.full.batch_samples;
    const card = $('inspector-card');
    const full = this.player.full;
    $('btn-values').hidden = !(this.runId && full.mode === 'real' && full.status === 'running');
    if (!samples.length) {
      card.hidden = !$('inspector-note').textContent;
      $('inspector-pick').hidden = true;
      return;
    }
    card.hidden = false;
    $('inspector-pick').hidden = false;
    const pick = /** @type {HTMLSelectElement} */ ($('inspector-pick'));
    if (pick.options.length !== samples.length) {
      const chosen = pick.value;
      pick.replaceChildren(...samples.map((b, i) => new Option(
        `batch ${b.idx} · worker ${b.worker} · epoch ${b.epoch}${b.pickle_bytes ? ` · ${b.pickle_bytes} B pickled` : ''}`
        + (b.values ? ' · with values' : ''), String(i))));
      pick.value = chosen || '0';
      $('inspector-count').textContent = `(${samples.length} sampled)`;
      this.inspectorKey = '';
    }
    const b = samples[Number(pick.value) || 0];
    const key = `${pick.value}:${samples.length}`;
    if (this.inspectorKey === key || !b) return;
    this.inspectorKey = key;
    const ul = document.createElement('ul');
    ul.className = 'tree';
    ul.append(structureItems(b.structure));
    const facts = [];
    if (full.fetched_bytes) {
      facts.push(`the run so far: ${fmtBytes(full.fetched_bytes)} fetched, ${fmtBytes(full.pickled_bytes)} of it pickled `
        + `(${((full.pickled_bytes / full.fetched_bytes) * 100).toFixed(0)}%; tensors travel through shared memory instead)`);
    }
    if (b.pickle_bytes !== undefined) {
      facts.push(`this batch pickles to ${fmtBytes(b.pickle_bytes)}${b.pickle_s != null ? ` in ${fmtDuration(b.pickle_s)}` : ''}`
        + ' (for tensors only the handles of their shared memory)');
    }
    const p = document.createElement('p');
    p.className = 'desc';
    p.textContent = facts.join('; ') || 'structure as collated in the worker';
    $('inspector').replaceChildren(p, ul);
  }

  renderAlarms() {
    const items = alarms(this.state, this.clock(performance.now()).now);
    const banner = $('banner');
    const key = items.map((a) => a.text).join('|');
    if (banner.dataset.key === key) return;
    banner.dataset.key = key;
    banner.hidden = !items.length;
    banner.replaceChildren(...items.map((a) => {
      const div = document.createElement('div');
      div.textContent = a.text;
      if (a.worker !== null) {
        div.className = 'alarm-link';
        div.addEventListener('click', () => { this.selectedWorker = a.worker; this.renderWorker(); });
      }
      return div;
    }));
    // a stuck or dead worker opens its own card, so its stack is on screen without a click
    const first = items.find((a) => a.worker !== null);
    const current = this.selectedWorker === null ? undefined : this.state.workers.get(this.selectedWorker);
    if (first && (!current || (current.status !== 'stuck' && current.status !== 'died'))) this.selectedWorker = first.worker;
  }

  renderStatus() {
    const tr = this.track;
    const lost = tr.runInfo?.dropped ?? 0;
    const lostEl = $('lost');
    if (lostEl.dataset.n !== String(lost)) {
      lostEl.dataset.n = String(lost);
      lostEl.hidden = !lost;
      lostEl.textContent = `⚠ ${lost} events lost`;
      lostEl.title = `${lost} events were dropped by the producer (a watch()ed script whose buffer to the dashboard was full) `
        + 'before they reached the dashboard; the picture and the statistics miss them';
    }
    const el = $('run-status');
    const full = tr.player.full;
    let status = tr.runInfo?.status ?? (tr.source !== 'none' ? full.status : 'no run');
    if (full.status !== 'running' && full.status !== 'pending') status = full.status; // run_end wins
    if (tr.source === 'file') status = full.status === 'running' ? 'incomplete' : full.status;
    if (this.unknownRun) status = 'unknown';
    else if (this.offline && !ENDED.has(status)) status = 'disconnected';
    document.body.classList.toggle('offline', !!this.offline);
    if (el.textContent !== status) {
      el.textContent = status;
      el.dataset.status = status;
    }
    $('pipeline-empty').hidden = tr.source !== 'none';
    const realLive = tr.source === 'server' && (full.mode === 'real' || full.mode === '') && !ENDED.has(status)
      && !this.offline && !this.unknownRun;
    // a logdir file's producer takes no controls from here (the server answers 409)
    $('live-controls').hidden = !(tr.source === 'server' && full.mode !== 'sim' && full.mode !== 'replay')
      || tr.runInfo?.origin === 'logdir' || !!this.demo;
    const off = !realLive || !!this.demo;
    const paused = status === 'paused';
    const set = (id, disabled) => { /** @type {HTMLButtonElement} */ ($(id)).disabled = disabled; };
    set('btn-pause', off || paused);
    set('btn-resume', off || !paused);
    set('btn-step', off);
    set('btn-stop', off);
    set('speed', off);
    const c = full.config;
    const name = full.scenario || tr.runInfo?.scenario || full.meta.name || '';
    const source = tr.source === 'file' ? `${tr.label}` : '';
    const title = tr.source !== 'none' ? [source, name, full.mode || tr.runInfo?.mode || '',
      c.num_workers !== undefined ? `${c.num_workers} workers · batch ${c.batch_size} · prefetch ${c.prefetch_factor ?? '–'}${c.in_order === false ? ' · in_order=False' : ''}${c.pin_memory ? ' · pin_memory' : ''}` : '',
      this.tracks.length > 1 ? `${this.tracks.length} ranks` : ''].filter(Boolean).join(' · ') : '';
    if ($('run-title').textContent !== title) {
      $('run-title').textContent = title;
      $('run-title').title = title; // the whole of it when the bar is too narrow
    }
    this.renderPace();
  }

  /** The dashboard's own slowing-down (the demo's --delay, the speed control), said for what it is. */
  pace() {
    const tr = this.track;
    const d = Number(tr.runInfo?.delay ?? 0);
    return tr.source === 'server' && tr.player.full.mode !== 'sim' && d > 0 ? d : 0;
  }

  renderPace() {
    const d = this.pace();
    const el = $('pace');
    const text = d ? `demo pace: one batch per ${fmtPace(d)}` : '';
    if (el.textContent !== text) {
      el.textContent = text;
      el.hidden = !d;
      el.title = d ? `the dashboard holds the training loop ${fmtPace(d)} per batch so that a person can follow the run; `
        + 'it is not your training step and the diagnosis does not count it as one' : '';
    }
    const speed = /** @type {HTMLSelectElement} */ ($('speed'));
    const want = String(d);
    if (speed.value !== want && document.activeElement !== speed) {
      if (![...speed.options].some((o) => o.value === want)) speed.append(new Option(`${fmtPace(d)}/batch (demo)`, want));
      speed.value = want;
    }
    this.renderCaption(d);
  }

  /** The demo says in one line what to watch, and jumps to the first parked result on request. */
  renderCaption(d) {
    const box = $('demo-caption');
    const full = this.track.player.full;
    const show = d > 0 && full.scenario === 'out_of_order';
    const key = show ? `${d}` : '';
    if (box.dataset.key === key) return;
    box.dataset.key = key;
    box.hidden = !show;
    if (!show) return;
    const text = document.createElement('span');
    text.textContent = 'Watch the reorder buffer: every few batches one task is held up, later tasks overtake it, and their '
      + 'results wait there (amber) until rcvd_idx reaches it. It keeps happening all run long.';
    const go = document.createElement('button');
    go.type = 'button';
    go.id = 'btn-first-parked';
    go.textContent = 'pause at the first parked result';
    go.addEventListener('click', () => {
      const row = this.track.parkedRows[0];
      if (row === undefined) return;
      this.moveTo(row, true, true);
    });
    box.replaceChildren(text, go);
  }

  /** Findings of the whole run (not cut at the playhead): each seeks to its moment and opens its worker. */
  renderFindings() {
    const tr = this.track;
    const items = tr.noteItems.filter((n) => FINDING_KINDS.has(n.kind));
    const key = `${tr.rank}:${items.length}`;
    if (this.findingsKey === key) return;
    this.findingsKey = key;
    $('findings-box').hidden = !items.length;
    $('findings').replaceChildren(...items.map((n) => {
      const li = document.createElement('li');
      const b = document.createElement('button');
      b.type = 'button';
      b.dataset.kind = n.kind;
      if (n.worker !== undefined && n.worker !== null) b.dataset.worker = String(n.worker);
      const who = n.worker !== undefined && n.worker !== null ? `worker ${n.worker}` : 'the training loop';
      const what = n.kind === 'worker_stuck' ? `${who} stuck on task ${n.idx ?? '?'}`
        : n.kind === 'worker_died' ? `${who} died${n.signal ? ` (${n.signal})` : n.exitcode != null ? ` (exit ${n.exitcode})` : ''}${n.idx != null ? ` on task ${n.idx}` : ''}`
          : n.kind === 'consumer_stuck' ? `training loop stuck in next(), waiting for task ${n.waiting_for ?? '?'}`
            : n.kind === 'timeout' ? `timeout= expired after ${n.seconds ?? '?'} s`
              : `error${n.worker != null ? ` in ${who}` : ''}${n.idx != null ? ` on task ${n.idx}` : ''}`;
      b.textContent = `▶ ${fmtDuration(n.t ?? 0)} · ${what}`;
      b.title = 'go to this moment and show the worker, its task and its stack';
      b.addEventListener('click', () => this.showFinding(n));
      li.append(b);
      return li;
    }));
  }

  showFinding(n) {
    this.moveTo(n._row, true, true);
    if (n.worker !== undefined && n.worker !== null) this.selectedWorker = n.worker;
    this.lastPanels = 0;
    this.renderPanels();
    const card = n.kind === 'consumer_stuck' ? $('consumer-card') : $('worker-card');
    if (!card.hidden) card.scrollIntoView({ block: 'nearest' });
  }

  /** Marks on the time slider: stuck, died, error, timeout, and where results were parked. */
  renderMarks() {
    const p = this.player;
    const tr = this.track;
    if (!p.length) return;
    const t0 = p.table.t[0], t1 = p.table.t[p.length - 1];
    const found = tr.noteItems.filter((n) => FINDING_KINDS.has(n.kind));
    const key = `${tr.rank}:${found.length}:${tr.parked.length}:${Math.round((t1 - t0) * 20)}`;
    if (this.marksKey === key) return;
    this.marksKey = key;
    const span = Math.max(t1 - t0, 1e-9);
    const mark = (t, cls, title) => {
      const i = document.createElement('i');
      i.className = cls;
      i.style.left = `${(Math.min(1, Math.max(0, (t - t0) / span)) * 100).toFixed(2)}%`;
      i.title = title;
      return i;
    };
    const parked = tr.parked;
    const every = Math.max(1, Math.ceil(parked.length / MAX_PARK_MARKS));
    const marks = [];
    for (let k = 0; k < parked.length; k += every) marks.push(mark(parked[k], 'parked', 'a result parked in the reorder buffer'));
    for (const n of found) {
      const cls = n.kind === 'worker_died' ? 'died' : n.kind === 'timeout' ? 'timeout' : n.kind === 'error' ? 'error' : 'stuck';
      marks.push(mark(n.t ?? t0, cls, n.kind));
    }
    $('pb-marks').replaceChildren(...marks);
    $('pb-marks').dataset.parked = String(parked.length);
    $('pb-marks').dataset.alarms = String(found.length);
  }

  // --- ranks ----------------------------------------------------------------------------------------

  syncTimelineTracks() {
    const primary = this.track;
    const base = primary.wall0;
    const multi = this.tracks.length > 1;
    const want = this.tracks.map((tr) => ({
      store: tr.store,
      label: multi ? `rank ${tr.rank}${tr.source === 'file' ? ` · ${tr.label}` : ''}` : '',
      offset: multi && base && tr.wall0 ? tr.wall0 - base : 0,
      inProcess: tr.player.full.config.num_workers === 0,
      pin: pinStage(tr.player.full),
      slow: multi ? tr.slow : undefined,
      primary: tr === primary,
    }));
    for (const tr of this.tracks) tr.offset = want[this.tracks.indexOf(tr)].offset;
    this.timeline.tracks = want;
  }

  selectTrack(i) {
    if (!this.tracks[i] || this.tracks[i] === this.track) return;
    this.track = this.tracks[i];
    this.pipeline.invalidate();
    this.selectedWorker = null;
    this.diagKey = '';
    this.hist.invalidate();
    this.notes.render([]);
    this.timeline.invalidate();
    this.lastPanels = 0;
    this.lastSlowPanels = 0;
    this.ranksView.invalidate();
    this.wake();
  }

  renderRanks() {
    this.ranksView.render(this.tracks, this.track);
  }

  /** @param {import('./trace-open.js').Opened} o trace files read: they replace the open run */
  openFiles({ tracks, files, events, ms }) {
    this.reset(tracks);
    this.server.close();
    $('connection').textContent = `${files > 1 ? `${tracks.length} files` : tracks[0].label} · ${events.toLocaleString('en')} events · read in ${(ms / 1000).toFixed(1)} s`;
    $('connection').dataset.state = 'file';
    this.wake();
  }

  bindControls() {
    this.runForm.bind();
    this.server.bind();
    $('btn-values').addEventListener('click', () => {
      $('inspector-note').textContent = 'asked: the next batch of each worker will be listed here with its values';
      this.server.control({ action: 'inspect' });
    });
    $('btn-fit').addEventListener('click', () => this.timeline.fit());
    this.playback.bind();
    $('inspector-pick').addEventListener('change', () => { $('inspector-note').textContent = ''; this.renderInspector(); });
    this.files.bind();
  }

  /** `/?demo=synth&workers=8&rate=2000`: feed synthetic events, no server needed (development, measurements). */
  async startDemo(params) {
    this.server.demo = true;
    let synthesize;
    try {
      ({ synthesize } = await import('../dev/synth.js'));
    } catch {
      // frontend/dev is a development tool and stays out of the wheel
      $('connection').textContent = '?demo=synth needs a source checkout (frontend/dev is not installed)';
      return;
    }
    const workers = Number(params.get('workers') ?? 4);
    const rate = Number(params.get('rate') ?? 0); // events per second; 0 = follow the virtual clock
    const batches = Number(params.get('batches') ?? 400);
    const events = synthesize({ num_workers: workers, batches, prefetch_factor: Number(params.get('prefetch') ?? 2), step: Number(params.get('step') ?? 0.004), pin_ms: Number(params.get('pin') ?? 0), cost: (idx) => (0.02 + 0.03 * ((workers - (idx % workers)) / workers)) * Number(params.get('slow') ?? 1) });
    this.reset([new Track({ rank: 0, label: 'demo', source: 'demo' })]);
    this.server.runId = 'demo';
    renderDiagnosis($('diagnosis'), [], 'offline demo: the diagnosis comes from the server');
    $('connection').textContent = `demo · ${events.length} events`;
    let i = 0;
    const t0 = performance.now();
    const pump = () => {
      const elapsed = (performance.now() - t0) / 1000;
      const until = rate ? Math.floor(elapsed * rate) : events.findIndex((e) => e.t > elapsed);
      const stop = until < 0 ? events.length : Math.min(events.length, until);
      if (stop > i) {
        const q = this.track.queue;
        for (let k = i; k < stop; k++) q.push(events[k]);
        i = stop;
        this.wake();
      }
      if (i < events.length) setTimeout(pump, 8);
    };
    pump();
  }

  async init() {
    this.bindControls();
    const params = new URL(location.href).searchParams;
    if (params.get('demo')) {
      this.startDemo(params);
      return;
    }
    this.runForm.load();
    this.server.refreshRuns();
    const id = params.get('run');
    if (id) this.server.open(id, { push: false });
    else renderDiagnosis($('diagnosis'), [], 'start a run, pick one above, or drop a trace file on the page');
    this.renderStatus();
    this.wake(); // draw the empty picture: the parts are named before any run starts
  }
}

new App().init();


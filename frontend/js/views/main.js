// The page: wires streams and trace files, the players (reducer + playback) and the views. Events
// are queued as they arrive and applied in batches at the next animation frame; each frame draws
// at most once. A run is one Track per rank: its Player (every event, the state at any point) and
// its TimelineStore. The selected track is shown in the pipeline picture; in the timeline, side by
// side on one clock, every rank of a small job, or the selected and the slowest rank of a large one.

import { Track } from '../model/track.js';
import { TimelineStore } from '../model/timeline-store.js';
import { PipelineView } from './pipeline-view.js';
import { TimelineView } from './timeline-view.js';
import { HistogramView } from './histogram-view.js';
import { ServerRun } from './server-run.js';
import { RunForm } from './run-form.js';
import { SweepPanel } from './sweep-view.js';
import { CompareView } from './compare-view.js';
import { Counters, Notes, EventLog, renderDiagnosis } from './panels.js';
import { MemoryCard } from './memory-view.js';
import { WorkerCards } from './worker-cards.js';
import { InspectorView } from './inspector-view.js';
import { StatusBar } from './status-bar.js';
import { FindingsView, findingsOf } from './findings-view.js';

import { TraceOpener } from './trace-open.js';
import { ENDED } from '../model/schema.js';
import { RanksView } from './ranks-view.js';
import { Scheduler } from './scheduler.js';
import { Playback } from './playback.js';
import { ThemeSwitch } from './theme.js';
import { UrlWriter } from './url-writer.js';
import { Keys } from './keys.js';
import { SearchView } from './search-view.js';
import { RangeView } from './range-view.js';
import { NarrowLayout } from './narrow.js';
import { applyView, goTo, highlight, restorePlayhead, searchable, urlHolds, viewParams } from './app-view.js';
import { startDemo } from './app-demo.js';
import { renderDiagnosisNow, renderPanels } from './app-panels.js';
import { selectRun, selectTrack, syncTimelineTracks } from './app-ranks.js';

const $ = (/** @type {string} */ id) => /** @type {HTMLElement} */ (document.getElementById(id));
const APPLY_BUDGET_MS = 8; // per frame; the rest of a large backlog waits for the next frame
const PANEL_MS = 200; // DOM panels refresh at most 5 times a second
const PACED_MS = 250; // the longest a paced view (timeline, the picture's words) waits for its redraw

/**
 * The page's frame measurements (`window.loaderscope.perf`; tests and bench read them): frames,
 * their times (the last 240), events applied, time split by part, and the last file load.
 * @typedef {{frames: number, frameMs: number[], applied: number, maxFrameMs: number, lastFrameMs: number,
 *   longFrames: number, split: {apply: number, pipeline: number, timeline: number, panels: number},
 *   load: import('./trace-open.js').LoadPerf|null}} Perf
 */

export class App {
  constructor() {
    this.scheduler = new Scheduler();
    this.scheduler.onFrame((wall) => this.frame(wall));
    this.pipeline = new PipelineView($('pipeline'));
    this.counters = new Counters($('counters'));
    this.memory = new MemoryCard($('memory-card'), $('memory'));
    this.notes = new Notes($('notes'), $('notes-count'));
    this.log = new EventLog($('event-log'), $('events-count'));
    this.hist = new HistogramView($('hist'));
    this.sweep = new SweepPanel(
      () => this.runForm.sweepSource(),
      () => this.realRun(),
    );
    this.compare = new CompareView(
      () => this.tracks,
      () => this.runId,
      () => this.wake(),
    );
    this.ranksView = new RanksView(
      $('ranks'),
      (i) => selectTrack(this, i),
      () => this.wake(),
      (row) => this.server.openRow(row),
    );
    this.timeline = new TimelineView($('timeline'), new TimelineStore());
    this.lastPanels = 0;
    this.lastSlowPanels = 0;
    this.lastEventWall = 0;
    this.applyFrom = 0; // the rank applyQueued starts at (it moves on every frame)
    this.timelineKey = ''; // the timeline's rows as last given (syncTimelineTracks)
    /** @type {unknown[]} the stores and slow-step lists of those rows */
    this.timelineObjects = [];
    this.cards = new WorkerCards({
      state: () => this.state,
      now: () => this.clock(performance.now()).now,
      rankLabel: () => (this.tracks.length > 1 ? this.track.label : ''),
      verdict: () =>
        this.player.full.mode === 'doctor'
          ? (this.track.noteItems.findLast((n) => n.kind === 'doctor_verdict') ?? null)
          : null,
      past: () => (this.complete() && this.player.cursor === this.player.length ? findingsOf(this.track) : []),
      show: (n) => this.showFinding(n),
    });
    this.inspector = new InspectorView({
      full: () => this.player.full,
      onServer: () => !!this.runId,
      askValues: () => this.server.control({ action: 'inspect' }),
    });
    this.status = new StatusBar({
      track: () => this.track,
      ranks: () => this.tracks.length,
      server: () => this.server,
      moveTo: (row) => this.playback.moveTo(row, true, true),
    });
    this.findings = new FindingsView((n) => this.showFinding(n));
    this.theme = new ThemeSwitch(() => this.themeChanged());
    this.url = new UrlWriter(
      () => viewParams(this),
      (v) => urlHolds(this, v),
    );
    this.urlKey = ''; // the view last written to (or read from) the URL, the playhead aside
    this.urlAt = -1; // the playhead last written
    this.pushNext = false; // the next URL write is a new history entry (a jump, not a step)
    /** @type {number|null} a playhead from the URL, applied once that many events are here */
    this.pendingAt = null;
    /** @type {[number, number]|null} the selected batch: [epoch, task] (a clicked span, a search hit) */
    this.selectedBatch = null;
    /** @type {import('../model/search.js').Hit[]} */
    this.searchHits = [];
    /** @type {Set<number>} workers a search found: their lanes are marked */
    this.hitWorkers = new Set();
    this.searchedAt = -1; // events there were when the search last ran
    this.searchView = new SearchView({
      run: () => searchable(this),
      highlight: (hits) => highlight(this, hits),
      go: (hit) => goTo(this, hit),
    });
    this.rangeView = new RangeView({
      zoom: () => {
        if (this.timeline.selection) this.timeline.setView(this.timeline.selection);
      },
      clear: () => this.timeline.select(null),
    });
    this.narrow = new NarrowLayout();
    /** @type {Perf} */
    this.perf = {
      frames: 0,
      frameMs: [],
      applied: 0,
      maxFrameMs: 0,
      lastFrameMs: 0,
      longFrames: 0,
      split: { apply: 0, pipeline: 0, timeline: 0, panels: 0 },
      load: null,
    };
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
      complete: () => this.allShown(),
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
      diagnosisChanged: () => {
        this.diagKey = '';
        renderDiagnosisNow(this);
      },
      unknown: (message) => renderDiagnosis($('diagnosis'), [], message),
      statusChanged: () => {
        this.status.render();
        this.sweep.runChanged();
      },
      resumed: () => {
        this.lastEventWall = performance.now();
      },
      wake: () => this.wake(),
      selectRun: (id, push) => selectRun(this, id, push),
      jobTable: (answer, runId) => this.ranksView.showJob(answer, runId),
    });
    this.files = new TraceOpener(this.perf, (o) => this.openFiles(o));
    /** @type {Track[]} */
    this.tracks = [];
    this.track = /** @type {Track} */ (/** @type {unknown} */ (null));
    this.diagKey = ''; // the diagnosis drawn last: rank, cursor, events
    this.reset();
    this.pipeline.onLaneClick = (wid) => {
      this.cards.select(wid);
      this.lastPanels = 0;
      this.wake();
    };
    this.timeline.onInvalidate = () => this.wake();
    this.pipeline.onInvalidate = () => this.wake();
    this.timeline.onSeek = (t) => this.playback.seekTime(t);
    this.timeline.onSpanClick = (span) => {
      if (this.tracks.length === 1) this.cards.selected = span.worker;
      if (span.track === this.timeline.primary) this.selectedBatch = [span.epoch, span.idx];
      this.inspector.inspect(span);
      this.wake();
    };
    this.timeline.onSelect = () => {
      this.lastPanels = 0;
      this.wake();
    };
    this.keys = new Keys({
      timeline: this.timeline,
      focusSearch: () => this.searchView.focus(),
      seekTime: (t) => {
        this.pushNext = true;
        this.playback.seekTime(t);
      },
      clearSelection: () => this.timeline.select(null),
    });
    window.addEventListener('resize', () => {
      this.hist.invalidate();
      this.wake();
    });
    Object.assign(window, { loaderscope: this }); // for scripts and tests: state, perf, timeline, player
  }

  // --- what tests and scripts read ------------------------------------------------------------------

  get state() {
    return this.track.player.state;
  }
  get store() {
    return this.track.store;
  }
  get player() {
    return this.track.player;
  }
  get stream() {
    return this.track.stream;
  }
  get queue() {
    return this.track.queue;
  }
  get queueHead() {
    return this.track.queueHead;
  }
  get eventCount() {
    return this.track.player.length;
  }
  get runInfo() {
    return this.track.runInfo;
  }
  set runInfo(v) {
    this.track.runInfo = v;
  }
  get playing() {
    return this.playback.playing;
  }
  get speed() {
    return this.playback.speed;
  }
  /** @param {number} i @param {boolean} [pause] @param {boolean} [snap] */
  moveTo(i, pause = true, snap = false) {
    this.playback.moveTo(i, pause, snap);
  }
  play() {
    this.playback.play();
  }
  pause() {
    this.playback.pause();
  }
  get runId() {
    return this.server.runId;
  }

  /** The open run when it is a real loader's with fetches to fit (what-if replays it), else null. */
  realRun() {
    const info = this.track?.runInfo;
    if (!this.runId || !info || info.mode !== 'real' || !((info.batches ?? 0) > 0)) return null;
    return {
      id: this.runId,
      label: info.name || info.scenario || this.runId,
      ended: ENDED.has(info.status),
      config: info.config ?? {},
    };
  }
  get demo() {
    return this.server.demo;
  }
  get offline() {
    return this.server.offline;
  }
  get unknownRun() {
    return this.server.unknownRun;
  }
  /** @param {string} id @param {{push?: boolean, autoplay?: boolean}} [o] */
  openRun(id, o) {
    this.server.open(id, o);
  }
  get form() {
    return this.runForm.form;
  }
  get selectedWorker() {
    return this.cards.selected;
  }

  /** @param {Track[]|null} [tracks] the open run's ranks (none: an empty page) */
  reset(tracks = null) {
    for (const tr of this.tracks) tr.stream?.close();
    this.tracks = tracks ?? [new Track({ rank: 0, label: 'rank 0', source: 'none' })];
    this.track = this.tracks[0];
    this.playback.stop();
    this.pipeline.invalidate();
    this.cards.reset();
    this.ranksView.reset();
    this.diagKey = '';
    this.hist.invalidate();
    this.notes.render([]);
    this.inspector.reset();
    this.server.forget();
    this.findings.reset();
    this.status.reset();
    this.timeline.fit();
    this.timeline.select(null, false);
    this.selectedBatch = null;
    this.pendingAt = null;
    this.searchView.clear();
    syncTimelineTracks(this);
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

  /**
   * Every event of the selected rank is here and applied, so playback may stop at the last one. A
   * server run's status says it ended as soon as it does, while its events may still be on the way or
   * waiting to be applied (a simulated run ends before the page shows its first events): only the
   * stream's end says all were sent.
   */
  allShown() {
    const tr = this.track;
    return (tr.source === 'server' ? tr.complete : this.complete()) && tr.queue.length === tr.queueHead;
  }

  /** A real run still going, shown as it happens: the live controls apply. */
  isLiveRun() {
    const tr = this.track;
    const s = tr.player.full;
    return (
      tr.source === 'server' &&
      s.mode === 'real' &&
      !this.complete() &&
      s.status !== 'pending' &&
      !this.offline &&
      !this.unknownRun
    );
  }

  /** Watching the newest events of a live real run (not scrubbed back). */
  isLive() {
    const status = this.runInfo?.status ?? this.state.status;
    return this.isLiveRun() && this.player.following && status !== 'paused';
  }

  /**
   * Following a server run whose events still come, real or simulated: the heavy views are paced
   * (drawn a few times a second), so that the main thread keeps time to read the socket.
   */
  isFollowingStream() {
    const tr = this.track;
    return tr.source === 'server' && tr.player.following && !this.complete() && !this.offline && !this.unknownRun;
  }

  /**
   * Run time now: the playhead's time, or the latest event's t ticking on while a real run is live;
   * `paced`: isFollowingStream().
   * @param {number} wall performance.now()
   * @returns {{now: number, wall: number, live: boolean, paced: boolean}}
   */
  clock(wall) {
    const p = this.player;
    // the server is gone: nothing ticks on, so healthy workers do not look hung
    if (this.offline) return { now: this.offline.now, wall, live: false, paced: false };
    const paced = this.isFollowingStream();
    if (!p.following || !this.isLiveRun()) {
      const pb = this.playback;
      return { now: pb.playing ? Math.max(p.time, pb.playT) : p.time, wall, live: false, paced };
    }
    const live = this.isLive();
    let now = p.time; // the run's clock: the latest t yet, never a late worker event's earlier one
    if (live && this.lastEventWall) now += Math.min(60, (wall - this.lastEventWall) / 1000);
    return { now, wall, live, paced };
  }

  /** @param {number} start the frame's wall clock (performance.now()) */
  frame(start) {
    const applied = this.applyQueued(start);
    restorePlayhead(this);
    this.playback.advance(start);
    const wall = performance.now();
    const clock = this.clock(wall);
    const moving = this.pipeline.draw(this.state, clock);
    const t2 = performance.now();
    syncTimelineTracks(this);
    const p = this.player;
    this.timeline.playhead = p.length && (!p.following || !this.isLiveRun()) ? p.time : null;
    this.timeline.draw(clock);
    // a paced view left for later still shows the newest events once its turn comes
    if (this.timeline.deferred || this.pipeline.overlayDeferred) this.scheduler.later(PACED_MS);
    const t3 = performance.now();
    this.playback.render({ hidden: !!this.demo });
    if (wall - this.lastPanels > PANEL_MS || (applied && this.backlog() === 0 && wall - this.lastPanels > 50)) {
      this.lastPanels = wall;
      renderPanels(this);
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

  /**
   * Apply the queued events of every rank, for at most APPLY_BUDGET_MS.
   * @param {number} start the frame's wall clock
   */
  applyQueued(start) {
    let n = 0;
    const tBefore = this.track.player.full.t;
    // when the budget runs out, the next frame starts at the next rank: no rank waits behind the others
    const tracks = this.tracks;
    this.applyFrom = (this.applyFrom + 1) % tracks.length;
    for (let k = 0; k < tracks.length; k++) {
      const tr = tracks[(this.applyFrom + k) % tracks.length];
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

  /**
   * A finding was clicked: go to its moment, open its worker's card and bring it into view.
   * @param {import('../model/types.js').Note} n
   */
  showFinding(n) {
    this.playback.moveTo(n._row ?? 0, true, true);
    if (n.worker !== undefined && n.worker !== null) this.cards.selected = n.worker;
    this.lastPanels = 0;
    renderPanels(this);
    const card = n.kind === 'consumer_stuck' ? $('consumer-card') : $('worker-card');
    if (!card.hidden) card.scrollIntoView({ block: 'nearest' });
  }

  /** The theme changed: every canvas draws again in its colours. */
  themeChanged() {
    this.timeline.invalidate();
    this.hist.invalidate();
    this.compare.redraw();
    this.sweep.redraw();
    this.lastPanels = 0;
    this.lastSlowPanels = 0;
    this.wake();
  }

  // --- trace files, controls, start ---------------------------------------------------------------

  /** @param {import('./trace-open.js').Opened} o trace files read: they replace the open run */
  openFiles({ tracks, events, ms }) {
    this.reset(tracks);
    this.server.close();
    $('connection').textContent =
      `${tracks.length > 1 ? `${tracks.length} traces` : tracks[0].label} · ${events.toLocaleString('en')}` +
      ` events · read in ${(ms / 1000).toFixed(1)} s`;
    $('connection').dataset.state = 'file';
    this.wake();
  }

  bindControls() {
    this.runForm.bind();
    this.server.bind();
    $('btn-fit').addEventListener('click', () => this.timeline.fit(true));
    this.playback.bind();
    this.inspector.bind();
    this.files.bind();
    this.theme.bind();
    this.keys.bind();
    this.searchView.bind();
    this.rangeView.bind();
    this.narrow.bind();
    window.addEventListener('popstate', () => applyView(this));
  }

  async init() {
    this.bindControls();
    const params = new URL(location.href).searchParams;
    if (params.get('demo')) {
      startDemo(this, params);
      return;
    }
    this.runForm.load();
    this.server.refreshRuns();
    this.server.followRuns();
    const id = params.get('run');
    if (id) this.server.open(id, { push: false });
    else renderDiagnosis($('diagnosis'), [], 'start a run, pick one above, or drop a trace file on the page');
    applyView(this);
    this.status.render();
    this.wake(); // draw the empty picture: the parts are named before any run starts
  }
}

new App().init();

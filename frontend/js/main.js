// The page: wires the stream, the reducers and the views. Events are queued as they arrive and
// applied in batches at the next animation frame; each frame draws at most once.

import { LoaderState } from './reducer.js';
import { TimelineStore } from './timeline-store.js';
import { PipelineView } from './pipeline-view.js';
import { TimelineView } from './timeline-view.js';
import { RunStream } from './stream.js';
import { api, runSocket, ApiError, errorText, errorField, fieldErrors } from './api.js';
import { fieldsFromSchema, renderForm } from './form.js';
import { Counters, Notes, EventLog, renderDiagnosis, workerDetail, stackItems, alarms } from './panels.js';
import { KNOWN_KINDS } from './schema.js';

const $ = (id) => /** @type {HTMLElement} */ (document.getElementById(id));
const APPLY_BUDGET_MS = 8; // per frame; the rest of a large backlog waits for the next frame
const PANEL_MS = 200; // DOM panels refresh at most 5 times a second
const POLL_MS = 1500; // run summary / diagnosis refresh while live
const ENDED = new Set(['done', 'stopped', 'error', 'failed', 'crashed', 'timeout']);

class App {
  constructor() {
    this.pipeline = new PipelineView($('pipeline'));
    this.counters = new Counters($('counters'));
    this.notes = new Notes($('notes'), $('notes-count'));
    this.log = new EventLog($('event-log'), $('events-count'));
    this.runId = null;
    this.stream = null;
    this.queue = [];
    this.queueHead = 0;
    this.frameRequested = false;
    this.lastPanels = 0;
    this.lastEventWall = 0;
    this.runInfo = null;
    this.pollTimer = null;
    this.noteItems = [];
    this.selectedWorker = null;
    this.perf = { frames: 0, frameMs: [], applied: 0, maxFrameMs: 0, lastFrameMs: 0, longFrames: 0, split: { apply: 0, pipeline: 0, timeline: 0, panels: 0 } };
    this.scenarios = [];
    this.form = null;
    this.reset();
    this.pipeline.onLaneClick = (wid) => { this.selectedWorker = wid; this.renderWorker(); };
    this.timeline.onInvalidate = () => this.wake();
    window.addEventListener('resize', () => this.wake());
    window.loaderscope = this; // for scripts and tests: state, perf, timeline
  }

  reset() {
    this.state = new LoaderState();
    this.store = new TimelineStore();
    if (this.timeline) this.timeline.store = this.store;
    else this.timeline = new TimelineView($('timeline'), this.store);
    this.timeline.follow = true;
    this.timeline.invalidate?.();
    this.eventCount = 0;
    this.queue = [];
    this.queueHead = 0;
    this.noteItems = [];
    this.notes.render([]);
    this.runInfo = null;
    this.pipeline.layoutKey = '';
    this.selectedWorker = null;
    this.violationsShown = 0;
    this.finalPolled = false;
    $('worker-card').hidden = true;
    $('banner').hidden = true;
    $('banner').dataset.key = '';
  }

  // --- frames -------------------------------------------------------------------------------------

  wake() {
    if (this.frameRequested) return;
    this.frameRequested = true;
    requestAnimationFrame((ts) => this.frame(ts));
  }

  /** Run time now: the latest event's t, ticking on between events while a real run is live. */
  clock(wall) {
    const live = this.isLive();
    let now = this.state.t;
    if (live && this.state.mode === 'real' && this.lastEventWall) now += Math.min(60, (wall - this.lastEventWall) / 1000);
    return { now, wall, live };
  }

  isLive() {
    const status = this.runInfo?.status ?? this.state.status;
    return this.state.status === 'running' && status !== 'paused' && !ENDED.has(status);
  }

  frame(ts) {
    this.frameRequested = false;
    const start = performance.now();
    const applied = this.applyQueued(start);
    const wall = performance.now();
    const clock = this.clock(wall);
    this.timeline.inProcess = this.state.config.num_workers === 0;
    const moving = this.pipeline.draw(this.state, clock);
    const t2 = performance.now();
    this.timeline.draw(clock);
    const t3 = performance.now();
    if (wall - this.lastPanels > PANEL_MS || (applied && this.queueHead >= this.queue.length && wall - this.lastPanels > 50)) {
      this.lastPanels = wall;
      this.renderPanels();
    }
    const ms = performance.now() - start;
    const p = this.perf;
    const split = p.split;
    split.apply += wall - start;
    split.pipeline += t2 - wall;
    split.timeline += t3 - t2;
    split.panels += start + ms - t3;
    p.frames += 1;
    p.lastFrameMs = ms;
    p.maxFrameMs = Math.max(p.maxFrameMs, ms);
    if (ms > 16) p.longFrames += 1;
    p.frameMs.push(ms);
    if (p.frameMs.length > 240) p.frameMs.shift();
    const backlog = this.queue.length - this.queueHead;
    if (backlog > 0 || moving || clock.live) this.wake();
  }

  applyQueued(start) {
    const q = this.queue;
    let i = this.queueHead;
    const end = q.length;
    if (i >= end) return 0;
    let tBefore = this.state.t;
    while (i < end) {
      const stop = Math.min(end, i + 512);
      for (; i < stop; i++) {
        const e = q[i];
        this.state.apply(e);
        this.store.apply(e);
        this.log.push(e);
        if (!KNOWN.has(e.kind)) this.noteItems.push({ ...e, unknown: true });
        else if (NOTABLE.has(e.kind)) this.noteItems.push(e);
      }
      if (performance.now() - start > APPLY_BUDGET_MS) break;
    }
    const n = i - this.queueHead;
    this.eventCount += n;
    this.perf.applied += n;
    if (i >= end) {
      this.queue = [];
      this.queueHead = 0;
    } else this.queueHead = i;
    if (this.state.t !== tBefore) this.lastEventWall = performance.now();
    if (this.state.violations.length > this.violationsShown) {
      for (const v of this.state.violations.slice(this.violationsShown)) this.noteItems.push({ type: 'violation', text: v });
      this.violationsShown = this.state.violations.length;
    }
    if (this.state.status !== 'running' && this.state.status !== 'pending' && !this.finalPolled) {
      this.finalPolled = true;
      this.poll();
    }
    return n;
  }

  renderPanels() {
    this.counters.render(this.state, this.store, this.eventCount);
    this.notes.render(this.noteItems);
    this.log.render();
    this.renderStatus();
    this.renderAlarms();
    if (this.selectedWorker !== null) this.renderWorker();
    const fm = this.perf.frameMs;
    if (fm.length) {
      const avg = fm.reduce((a, b) => a + b, 0) / fm.length;
      $('perf').textContent = `frame ${avg.toFixed(1)} ms avg · ${Math.max(...fm).toFixed(1)} max · ${this.timeline.mode}`;
    }
  }

  renderWorker() {
    const card = $('worker-card');
    if (this.selectedWorker === null) { card.hidden = true; return; }
    card.hidden = false;
    $('worker-title').textContent = this.state.config.num_workers === 0 ? 'main process' : `worker ${this.selectedWorker}`;
    const text = workerDetail(this.state, this.selectedWorker, this.clock(performance.now()).now);
    if ($('worker-detail').textContent !== text) $('worker-detail').textContent = text;
    const w = this.state.workers.get(this.selectedWorker);
    const stack = w?.stuck?.stack ?? null;
    const list = $('worker-stack');
    if (list.dataset.seq !== String(w?.stuck?.seq ?? '')) {
      list.dataset.seq = String(w?.stuck?.seq ?? '');
      list.replaceChildren(...stackItems(stack));
      list.hidden = !stack;
    }
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
    if (first && this.selectedWorker === null) this.selectedWorker = first.worker;
  }

  renderStatus() {
    const el = $('run-status');
    let status = this.runInfo?.status ?? (this.runId ? this.state.status : 'no run');
    if (this.state.status !== 'running' && this.state.status !== 'pending') status = this.state.status; // run_end wins
    if (el.textContent !== status) {
      el.textContent = status;
      el.dataset.status = status;
    }
    $('pipeline-empty').hidden = !!this.runId;
    const ended = ENDED.has(status);
    const off = !this.runId || ended || !!this.demo;
    const paused = status === 'paused';
    const set = (id, disabled) => { /** @type {HTMLButtonElement} */ ($(id)).disabled = disabled; };
    set('btn-pause', off || paused);
    set('btn-resume', off || !paused);
    set('btn-step', off);
    set('btn-stop', off);
    set('speed', off);
    const c = this.state.config;
    const title = this.runId ? `${this.state.scenario || this.runInfo?.scenario || ''} · ${this.state.mode || this.runInfo?.mode || ''}` +
      (c.num_workers !== undefined ? ` · ${c.num_workers} workers · batch ${c.batch_size} · prefetch ${c.prefetch_factor ?? '–'}${c.in_order === false ? ' · in_order=False' : ''}` : '') : '';
    if ($('run-title').textContent !== title) $('run-title').textContent = title;
  }

  // --- runs ---------------------------------------------------------------------------------------

  openRun(id, { push = true } = {}) {
    if (this.stream) this.stream.close();
    clearTimeout(this.pollTimer);
    this.reset();
    this.runId = id;
    this.finalPolled = false;
    this.violationsShown = 0;
    const url = new URL(location.href);
    url.searchParams.set('run', id);
    url.searchParams.delete('token');
    if (push && url.href !== location.href) history.pushState({ run: id }, '', url);
    $('run-picker').value = id;
    this.stream = new RunStream({
      openSocket: (after) => runSocket(id, after),
      fetchEvents: (after, limit) => api.events(id, after, limit),
      onEvents: (events) => { this.queue.push(...events); this.wake(); },
      onNote: (n) => { this.noteItems.push(n); this.wake(); },
      onConnection: (s) => { const c = $('connection'); c.textContent = s; c.dataset.state = s; },
      onRunStatus: (m) => {
        if (typeof m.status === 'string') this.runInfo = { ...(this.runInfo ?? {}), status: m.status, paused: m.paused };
        if (m.type === 'end') this.poll();
        this.wake();
      },
    }).start();
    this.poll();
    this.wake();
  }

  async poll() {
    clearTimeout(this.pollTimer);
    const id = this.runId;
    if (!id || this.demo) return;
    try {
      const info = await api.run(id);
      if (id !== this.runId) return;
      this.runInfo = info;
      renderDiagnosis($('diagnosis'), info.diagnosis, 'no findings yet');
      this.renderStatus();
    } catch (err) {
      if (err instanceof ApiError && err.status === 404) {
        renderDiagnosis($('diagnosis'), [], `run ${id} is not known to this server`);
        this.runInfo = { status: 'unknown' };
        this.renderStatus();
        return;
      }
    }
    const status = this.runInfo?.status;
    if (!ENDED.has(status) && id === this.runId) this.pollTimer = setTimeout(() => this.poll(), POLL_MS);
    this.refreshRuns();
  }

  async refreshRuns() {
    if (this.demo) return;
    let runs;
    try {
      runs = await api.runs();
    } catch { return; }
    if (!Array.isArray(runs)) runs = runs?.runs ?? [];
    const sel = /** @type {HTMLSelectElement} */ ($('run-picker'));
    const key = JSON.stringify(runs.map((r) => [r.id, r.status]));
    if (sel.dataset.key === key) return;
    sel.dataset.key = key;
    const opts = [new Option('— choose a run —', '')];
    for (const r of [...runs].reverse()) {
      opts.push(new Option(`${r.scenario ?? r.name ?? 'run'} · ${r.mode ?? ''} · ${r.status ?? ''} · ${r.id}`, r.id));
    }
    if (this.runId && !runs.some((r) => r.id === this.runId)) opts.push(new Option(this.runId, this.runId));
    sel.replaceChildren(...opts);
    sel.value = this.runId ?? '';
  }

  async control(body) {
    if (!this.runId) return;
    try {
      await api.control(this.runId, body);
      this.poll();
    } catch (err) {
      this.noteItems.push({ type: 'bad', reason: `control failed: ${err.message}` });
      this.wake();
    }
  }

  // --- the new-run form -----------------------------------------------------------------------------

  async loadScenarios() {
    let list;
    try {
      list = await api.scenarios();
    } catch (err) {
      $('form-error').textContent = `could not load scenarios: ${err.message}`;
      $('form-error').hidden = false;
      return;
    }
    this.scenarios = Array.isArray(list) ? list : [];
    const sel = /** @type {HTMLSelectElement} */ ($('scenario'));
    sel.replaceChildren(...this.scenarios.map((s) => new Option(s.title ? `${s.name} — ${s.title}` : s.name, s.name)));
    const preferred = this.scenarios.find((s) => s.name === 'out_of_order') ?? this.scenarios[0];
    if (preferred) sel.value = preferred.name;
    this.showScenario();
  }

  showScenario() {
    const name = /** @type {HTMLSelectElement} */ ($('scenario')).value;
    const sc = this.scenarios.find((s) => s.name === name);
    $('scenario-desc').textContent = sc?.description ?? '';
    this.form = renderForm($('params'), fieldsFromSchema(sc?.params));
    $('form-error').hidden = true;
  }

  async submit(ev) {
    ev.preventDefault();
    const name = /** @type {HTMLSelectElement} */ ($('scenario')).value;
    const mode = /** @type {HTMLInputElement} */ (document.querySelector('input[name="mode"]:checked'))?.value ?? 'real';
    const errBox = $('form-error');
    errBox.hidden = true;
    if (!this.form) return;
    this.form.clearErrors();
    const { values, errors } = this.form.read();
    const bad = Object.entries(errors);
    if (bad.length) {
      for (const [field, msg] of bad) this.form.showError(field, msg);
      /** @type {HTMLDetailsElement} */ ($('params-box')).open = true;
      return;
    }
    const button = /** @type {HTMLButtonElement} */ ($('btn-start'));
    button.disabled = true;
    try {
      const run = await api.start(name, mode, values);
      const id = run?.id ?? run?.run?.id;
      if (!id) throw new Error('the server did not return a run id');
      this.openRun(id);
      this.refreshRuns();
    } catch (err) {
      const body = err instanceof ApiError ? err.body : null;
      // each problem next to its field; what names no field of the form goes under the button
      let placed = 0;
      for (const p of body ? fieldErrors(body) : []) if (this.form.showError(p.field, p.message)) placed += 1;
      const field = placed ? null : body ? errorField(body, this.form.names()) : null;
      const message = body ? errorText(body) : err.message;
      if (field && this.form.showError(field, message)) placed += 1;
      if (placed) /** @type {HTMLDetailsElement} */ ($('params-box')).open = true;
      else {
        errBox.textContent = message || String(err);
        errBox.hidden = false;
      }
    } finally {
      button.disabled = false;
    }
  }

  bindControls() {
    $('new-run').addEventListener('submit', (ev) => this.submit(ev));
    $('scenario').addEventListener('change', () => this.showScenario());
    $('run-picker').addEventListener('change', (ev) => {
      const id = /** @type {HTMLSelectElement} */ (ev.target).value;
      if (id) this.openRun(id);
    });
    $('run-picker').addEventListener('focus', () => this.refreshRuns());
    $('btn-pause').addEventListener('click', () => this.control({ action: 'pause' }));
    $('btn-resume').addEventListener('click', () => this.control({ action: 'resume' }));
    $('btn-step').addEventListener('click', () => this.control({ action: 'step' }));
    $('btn-stop').addEventListener('click', () => this.control({ action: 'stop' }));
    $('speed').addEventListener('change', (ev) => this.control({ delay: Number(/** @type {HTMLSelectElement} */ (ev.target).value) }));
    $('btn-fit').addEventListener('click', () => this.timeline.fit());
    window.addEventListener('popstate', () => {
      const id = new URL(location.href).searchParams.get('run');
      if (id && id !== this.runId) this.openRun(id, { push: false });
    });
  }

  /** `/?demo=synth&workers=8&rate=2000`: feed synthetic events, no server needed (development, measurements). */
  async startDemo(params) {
    this.demo = true;
    const { synthesize } = await import('../dev/synth.js');
    const workers = Number(params.get('workers') ?? 4);
    const rate = Number(params.get('rate') ?? 0); // events per second; 0 = follow the virtual clock
    const batches = Number(params.get('batches') ?? 400);
    const events = synthesize({ num_workers: workers, batches, prefetch_factor: Number(params.get('prefetch') ?? 2), step: Number(params.get('step') ?? 0.004), cost: (idx) => (0.02 + 0.03 * ((workers - (idx % workers)) / workers)) * Number(params.get('slow') ?? 1) });
    this.runId = 'demo';
    renderDiagnosis($('diagnosis'), [], 'offline demo: the diagnosis comes from the server');
    $('connection').textContent = `demo · ${events.length} events`;
    let i = 0;
    const t0 = performance.now();
    const pump = () => {
      const elapsed = (performance.now() - t0) / 1000;
      const until = rate ? Math.floor(elapsed * rate) : events.findIndex((e) => e.t > elapsed);
      const stop = until < 0 ? events.length : Math.min(events.length, until);
      if (stop > i) {
        this.queue.push(...events.slice(i, stop));
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
    this.loadScenarios();
    this.refreshRuns();
    const id = params.get('run');
    if (id) this.openRun(id, { push: false });
    else renderDiagnosis($('diagnosis'), [], 'start a run, or pick one above');
    this.renderStatus();
    this.wake(); // draw the empty picture: the parts are named before any run starts
  }
}

const KNOWN = new Set(KNOWN_KINDS);
const NOTABLE = new Set(['worker_stuck', 'consumer_stuck', 'worker_died', 'error', 'timeout']);

new App().init();

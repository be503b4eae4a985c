// The connection to a run on the dashboard server: its event streams (one per rank), the run's
// summary and diagnosis (polled while it runs), a logdir job's table of ranks, the run list, the live controls, and
// what the page says when the server goes away or forgets the run. Every network call starts here, from a stream
// callback, a timer or a click; never from the frame loop.

import { Track } from '../model/track.js';
import { RunStream } from './stream.js';
import { api, runSocket, runListSocket, ApiError } from './api.js';
import { pickerGroups } from '../model/run-list.js';
import { openLoader } from './job-table.js';
import { ENDED } from '../model/schema.js';
import { withoutRunView } from '../model/url-state.js';

const $ = (/** @type {string} */ id) => /** @type {HTMLElement} */ (document.getElementById(id));
const POLL_MS = 1500; // run summary / diagnosis refresh while live

/**
 * What the connection needs of the page.
 * @typedef {{
 *   track: () => Track,
 *   tracks: () => Track[],
 *   open: (tracks: Track[]) => void,
 *   runTime: () => number,
 *   stopPlaying: () => void,
 *   playFromStart: () => void,
 *   diagnosisChanged: () => void,
 *   unknown: (message: string) => void,
 *   statusChanged: () => void,
 *   resumed: () => void,
 *   wake: () => void,
 *   selectRun: (id: string, push?: boolean) => boolean,
 *   jobTable: (answer: import('./job-table.js').JobAnswer, runId: string|null) => void,
 * }} ServerHost
 */

export class ServerRun {
  /** @param {ServerHost} host */
  constructor(host) {
    this.host = host;
    /** @type {string|null} the open run on the server ('demo' for the synthetic demo) */
    this.runId = null;
    this.demo = false;
    /** @type {ReturnType<typeof setTimeout>|undefined} */
    this.pollTimer = undefined;
    this.forget();
  }

  /** Another run (or a file) is open: nothing of the old run's connection carries over. */
  forget() {
    clearTimeout(this.pollTimer);
    /** @type {{row:number, now:number}|null} the server is gone; the view is frozen at this row and run time */
    this.offline = null;
    /** @type {boolean} */
    this.unknownRun = false; // the server (restarted) does not know the open run
    /** @type {string[]|null} the server's diagnosis of the whole run */
    this.serverDiagnosis = null;
    /** @type {boolean} */
    this.finalPolled = false;
    /** @type {number} when the job's other ranks were last looked for (Date.now()) */
    this.ranksLooked = 0;
    /** @type {number} */
    this.rankLooks = 0; // looks for the job's other ranks since the run opened
    /** @type {Map<number, string>} rank -> run id, of the open loader of the logdir job whose table is shown */
    this.jobRuns = new Map();
    /** @type {string|null} that loader (a job is ranks × loaders: its other loaders' rows open as runs of their own) */
    this.jobLoader = null;
    this.showNotice();
  }

  /** Whether the live controls can reach the run. */
  get reachable() {
    return !this.offline && !this.unknownRun;
  }

  bind() {
    $('run-picker').addEventListener('change', (ev) => {
      const id = /** @type {HTMLSelectElement} */ (ev.target).value;
      if (id && !this.host.selectRun(id) && !this.openJobRun(id)) this.open(id);
    });
    $('run-picker').addEventListener('focus', () => this.refreshRuns());
    $('btn-pause').addEventListener('click', () => this.control({ action: 'pause' }));
    $('btn-resume').addEventListener('click', () => this.control({ action: 'resume' }));
    $('btn-step').addEventListener('click', () => this.control({ action: 'step' }));
    $('btn-stop').addEventListener('click', () => this.control({ action: 'stop' }));
    $('speed').addEventListener('change', (ev) =>
      this.control({ delay: Number(/** @type {HTMLSelectElement} */ (ev.target).value) }),
    );
    window.addEventListener('popstate', () => {
      const id = new URL(location.href).searchParams.get('run');
      if (id && id !== this.runId && !this.host.selectRun(id, false) && !this.openJobRun(id, false))
        this.open(id, { push: false });
    });
  }

  /** @param {string} id @param {{push?:boolean, autoplay?:boolean}} [o] */
  open(id, { push = true, autoplay = false } = {}) {
    this.host.open([new Track({ rank: 0, label: 'rank 0', runId: id, source: 'server' })]);
    this.runId = id;
    const url = new URL(location.href);
    if (url.searchParams.get('run') !== id) withoutRunView(url); // the playhead, zoom, selection were the old run's
    url.searchParams.set('run', id);
    url.searchParams.delete('token');
    if (push && url.href !== location.href) history.pushState({ run: id }, '', url);
    /** @type {HTMLSelectElement} */ ($('run-picker')).value = id;
    $('file-error').hidden = true;
    const tr = this.host.track();
    // a simulated run plays from its first event at the chosen speed as its events arrive
    if (autoplay) this.host.playFromStart();
    tr.stream = this.stream(tr, id);
    this.poll();
    this.host.wake();
  }

  /**
   * Another rank of the open job is shown (its row was clicked): the diagnosis, the run picker and
   * the URL follow it, so that what the page says and a shared link are about the rank on screen.
   * @param {Track} tr @param {boolean} [push] a history entry (not when going back to one)
   */
  select(tr, push = true) {
    if (tr.source !== 'server' || !tr.runId || tr.runId === this.runId) return;
    this.runId = tr.runId;
    this.serverDiagnosis = null; // the other rank's: never shown beside this rank's counters
    this.finalPolled = tr.complete;
    const url = new URL(location.href);
    if (url.searchParams.get('run') !== tr.runId) withoutRunView(url);
    url.searchParams.set('run', tr.runId);
    url.searchParams.delete('token');
    if (push && url.href !== location.href) history.pushState({ run: tr.runId }, '', url);
    /** @type {HTMLSelectElement} */ ($('run-picker')).value = tr.runId;
    this.poll();
  }

  /** The open run is no longer on the server: a file or the demo took its place. */
  close() {
    this.forget();
    this.runId = null;
    const url = new URL(location.href);
    if (url.searchParams.has('run')) {
      url.searchParams.delete('run');
      history.pushState({}, '', withoutRunView(url));
    }
    /** @type {HTMLSelectElement} */ ($('run-picker')).value = '';
  }

  /** @param {Track} tr @param {string} id */
  stream(tr, id) {
    return new RunStream({
      openSocket: (after) => runSocket(id, after),
      fetchEvents: (after, limit) => api.events(id, after, limit),
      onEvents: (events) => {
        for (const e of events) tr.queue.push(e);
        this.arrived(tr, events);
        this.host.wake();
      },
      onNote: (n) => {
        tr.note(n);
        this.host.wake();
      },
      onConnection: (s) => {
        if (tr === this.host.track()) this.connectionChanged(tr, s);
      },
      onRunStatus: (m) => {
        if (typeof m.status === 'string') {
          tr.runInfo = {
            ...(tr.runInfo ?? {}),
            status: m.status,
            paused: m.paused === true,
            ...(typeof m.delay === 'number' ? { delay: m.delay } : {}),
          };
        }
        if (m.type === 'end') {
          tr.complete = true;
          if (tr === this.host.track()) this.poll();
        }
        this.host.wake();
      },
    }).start();
  }

  /**
   * Events of the selected rank arrived (not yet applied): the run's end asks the server for its
   * final summary once; a run_start of a job with several ranks looks for the other ranks.
   * @param {Track} tr @param {import('../model/types.js').LoaderEvent[]} events
   */
  arrived(tr, events) {
    if (tr !== this.host.track()) return;
    for (const e of events) {
      if (e.kind === 'run_end' && !this.finalPolled) {
        this.finalPolled = true;
        this.poll();
      } else if (e.kind === 'run_start' && e.job && (e.world_size ?? 1) > 1 && !this.ranksLooked) {
        this.jobOrRanks(e.job, e.world_size ?? 1, e.name ?? null);
      }
    }
  }

  async poll() {
    clearTimeout(this.pollTimer);
    const id = this.runId;
    const tr = this.host.track();
    if (!id || this.demo || tr.source !== 'server') return;
    try {
      const info = await api.run(id);
      if (id !== this.runId) return;
      tr.runInfo = info;
      // a run is one rank: its info says which before its stream delivers the run_start (the job's table,
      // asked for next, marks the open rank's row by it)
      if (Number.isInteger(info.rank)) tr.rankIs(/** @type {number} */ (info.rank));
      // a logdir job's table is asked for once the run's info names its job (its trace's run_start, read
      // as the run opened), not after its stream delivers that run_start: 0.4 s later on a loaded box
      if (info.path && info.job && (info.world_size ?? 1) > 1 && !this.ranksLooked)
        this.jobOrRanks(info.job, info.world_size ?? 1, info.name ?? null);
      this.serverDiagnosis = Array.isArray(info.diagnosis) ? info.diagnosis : null;
      this.host.diagnosisChanged();
      this.host.statusChanged();
    } catch (err) {
      if (err instanceof ApiError && err.status === 404) {
        this.notKnown(tr, id);
        return;
      }
    }
    const status = tr.runInfo?.status;
    if (!ENDED.has(status) && id === this.runId) this.pollTimer = setTimeout(() => this.poll(), POLL_MS);
  }

  /**
   * A restarted server without this run: stop asking for it, keep what arrived as a trace.
   * @param {Track} tr
   * @param {string} id
   */
  notKnown(tr, id) {
    this.host.unknown(`run ${id} is not known to this server`);
    tr.runInfo = { status: 'unknown' };
    if (tr.player.length) {
      this.unknownRun = true;
      this.offline = null;
      tr.stream?.close();
      tr.complete = true;
      tr.player.following = false;
      this.showNotice();
      this.refreshRuns(true);
    }
    this.host.statusChanged();
    this.host.wake();
  }

  /** The run list in the picker, asked for now (a focus, a reconnect); WS /ws/runs pushes it too. */
  async refreshRuns(force = false) {
    if (this.demo) return;
    const sel = /** @type {HTMLSelectElement} */ ($('run-picker'));
    if (force) sel.dataset.key = '';
    let runs;
    try {
      runs = await api.runs();
    } catch {
      return;
    }
    this.showRuns(Array.isArray(runs) ? runs : []);
  }

  /**
   * Follow the run list as the server pushes it (WS /ws/runs), as TensorBoard's reload does: a
   * run that starts is listed without a reload. A lost socket comes back, its first message the
   * whole list again.
   */
  followRuns(delay = 1000) {
    if (this.demo) return;
    const socket = runListSocket();
    socket.onmessage = (m) => {
      delay = 1000;
      let msg;
      try {
        msg = JSON.parse(m.data);
      } catch {
        return;
      }
      if (msg?.type === 'runs' && Array.isArray(msg.runs)) this.showRuns(msg.runs);
    };
    socket.onclose = () => {
      if (!this.demo) setTimeout(() => this.followRuns(Math.min(delay * 2, 10_000)), delay);
    };
  }

  /** @param {import('../model/run-list.js').RunBrief[]} runs */
  showRuns(runs) {
    const sel = /** @type {HTMLSelectElement} */ ($('run-picker'));
    const key = JSON.stringify(runs.map((r) => [r.id, r.status, r.name, r.epochs, r.batches, r.started]));
    if (sel.dataset.key === key) return;
    sel.dataset.key = key;
    /** @type {Array<HTMLOptionElement | HTMLOptGroupElement>} */
    const opts = [new Option('— choose a run —', '')];
    for (const g of pickerGroups(runs)) {
      const options = g.options.map((o) => new Option(o.text, o.id));
      if (g.label === null) {
        opts.push(...options);
        continue;
      }
      const group = document.createElement('optgroup');
      group.label = g.label;
      group.append(...options);
      opts.push(group);
    }
    if (this.runId && !runs.some((r) => r.id === this.runId)) opts.push(new Option(this.runId, this.runId));
    sel.replaceChildren(...opts);
    sel.value = this.runId ?? '';
    sel.dataset.runs = String(runs.length);
  }

  /** @param {{action?: string, delay?: number}} body */
  async control(body) {
    if (!this.runId || !this.reachable) return;
    try {
      await api.control(this.runId, body);
      this.poll();
    } catch (err) {
      this.host.track().note({ type: 'bad', reason: `control failed: ${err instanceof Error ? err.message : err}` });
      this.host.wake();
    }
  }

  /**
   * A logdir job: the server's table of all its ranks (GET /api/jobs/{job}/table), and no rank's
   * stream opened until its row is clicked. Any other job (the open run has no logdir `path`, so
   * the server has no table of it; or a table it could not make: 422) opens its ranks as found.
   * @param {string} job @param {number} want the job's world size @param {string|null} name the loader's
   */
  async jobOrRanks(job, want, name) {
    this.ranksLooked = Date.now();
    const tracks = this.host.tracks();
    const id = this.runId;
    // the run's info, once read, has its logdir `path`: the run list (a 1,024-rank job's is 0.5 MB) is
    // asked for only when the info has not come yet (a run_start streamed first)
    const logged = Boolean(this.host.track().runInfo?.path);
    try {
      const runs = logged ? null : await api.runs();
      if (logged || (Array.isArray(runs) && runs.some((r) => r.id === id && r.path))) {
        const answer = await api.jobTable(job);
        if (this.host.tracks() !== tracks) return; // another run was opened meanwhile
        // each row names its run on this dashboard: the open loader's rows are its ranks
        this.jobLoader = openLoader(answer, id);
        this.jobRuns = new Map(
          answer.ranks
            .filter((r) => r.loader === this.jobLoader && r.dashboard_run)
            .map((r) => [r.rank, /** @type {string} */ (r.dashboard_run)]),
        );
        this.host.jobTable(answer, id);
        this.host.wake();
        return;
      }
    } catch {
      /* no table: the ranks are opened as they are found, as for a live job */
    }
    if (this.host.tracks() === tracks) this.discoverRanks(job, want, name);
  }

  /**
   * A row of the job's table was clicked: a rank of the open loader is shown beside the others (its
   * stream opened the first time); a row of another loader opens that run, whose loader's ranks then
   * are the tracks (a track is a rank of one loader, never a second loader of a rank).
   * @param {import('./job-table.js').JobRow} row
   * @returns {string|null} why it cannot be shown, or null
   */
  openRow(row) {
    if (row.loader === this.jobLoader || !row.dashboard_run) return this.openRank(row.rank);
    this.open(row.dashboard_run);
    return null;
  }

  /**
   * Show a rank of the open loader, opening its stream the first time.
   * @param {number} rank @param {boolean} [push] a history entry (not when going back to one)
   * @returns {string|null} why the rank cannot be shown, or null
   */
  openRank(rank, push = true) {
    const id = this.jobRuns.get(rank);
    if (id === undefined) {
      return (
        `rank ${rank} has no run on this dashboard: its trace is in the job's table but no longer in the ` +
        "logdir's run list (moved or deleted since); reload the page to see the job as it is now"
      );
    }
    if (this.host.selectRun(id, push)) return null;
    const tracks = this.host.tracks();
    tracks.push(this.rankTrack(id, rank));
    tracks.sort((a, b) => a.rank - b.rank);
    this.host.selectRun(id, push);
    return null;
  }

  /**
   * The run picker, or Back, chose a rank of the job whose table is shown: that rank, not the job reloaded.
   * @param {string} id @param {boolean} [push]
   */
  openJobRun(id, push = true) {
    for (const [rank, run] of this.jobRuns)
      if (run === id) {
        this.openRank(rank, push);
        return true;
      }
    return false;
  }

  /**
   * Other ranks of the same loader of the same job on this server: each becomes a track of its own.
   * A job's train and eval loaders share its id: a rank is the run of the same job and loader name.
   * @param {string} job @param {number} want the job's world size @param {string|null} name the loader's
   */
  async discoverRanks(job, want, name) {
    this.ranksLooked = Date.now();
    /** @type {import('../model/types.js').RunBrief[]} */
    let runs;
    try {
      runs = await api.runs();
    } catch {
      return;
    }
    if (!Array.isArray(runs)) runs = [];
    const tracks = this.host.tracks();
    // the listing carries each run's job and rank (run_start's, or a logdir file's index): no run is
    // opened just to learn them, so a logdir of many files reads only the ranks shown
    for (const r of runs) {
      if (tracks.some((tr) => tr.runId === r.id)) continue;
      if (r.job === job && (r.name ?? null) === name && !tracks.some((tr) => tr.rank === r.rank)) {
        tracks.push(this.rankTrack(r.id, r.rank ?? 0));
      }
    }
    tracks.sort((a, b) => a.rank - b.rank);
    if (tracks.length < want) {
      // ranks of a job start together: the others' run_start is usually a moment behind, so look
      // again soon, then less often (a rank that starts late is found within POLL_MS * 2)
      this.rankLooks += 1;
      const delay = Math.min(POLL_MS * 2, 250 * 2 ** (this.rankLooks - 1));
      setTimeout(() => {
        if (this.host.track().player.full.meta.job === job) this.discoverRanks(job, want, name);
      }, delay);
    }
    this.host.wake();
  }

  /** @param {string} id @param {number} rank */
  rankTrack(id, rank) {
    const tr = new Track({ rank, label: `rank ${rank}`, runId: id, source: 'server' });
    tr.player.following = this.host.track().player.following;
    tr.stream = this.stream(tr, id);
    return tr;
  }

  /** The connection of the selected run's stream changed. @param {Track} tr @param {string} s */
  connectionChanged(tr, s) {
    const c = $('connection');
    c.textContent = s;
    c.dataset.state = s;
    if (s === 'reconnecting' && this.reachable) {
      // freeze the view where the server left it: the clock stops, the controls go off
      this.offline = { row: tr.player.length, now: this.host.runTime() };
      this.host.stopPlaying();
    } else if ((s === 'live' || s === 'catching up') && this.offline) {
      this.offline = null;
      this.host.resumed();
      this.refreshRuns(true);
      this.poll();
    } else return;
    this.showNotice();
    this.host.statusChanged();
    this.host.wake();
  }

  /** The full-width notice: connection lost (view frozen), or a server that does not know the run. */
  showNotice() {
    const box = $('conn-notice');
    let main = '',
      sub = '';
    if (this.unknownRun) {
      main = `the dashboard server does not know run ${this.runId} (it was restarted without it)`;
      sub =
        `what arrived before, ${this.host.track().player.length.toLocaleString('en')} events, is still here: ` +
        `play, step and scrub it; ` +
        'start a new run or pick one above to go on';
    } else if (this.offline) {
      main = `lost connection to the dashboard server — view frozen at event ${this.offline.row.toLocaleString('en')}`;
      sub =
        'retrying every few seconds; the run may still be going on the server. Pause, Step and Stop are off until ' +
        'it is back.';
    }
    const key = `${main}|${sub}`;
    if (box.dataset.key === key) return;
    box.dataset.key = key;
    box.hidden = !main;
    const b = document.createElement('b');
    b.textContent = main;
    const span = document.createElement('span');
    span.className = 'sub';
    span.textContent = sub;
    box.replaceChildren(b, span);
  }
}

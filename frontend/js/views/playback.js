// Playback of the open run: play at a speed of its own clock, pause, step one event or one batch,
// seek by time or by event, follow a live run again; the bar under the picture and its keys. The
// selected rank's player leads; the other ranks are put at the same moment of the shared clock.

import { fmtDuration } from '../model/time-window.js';

const $ = (/** @type {string} */ id) => /** @type {HTMLElement} */ (document.getElementById(id));
/** Focused, these act on Space (and Enter) themselves: a button's Space presses that button, never Play. */
const OWN_SPACE =
  'button, a[href], summary, select, input, textarea, [role="button"], [role="option"], [tabindex]:not(canvas)';
const SNAP_EVENTS = 48; // a jump over more events than this puts tokens in place instead of flying

/**
 * What playback needs of the page.
 * @typedef {{
 *   track: () => import('../model/track.js').Track,
 *   tracks: () => import('../model/track.js').Track[],
 *   complete: () => boolean,
 *   isLiveRun: () => boolean,
 *   moved: (snap: boolean) => void,
 *   wake: () => void,
 * }} PlaybackHost
 */

export class Playback {
  /** @param {PlaybackHost} host */
  constructor(host) {
    this.host = host;
    this.playing = false;
    this.speed = 1;
    this.playT = 0; // run time the playhead has reached (between events while playing)
    this.lastPlayWall = 0;
  }

  get player() {
    return this.host.track().player;
  }

  /** Stop without moving (a new run, a lost server). */
  stop() {
    this.playing = false;
  }

  /** Play from the first event as events arrive (a simulated run just started). */
  playFromStart() {
    this.host.track().player.following = false;
    this.playing = true;
    this.playT = 0;
    this.lastPlayWall = performance.now();
  }

  /**
   * Move the playhead by the wall time since the last frame; called once per frame.
   * @param {number} now performance.now()
   */
  advance(now) {
    if (!this.playing) return;
    const p = this.player;
    const dt = Math.min(0.25, Math.max(0, (now - this.lastPlayWall) / 1000));
    this.lastPlayWall = now;
    this.playT += dt * this.speed;
    const complete = this.host.complete();
    // while events are still coming, the playhead waits at the newest one instead of running ahead
    if (!complete) this.playT = Math.min(this.playT, p.length ? p.table.t[p.length - 1] : 0);
    const target = p.rowAt(this.playT);
    if (target !== p.cursor) this.moveTo(target, false);
    if (p.cursor >= p.length && complete) this.playing = false;
  }

  /**
   * Put the selected rank's cursor at row i, the other ranks at the same moment. Tokens fly when
   * playing or stepping; a seek (slider, axis, Home/End) puts them in place at once.
   * @param {number} i @param {boolean} [pause] @param {boolean} [snap]
   */
  moveTo(i, pause = true, snap = false) {
    if (pause) this.playing = false;
    const p = this.player;
    const before = p.cursor;
    p.seek(i);
    if (!this.playing) this.playT = p.time;
    const t = p.time;
    const lead = this.host.track();
    for (const tr of this.host.tracks()) {
      if (tr === lead || !tr.player.length) continue;
      tr.player.seek(tr.player.rowAt(t - tr.offset));
    }
    this.host.moved(snap || Math.abs(p.cursor - before) > SNAP_EVENTS);
  }

  /** @param {number} t run time of the selected rank */
  seekTime(t) {
    const wasPlaying = this.playing;
    this.moveTo(this.player.rowAt(t), true, true);
    this.playT = t;
    if (wasPlaying) this.play();
  }

  play() {
    const p = this.player;
    if (!p.length) return;
    if (p.cursor >= p.length && this.host.complete()) this.moveTo(0, true, true);
    if (p.following) p.seek(p.cursor); // leave live following: the playhead is ours now
    p.following = false;
    this.playing = true;
    this.playT = p.time;
    this.lastPlayWall = performance.now();
    this.host.wake();
  }

  pause() {
    this.playing = false;
    this.host.wake();
  }

  /** To the last event; and stay there while a run's events may still come (live, or a stream not yet ended). */
  toEnd() {
    const lead = this.host.track();
    if (this.host.isLiveRun() || (lead.source === 'server' && !lead.complete)) {
      this.playing = false;
      for (const tr of this.host.tracks()) tr.player.follow();
      this.host.moved(true);
      return;
    }
    this.moveTo(this.player.length, true, true);
  }

  /** @param {number} dir +1 forward, -1 back */
  stepBatch(dir) {
    this.playing = false;
    const p = this.player;
    const before = p.cursor;
    p.stepBatch(dir);
    const after = p.cursor;
    p.seek(before);
    this.moveTo(after);
  }

  /**
   * Space, ←/→ (Shift: a batch), Home, End; not while typing, except on the event slider; Space not
   * on a focused control, which Space presses (keys.js gives focusable lanes and rows the same).
   * @param {KeyboardEvent} ev
   */
  key(ev) {
    const t = /** @type {HTMLElement} */ (ev.target);
    const typing =
      t && (t.tagName === 'INPUT' || t.tagName === 'SELECT' || t.tagName === 'TEXTAREA' || t.isContentEditable);
    if (typing && t.id !== 'pb-scrub') return; // the scrubber takes the playback keys too
    if (ev.key === ' ' && t instanceof Element && t.id !== 'pb-scrub' && t.matches(OWN_SPACE)) return;
    if (!this.player.length || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    const p = this.player;
    if (ev.key === ' ') this.playing ? this.pause() : this.play();
    else if (ev.key === 'ArrowRight') ev.shiftKey ? this.stepBatch(1) : this.moveTo(p.cursor + 1);
    else if (ev.key === 'ArrowLeft') ev.shiftKey ? this.stepBatch(-1) : this.moveTo(p.cursor - 1);
    else if (ev.key === 'Home') this.moveTo(0, true, true);
    else if (ev.key === 'End') this.toEnd();
    else return;
    ev.preventDefault();
  }

  bind() {
    $('pb-play').addEventListener('click', () => (this.playing ? this.pause() : this.play()));
    $('pb-start').addEventListener('click', () => this.moveTo(0, true, true));
    $('pb-end').addEventListener('click', () => this.toEnd());
    $('pb-event').addEventListener('click', () => this.moveTo(this.player.cursor + 1));
    $('pb-event-back').addEventListener('click', () => this.moveTo(this.player.cursor - 1));
    $('pb-batch').addEventListener('click', () => this.stepBatch(1));
    $('pb-batch-back').addEventListener('click', () => this.stepBatch(-1));
    $('pb-speed').addEventListener('change', (ev) => {
      this.speed = Number(/** @type {HTMLSelectElement} */ (ev.target).value) || 1;
    });
    $('pb-time').addEventListener('input', (ev) =>
      this.seekTime(Number(/** @type {HTMLInputElement} */ (ev.target).value)),
    );
    $('pb-scrub').addEventListener('input', (ev) =>
      this.moveTo(Number(/** @type {HTMLInputElement} */ (ev.target).value), true, true),
    );
    window.addEventListener('keydown', (ev) => this.key(ev));
  }

  /**
   * The bar: sliders, where the playhead is, and which buttons apply.
   * @param {{hidden: boolean}} o hidden for the synthetic demo, which streams without an end
   */
  render({ hidden }) {
    const p = this.player;
    const bar = $('playback');
    const show = p.length > 0 && !hidden;
    if (bar.hidden === show) bar.hidden = !show;
    if (!show) return;
    this.renderSliders();
    const live = this.host.isLiveRun() && p.following;
    const where = live
      ? `live · ${p.length.toLocaleString('en')} events · following the run (scrub back to replay)`
      : `event ${p.cursor.toLocaleString('en')} of ${p.length.toLocaleString('en')} · ${fmtDuration(p.time)}` +
        ` · batch ${p.state.batches}${this.host.complete() ? '' : ' · still loading'}`;
    const el = $('pb-where');
    if (el.textContent !== where) el.textContent = where;
    el.dataset.cursor = String(p.cursor);
    const play = /** @type {HTMLButtonElement} */ ($('pb-play'));
    // following a live run there is nothing ahead to play: scrub back first
    play.disabled = live;
    /** @type {HTMLButtonElement} */ ($('pb-event')).disabled = live;
    /** @type {HTMLButtonElement} */ ($('pb-batch')).disabled = live;
    // beside a live run's own Pause (the real loader's), this one says it pauses the replay
    const liveRun = this.host.isLiveRun();
    const label = this.playing ? (liveRun ? '❚❚ Pause replay' : '❚❚ Pause') : liveRun ? '▶ Replay' : '▶ Play';
    if (play.textContent !== label) play.textContent = label;
    play.dataset.playing = String(this.playing);
    /** @type {HTMLButtonElement} */ ($('pb-end')).title = this.host.isLiveRun()
      ? 'follow the live run again (End)'
      : 'to the last event (End)';
  }

  /** The event slider and the time slider; one being dragged is left alone. */
  renderSliders() {
    const p = this.player;
    const scrub = /** @type {HTMLInputElement} */ ($('pb-scrub'));
    if (scrub.max !== String(p.length)) scrub.max = String(p.length);
    if (scrub.value !== String(p.cursor) && document.activeElement !== scrub) scrub.value = String(p.cursor);
    const time = /** @type {HTMLInputElement} */ ($('pb-time'));
    const t0 = p.table.t[0] ?? 0,
      t1 = p.length ? p.table.t[p.length - 1] : 0;
    if (time.min !== String(t0)) time.min = String(t0);
    if (time.max !== String(t1)) time.max = String(t1);
    const tv = String(p.cursor >= p.length ? t1 : p.time);
    if (time.value !== tv && document.activeElement !== time) time.value = tv;
    time.dataset.time = tv;
  }
}

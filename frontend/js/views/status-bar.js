// The top bar's run status: the badge (running, paused, done, disconnected…), which live controls
// apply, the run's one-line title, events lost before they reached the dashboard, and the demo's
// pace, said as the dashboard's own slowing-down and kept out of the diagnosis.

import { ENDED } from '../model/schema.js';
import { say } from '../model/wording.gen.js';

const $ = (/** @type {string} */ id) => /** @type {HTMLElement} */ (document.getElementById(id));

/** @typedef {import('../model/track.js').Track} Track */

/** Seconds as a demo pace: 0.15 -> "0.15 s". @param {number} s */
function fmtPace(s) {
  return `${Number(s.toFixed(3))} s`;
}

/**
 * The diagnosis of a run slowed down by the dashboard (`loaderscope demo`, the speed control): the
 * consumer's time per batch is the pace the dashboard adds, not a training step, and is said so.
 * @template T @param {T} lines the diagnosis, a line a string (else left as it is) @param {number} delay
 * @returns {T | string[]}
 */
export function paceDiagnosis(lines, delay) {
  if (!(delay > 0) || !Array.isArray(lines)) return lines;
  const pace =
    `the dashboard's pace (one batch per ${fmtPace(delay)}, added so that you can follow the run; not ` +
    `a training step)`;
  return lines.map((line) =>
    String(line)
      .replace(
        /the training step is the bottleneck \(([\d.]+) ms per batch, ([\d.]+) batches\/s\)/,
        (_, ms, rate) =>
          `the training loop is held to ${pace}: ${ms} ms per batch, ${rate} batches/s; loading keeps up with it`,
      )
      .replace(/the step alone would consume/, 'that pace alone would consume'),
  );
}

/**
 * What the bar reads of the page.
 * @typedef {{
 *   track: () => import('../model/track.js').Track,
 *   ranks: () => number,
 *   server: () => {offline: {row: number, now: number}|null, unknownRun: boolean, demo: boolean},
 *   moveTo: (row: number) => void,
 * }} StatusHost `moveTo`: pause at that row with the picture in place
 */

export class StatusBar {
  /** @param {StatusHost} host */
  constructor(host) {
    this.host = host;
  }

  /** Another run: the demo caption goes until the new run asks for it. */
  reset() {
    $('demo-caption').hidden = true;
    $('demo-caption').dataset.key = '';
  }

  render() {
    const tr = this.host.track();
    this.renderLost(tr);
    const status = this.statusWord(tr);
    const el = $('run-status');
    document.body.classList.toggle('offline', !!this.host.server().offline);
    const label = this.silentLabel(tr, status) ?? status;
    if (el.textContent !== label) {
      el.textContent = label;
      el.dataset.status = label === status ? status : 'silent';
      el.title =
        label === status
          ? ''
          : 'the producer is connected but has sent nothing for this long while the run ' +
            'should be running: a training script stuck outside the loader, or a hung process';
    }
    $('pipeline-empty').hidden = tr.source !== 'none';
    this.renderControls(tr, status);
    this.renderTitle(tr);
    this.renderPace();
  }

  /** Events the producer dropped before they reached the dashboard. @param {Track} tr */
  renderLost(tr) {
    const lost = tr.runInfo?.dropped ?? 0;
    const el = $('lost');
    if (el.dataset.n === String(lost)) return;
    el.dataset.n = String(lost);
    el.hidden = !lost;
    el.textContent = `⚠ ${lost} events lost`;
    el.title =
      `${lost} events were dropped by the producer (a watch()ed script whose buffer to the dashboard was full) ` +
      'before they reached the dashboard; the picture and the statistics miss them';
  }

  /** "silent 42 s": a running run whose producer has sent nothing for a while (the server says so). */
  /** @param {Track} tr @param {string} status */
  silentLabel(tr, status) {
    const info = tr.runInfo;
    if (status !== 'running' || !info?.silent) return null;
    return `silent ${Math.round(info.last_event_age ?? 0)} s`;
  }

  /** The badge's word: the server's status, unless the events or the connection say otherwise. @param {Track} tr */
  statusWord(tr) {
    const full = tr.player.full;
    const server = this.host.server();
    let status = tr.runInfo?.status ?? (tr.source !== 'none' ? full.status : 'no run');
    if (full.status !== 'running' && full.status !== 'pending') status = full.status; // run_end wins
    if (tr.source === 'file') status = full.status === 'running' ? 'incomplete' : full.status;
    if (server.unknownRun) status = 'unknown';
    else if (server.offline && !ENDED.has(status)) status = 'disconnected';
    return status;
  }

  /**
   * Pause / Resume / Step / Stop / speed: shown for a real run on the server, enabled while it runs and is reachable.
   * @param {Track} tr
   * @param {string} status
   */
  renderControls(tr, status) {
    const full = tr.player.full;
    const server = this.host.server();
    const realLive =
      tr.source === 'server' &&
      (full.mode === 'real' || full.mode === '') &&
      !ENDED.has(status) &&
      !server.offline &&
      !server.unknownRun;
    // a logdir file's producer takes no controls from here (the server answers 409); a doctor snapshot
    // is a frozen picture: nothing to pause, step or start there
    const snapshot = full.mode === 'doctor';
    $('live-controls').hidden =
      !(tr.source === 'server' && full.mode !== 'sim' && full.mode !== 'replay') ||
      tr.runInfo?.origin === 'logdir' ||
      server.demo ||
      snapshot;
    $('new-run-card').hidden = snapshot;
    const off = !realLive || server.demo;
    const paused = status === 'paused';
    const set = (/** @type {string} */ id, /** @type {boolean} */ disabled) => {
      /** @type {HTMLButtonElement} */ ($(id)).disabled = disabled;
    };
    set('btn-pause', off || paused);
    set('btn-resume', off || !paused);
    set('btn-step', off);
    set('btn-stop', off);
    set('speed', off);
  }

  /** File, scenario, mode and the loader's settings in one line (all of it in the tooltip). @param {Track} tr */
  renderTitle(tr) {
    const full = tr.player.full;
    const c = full.config;
    const name = full.scenario || tr.runInfo?.scenario || full.meta.name || '';
    const source = tr.source === 'file' ? `${tr.label}` : '';
    const ranks = this.host.ranks();
    // a doctor snapshot knows the workers, not the batch size or prefetch factor: it says none
    const workers = c.num_workers ? say('n.workers', { n: c.num_workers }) : 'in-process (num_workers=0)';
    const settings =
      c.batch_size !== undefined
        ? `${workers} · batch ${c.batch_size} · prefetch ${c.prefetch_factor ?? '–'}` +
          `${c.in_order === false ? ' · in_order=False' : ''}${c.pin_memory ? ' · pin_memory' : ''}`
        : workers;
    const title =
      tr.source !== 'none'
        ? [
            source,
            name,
            full.mode || tr.runInfo?.mode || '',
            c.num_workers !== undefined ? settings : '',
            ranks > 1 ? `${ranks} ranks` : '',
          ]
            .filter(Boolean)
            .join(' · ')
        : '';
    const badge = $('doctor-badge'); // a `loaderscope doctor --out` snapshot: what the samples saw, frozen
    badge.hidden = full.mode !== 'doctor';
    const verdict = tr.noteItems.findLast((n) => n.kind === 'doctor_verdict');
    badge.title = verdict ? `${verdict.text}\nwhat to do: ${verdict.advice ?? ''}` : '';
    const el = $('run-title');
    if (el.textContent !== title) {
      el.textContent = title;
      el.title = title; // the whole of it when the bar is too narrow
    }
  }

  /** The dashboard's own slowing-down (the demo's --delay, the speed control), said for what it is. */
  pace() {
    const tr = this.host.track();
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
      el.title = d
        ? `the dashboard holds the training loop ${fmtPace(d)} per batch so that a person can follow the run; ` +
          'it is not your training step and the diagnosis does not count it as one'
        : '';
    }
    const speed = /** @type {HTMLSelectElement} */ ($('speed'));
    const want = String(d);
    if (speed.value !== want && document.activeElement !== speed) {
      if (![...speed.options].some((o) => o.value === want))
        speed.append(new Option(`${fmtPace(d)}/batch (demo)`, want));
      speed.value = want;
    }
    this.renderCaption(d);
  }

  /** The demo says in one line what to watch, and jumps to the first parked result on request. @param {number} d */
  renderCaption(d) {
    const box = $('demo-caption');
    const full = this.host.track().player.full;
    const show = d > 0 && full.scenario === 'out_of_order';
    const key = show ? `${d}` : '';
    if (box.dataset.key === key) return;
    box.dataset.key = key;
    box.hidden = !show;
    if (!show) return;
    const text = document.createElement('span');
    text.textContent =
      'Watch the reorder buffer: every few batches one task is held up, later tasks overtake it, and their ' +
      'results wait there (amber) until rcvd_idx reaches it. It keeps happening all run long.';
    const go = document.createElement('button');
    go.type = 'button';
    go.id = 'btn-first-parked';
    go.textContent = 'pause at the first parked result';
    go.addEventListener('click', () => {
      const row = this.host.track().parkedRows[0];
      if (row !== undefined) this.host.moveTo(row);
    });
    box.replaceChildren(text, go);
  }
}

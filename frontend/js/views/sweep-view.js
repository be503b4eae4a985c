// The "What if…" panel: sweeps the open run's own loader replayed with a cost model fitted to its
// fetches (POST /api/runs/{id}/sweeps), or the scenario chosen in the new-run form over one or two
// parameters (POST /api/sweeps), then draws batches/s and the consumer's waiting share against the
// swept value (one line per value of the second parameter), a table of the rows and the recommendation.
// A real run opened starts the panel on its own loader: its recorded settings, its fitted step and,
// once it has ended, its advice on num_workers (GET /api/runs/{id}/advice) with the replays behind it.
// The chart is sweep-chart.js.

import { sweepErrorField, sweepRequest } from '../model/sweep.js';
import { ApiError, errorText, fieldErrors } from './api.js';
import { LOADER_SETTINGS, TRACE_SETTINGS } from '../model/contract.gen.js';
import { rangeText } from './form.js';
import { adviceText, adviceWarns } from '../model/advice.js';
import { say } from '../model/wording.gen.js';
import { drawChart, fmt } from './sweep-chart.js';

/** @param {string} id @returns {any} the page's element of that id (an input, a select, a box: index.html) */
const $ = (id) => /** @type {any} */ (document.getElementById(id));
const FIELDS = ['key', 'values', 'key2', 'values2'];
/** @type {Record<string, string>} */
const DEFAULTS = { num_workers: '1,2,4,8', prefetch_factor: '1,2,4', batch_size: '8,16,32,64' };
const STEP_FILL_MS = 20; // the training step a sweep assumes when the scenario has none
const ADVICE_RETRY_MS = 2000; // the advice shares the sweeps' one slot: asked again while another sweep runs
const ADVICE_TRIES = 30;
// What a replay of a recorded loader can change (the contract's TRACE_SETTINGS), with torch's default and the
// bounds every request meets (LOADER_SETTINGS): its own dataset and batches stay.
/** @typedef {Pick<import('./form.js').Field, 'name' | 'kind'> & Partial<import('./form.js').Field>} SweepField */
/** @type {Record<string, {min: number|null, max: number|null}>} */
const SETTINGS = LOADER_SETTINGS;
/** @type {SweepField[]} */
const RUN_FIELDS = Object.entries(TRACE_SETTINGS).map(([name, kind]) => {
  const { min, max } = SETTINGS[name];
  return { name, kind, ...(min === null ? {} : { min }), ...(max === null ? {} : { max }) };
});

/**
 * What the panel shows: a sweep's answer, with what was swept (`xs`: the first key's values as
 * sent) and the training step it assumed (`stepMs`; null: a run's own loader, its measured step).
 * @typedef {{rows: import('../model/sweep.js').SweepRow[], recommendation?: string|null, key: string, key2: string,
 *   xs: import('../model/sweep.js').SweepValue[], scenario: string, stepMs: number|null, warn?: boolean,
 *   memory?: string[]}} Shown
 */
/**
 * `memory`: a recorded run's settings that would not fit the memory it had, in the server's words
 * (sim.memory_notes; its rows then carry `memory`, `memory_fits`: docs/DESIGN.md §12 Sweeps).
 * The open run, when it is a real loader's: its id, a label, whether it has ended, its loader settings.
 * @typedef {{id: string, label: string, ended: boolean, config: Record<string, unknown>}} OpenRun
 */

/** Bytes as the terminal's sweep table gives them (sim/footprint.py `gb`). @param {number} n */
function gb(n) {
  return n >= 1e9 ? `${(n / 1e9).toFixed(1)} GB` : `${(n / 1e6).toFixed(0)} MB`;
}

export class SweepPanel {
  /**
   * @param {() => ({scenario:string, params:Record<string, any>|null, costs?:object|null})} source
   *   the new-run form: scenario, its parameter values (null if a field is invalid) and fields
   * @param {() => (OpenRun|null)} openRun the open run, if it is a real loader's
   */
  constructor(source, openRun) {
    this.source = source;
    this.openRun = openRun;
    this.viewed = ''; // the real run the panel last started on
    /** @type {import('../model/advice.js').Advice|null} the viewed run's advice, once the server gave it */
    this.advice = null;
    this.adviceAsked = false;
    // the user chose what to sweep (edited a field or swept): the advice, landing later, no longer replaces it
    this.userChose = false;
    /** @type {Promise<void>} the advice being asked for: it holds the server's one sweep slot meanwhile */
    this.advicePending = Promise.resolve();
    /** @type {SweepField[]} the new-run form's fields, kept while the open run is swept instead */
    this.scenarioFields = [];
    this.canvas = document.createElement('canvas');
    this.canvas.setAttribute('data-testid', 'sweep-chart');
    this.canvas.setAttribute('role', 'img');
    this.canvas.dataset.points = '0';
    /** @type {Shown|null} the sweep shown */
    $('sweep-chart-host').append(this.canvas);
    this.last = null;
    $('sweep-form').addEventListener('submit', (/** @type {SubmitEvent} */ ev) => {
      ev.preventDefault();
      this.run();
    });
    $('sweep-key').addEventListener('change', () => this.keyChanged('key'));
    $('sweep-key2').addEventListener('change', () => this.keyChanged('key2'));
    $('sweep-step').addEventListener('input', () => this.stepChanged());
    $('sweep-target').addEventListener('change', () => this.targetChanged());
    for (const f of FIELDS)
      $(`sweep-${f}`).addEventListener('input', () => {
        this.userChose = true;
      });
    window.addEventListener('resize', () => this.redraw());
  }

  /** Whether the sweep replays the open run's own loader (else it simulates the form's scenario). */
  get onRun() {
    return $('sweep-target').value === 'run' && this.openRun() !== null;
  }

  /**
   * The open run or its status changed: a real run newly opened starts the panel on its own loader
   * (the user may still pick the scenario), and its advice is asked for once it has ended.
   */
  runChanged() {
    const run = this.openRun();
    const option = $('sweep-target').querySelector('option[value="run"]');
    option.disabled = run === null;
    option.textContent = run ? `this run's own loader (${run.label})` : "this run's own loader (open a real run)";
    if (run === null) {
      this.viewed = '';
      if ($('sweep-target').value === 'run') {
        $('sweep-target').value = 'scenario';
        this.targetChanged();
      }
      return;
    }
    if (run.id !== this.viewed) {
      Object.assign(this, { viewed: run.id, advice: null, adviceAsked: false, userChose: false });
      $('sweep-target').value = 'run';
      this.targetChanged();
    }
    if (run.ended && !this.adviceAsked) {
      this.adviceAsked = true;
      this.advicePending = this.askAdvice(run.id, ADVICE_TRIES);
    }
  }

  targetChanged() {
    this.clearErrors();
    $('sweep-result').hidden = true;
    this.fieldsChanged(this.scenarioFields, true);
    this.showOwn();
    if (this.onRun && this.advice) this.showAdvice(this.advice);
  }

  /** What the panel replays when it sweeps the open run: its loader as recorded, its fitted step. */
  showOwn() {
    const run = this.onRun ? this.openRun() : null;
    const el = $('sweep-own');
    el.hidden = run === null;
    if (run === null) return;
    const a = this.advice;
    const setting = a
      ? a.setting
      : Object.fromEntries(
          Object.keys(TRACE_SETTINGS)
            .filter((k) => k in run.config)
            .sort()
            .map((k) => [k, run.config[k]]),
        );
    const settings = Object.entries(setting)
      .map(([k, v]) => `${k}=${v}`)
      .join(', ');
    const step =
      a && typeof a.step_ms === 'number'
        ? `; its training step ${fmt(a.step_ms, 1)} ms per batch, fitted to its events`
        : run.ended
          ? ''
          : '; its advice on num_workers comes when the run ends';
    // a run whose settings are not read yet names none, rather than an empty list
    el.textContent = `this run's own loader (${run.label})${settings ? `, as recorded: ${settings}` : ''}${step}`;
  }

  /**
   * GET the viewed run's advice; while another sweep holds the one slot, ask again a little later.
   * @param {string} id @param {number} tries
   */
  async askAdvice(id, tries) {
    let data;
    try {
      const res = await fetch(`/api/runs/${encodeURIComponent(id)}/advice`, { credentials: 'same-origin' });
      if (res.status === 429 && tries > 1) {
        // another sweep holds the slot: ask again when it may have ended
        await new Promise((wait) => {
          setTimeout(wait, ADVICE_RETRY_MS);
        });
        if (id === this.viewed) await this.askAdvice(id, tries - 1);
        return;
      }
      data = await res.json();
      if (!res.ok) throw new ApiError(res.status, data);
    } catch (err) {
      if (id === this.viewed) this.showOwnError(err);
      return;
    }
    if (id !== this.viewed) return;
    this.advice = /** @type {import('../model/advice.js').Advice} */ (data);
    if (!this.onRun) return;
    this.showOwn();
    if (!this.userChose) this.showAdvice(this.advice);
  }

  /** @param {unknown} err */
  showOwnError(err) {
    const b = err instanceof ApiError ? err.body : null;
    $('sweep-error').textContent =
      `no advice on num_workers for this run: ${b ? errorText(b) : err instanceof Error ? err.message : String(err)}`;
    $('sweep-error').hidden = false;
  }

  /**
   * The advice and the replays it was chosen from, as a sweep of num_workers.
   * @param {import('../model/advice.js').Advice} a
   */
  showAdvice(a) {
    const run = this.openRun();
    if (run === null) return;
    const xs = a.rows.map((r) => /** @type {number} */ (r.num_workers));
    if (!xs.length) {
      // nothing was replayed: the reason is all there is
      $('sweep-result').hidden = false;
      $('sweep-rec').textContent = `Recommendation: ${adviceText(a)}`;
      $('sweep-rec').classList.add('warn');
      return;
    }
    $('sweep-key').value = 'num_workers';
    $('sweep-key2').value = '';
    this.keyChanged('key2');
    $('sweep-values').value = xs.join(',');
    $('sweep-status').textContent =
      `${run.label}: the advice's ${xs.length} replay${xs.length === 1 ? '' : 's'} of its own loader`;
    this.last = {
      rows: a.rows,
      recommendation: adviceText(a),
      key: 'num_workers',
      key2: '',
      xs,
      scenario: run.label,
      stepMs: null,
      warn: adviceWarns(a),
    };
    this.show(this.last);
  }

  /**
   * The parameters that can be swept: the scenario's numeric / boolean / choice fields.
   * @param {SweepField[]} fields @param {boolean} [keepScenario]
   */
  fieldsChanged(fields, keepScenario = false) {
    if (!keepScenario) this.scenarioFields = fields;
    if (this.onRun) fields = RUN_FIELDS;
    const usable = fields.filter((f) => f.kind !== 'string');
    const pick = $('sweep-key'),
      pick2 = $('sweep-key2');
    const old = pick.value,
      old2 = pick2.value;
    pick.replaceChildren(...usable.map((f) => new Option(f.name, f.name)));
    pick2.replaceChildren(new Option('— nothing else —', ''), ...usable.map((f) => new Option(f.name, f.name)));
    this.fields = usable;
    pick.value = usable.some((f) => f.name === old)
      ? old
      : usable.some((f) => f.name === 'num_workers')
        ? 'num_workers'
        : (usable[0]?.name ?? '');
    pick2.value = usable.some((f) => f.name === old2) ? old2 : '';
    if (pick.value !== old) this.keyChanged('key');
    this.keyChanged('key2', pick2.value === old2);
    $('btn-sweep').disabled = !usable.length;
    // a scenario without a training step: every sweep would read ~100 % waiting, a flat line
    const step = this.onRun ? undefined : usable.find((f) => f.name === 'step_ms');
    this.stepDefault = step ? Number(step.default ?? 0) : null;
    $('sweep-step-label').hidden = step === undefined;
    $('sweep-step').value = this.stepDefault === 0 ? String(STEP_FILL_MS) : '';
    $('sweep-step').placeholder = this.stepDefault ? String(this.stepDefault) : '0';
    this.stepChanged();
  }

  /** Why the training-step box holds what it holds. */
  stepChanged() {
    const why = $('sweep-step-why');
    const v = $('sweep-step').value;
    const sweptStep = $('sweep-key').value === 'step_ms' || $('sweep-key2').value === 'step_ms';
    $('sweep-step-label').hidden = this.stepDefault === null || this.stepDefault === undefined || sweptStep;
    if (this.stepDefault === 0 && !sweptStep) {
      why.textContent =
        v !== '' && Number(v) > 0
          ? `This scenario has no training step (step_ms = 0): with nothing to do between batches the training ` +
            `loop always waits, whatever the loader does, so the waiting line would be flat at ~100 %. ` +
            `The sweep assumes a ${v} ms step instead; ` +
            'put your own step time here, or 0 to sweep the scenario as it is.'
          : 'step_ms = 0: the training loop does nothing between batches, so it waits ~100 % of the time at every ' +
            'value: expect a flat line.';
      why.hidden = false;
    } else why.hidden = true;
  }

  /**
   * A sensible default list of values for a newly picked parameter.
   * @param {'key'|'key2'} which
   * @param {boolean} [keep]
   */
  keyChanged(which, keep = false) {
    if (this.fields) this.stepChanged();
    const key = $(`sweep-${which}`).value;
    const input = $(which === 'key' ? 'sweep-values' : 'sweep-values2');
    input.disabled = !key;
    if (keep && input.value) return;
    const f = (this.fields ?? []).find((x) => x.name === key);
    input.value = !key
      ? ''
      : (DEFAULTS[key] ??
        (f?.kind === 'bool'
          ? 'false,true'
          : f?.kind === 'enum'
            ? (f.options ?? []).join(',')
            : f?.default !== undefined && f.default !== null
              ? String(f.default)
              : ''));
    const range = f ? rangeText(/** @type {import('./form.js').Field} */ (f)) : '';
    input.placeholder = key ? `e.g. 1,2,4${range ? ` (${range})` : ''}` : ''; // the bounds the server checks
  }

  /** @param {string} field a panel field: key, values, key2, values2 @param {string} message */
  showError(field, message) {
    const el = $(`sweep-${field}-error`);
    const about = field === 'values' ? $('sweep-key').value : field === 'values2' ? $('sweep-key2').value : '';
    el.textContent = about ? `${about} = ${$(`sweep-${field}`).value}: ${message}` : message;
    el.hidden = false;
    $(`sweep-${field}`).setAttribute('aria-invalid', 'true');
  }

  clearErrors() {
    for (const f of FIELDS) {
      $(`sweep-${f}-error`).hidden = true;
      $(`sweep-${f}`).removeAttribute('aria-invalid');
    }
    $('sweep-error').hidden = true;
  }

  async run() {
    this.clearErrors();
    if (this.onRun) return this.runOnOpenRun();
    const src = this.source();
    if (!src.params) {
      $('sweep-error').textContent =
        'a parameter under "Start a run" is not valid; fix it there first (the sweep starts from those values)';
      $('sweep-error').hidden = false;
      return;
    }
    const key = $('sweep-key').value,
      key2 = $('sweep-key2').value;
    const stepText = $('sweep-step').value.trim();
    let params = src.params;
    if (stepText !== '' && key !== 'step_ms' && key2 !== 'step_ms' && this.stepDefault !== null) {
      const ms = Number(stepText);
      if (!Number.isFinite(ms) || ms < 0 || ms > 10000) {
        $('sweep-error').textContent = `training step ${stepText} ms: give a number of ms from 0 to 10000`;
        $('sweep-error').hidden = false;
        return;
      }
      params = { ...params, step_ms: ms };
    }
    const { body, errors } = sweepRequest({
      scenario: src.scenario,
      params,
      costs: src.costs,
      key,
      values: $('sweep-values').value,
      key2,
      values2: $('sweep-values2').value,
    });
    if (!body) {
      for (const [f, m] of Object.entries(errors)) this.showError(f, m);
      return;
    }
    const n = Object.values(body.grid).reduce((m, v) => m * v.length, 1);
    await this.post('/api/sweeps', body, `simulating ${n} run${n === 1 ? '' : 's'} of ${src.scenario}…`, (data) => {
      $('sweep-status').textContent = `${src.scenario}: ${n} simulated run${n === 1 ? '' : 's'}`;
      this.last = { ...data, key, key2, xs: body.grid[key], scenario: src.scenario, stepMs: params.step_ms ?? 0 };
      this.show(this.last);
    });
  }

  /** The open run's own loader, replayed with costs fitted to its fetches, over the chosen values. */
  async runOnOpenRun() {
    // what the user asked for is read now: the advice, landing while this waits, must not replace it
    this.userChose = true;
    const key = $('sweep-key').value,
      key2 = $('sweep-key2').value;
    const { body, errors } = sweepRequest({
      scenario: '',
      params: {},
      key,
      values: $('sweep-values').value,
      key2,
      values2: $('sweep-values2').value,
    });
    if (!body) {
      for (const [f, m] of Object.entries(errors)) this.showError(f, m);
      return;
    }
    $('sweep-status').textContent = "waiting for this run's advice: the server replays one sweep at a time…";
    await this.advicePending;
    const run = this.openRun();
    if (run === null) return;
    const n = Object.values(body.grid).reduce((m, v) => m * v.length, 1);
    await this.post(
      `/api/runs/${encodeURIComponent(run.id)}/sweeps`,
      { grid: body.grid },
      `replaying ${run.label}'s loader ${n} time${n === 1 ? '' : 's'} with costs fitted to its fetches…`,
      (data) => {
        $('sweep-status').textContent = `${run.label}: ${n} replay${n === 1 ? '' : 's'} of its own loader`;
        this.last = { ...data, key, key2, xs: body.grid[key], scenario: run.label, stepMs: null };
        this.show(this.last);
      },
    );
  }

  /** @param {string} url @param {object} body */
  postOnce(url, body) {
    return fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      credentials: 'same-origin',
    });
  }

  /**
   * POST a sweep, show its progress, hand the answer to `done` or place its errors by field.
   * @param {string} url @param {object} body @param {string} progress
   * @param {(data: {rows: import('../model/sweep.js').SweepRow[], recommendation?: string|null}) => void} done
   */
  async post(url, body, progress, done) {
    const key = $('sweep-key').value,
      key2 = $('sweep-key2').value;
    const button = $('btn-sweep');
    button.disabled = true;
    $('sweep-status').textContent = progress;
    try {
      let res = await this.postOnce(url, body);
      // another sweep (another page's, or a run's advice) holds the server's one slot: ask again, as askAdvice does
      for (let tries = ADVICE_TRIES; res.status === 429 && tries > 1; tries -= 1) {
        $('sweep-status').textContent = 'another sweep is running: this one starts when the server has a slot…';
        await new Promise((wait) => {
          setTimeout(wait, ADVICE_RETRY_MS);
        });
        $('sweep-status').textContent = progress;
        res = await this.postOnce(url, body);
      }
      const text = await res.text();
      let data = null;
      try {
        data = text ? JSON.parse(text) : null;
      } catch {
        data = text;
      }
      if (!res.ok) throw new ApiError(res.status, data);
      done(data);
    } catch (err) {
      $('sweep-status').textContent = '';
      const b = /** @type {{errors?: unknown}|null} */ (err instanceof ApiError ? err.body : null);
      let placed = 0;
      for (const p of Array.isArray(b?.errors) ? b.errors : []) {
        const f = sweepErrorField(p.field, key, key2);
        if (f) {
          this.showError(f, `${p.message}${p.allowed ? `; allowed: ${p.allowed}` : ''}`);
          placed += 1;
        }
      }
      if (!placed) {
        const extra = b
          ? fieldErrors(b)
              .map((p) => `${p.field}: ${p.message}`)
              .join('; ')
          : '';
        const why =
          err instanceof ApiError && err.status === 429
            ? 'another sweep is running; try again in a moment'
            : b
              ? errorText(b)
              : err instanceof Error
                ? err.message
                : String(err);
        $('sweep-error').textContent = extra && !why.includes(extra) ? `${why} (${extra})` : why || String(err);
        $('sweep-error').hidden = false;
      }
    } finally {
      button.disabled = false;
    }
  }

  /** @param {Shown} result */
  show(result) {
    $('sweep-result').hidden = false;
    $('sweep-rec').textContent = result.recommendation ? `Recommendation: ${result.recommendation}` : '';
    $('sweep-rec').hidden = !result.recommendation;
    $('sweep-rec').classList.toggle(
      'warn',
      result.warn ?? /starved|not help|no recommendation/.test(result.recommendation ?? ''),
    );
    const notes = result.memory ?? [];
    $('sweep-memory').textContent = notes.map((n) => `Memory: ${n}`).join('\n');
    $('sweep-memory').hidden = !notes.length;
    this.flat(result);
    this.table(result);
    drawChart(this, result);
  }

  /** A flat waiting line says nothing by itself: say why it is flat. @param {Shown} shown */
  flat({ rows, key, stepMs }) {
    const el = $('sweep-flat');
    const waits = (rows ?? []).map((r) => r.input_bound).filter((v) => typeof v === 'number');
    const lo = Math.min(...waits),
      hi = Math.max(...waits);
    let text = '';
    if (waits.length > 1 && hi - lo < 0.03) {
      if (stepMs === null) {
        // a run's own loader: its training step is what the run measured
        text =
          `The waiting line is flat: ${key} does not change how long this run's training loop waits over the ` +
          `values tried.`;
      } else if (lo > 0.9) {
        text =
          `The waiting line is flat near 100 %: ` +
          `the training loop spends ${stepMs ? `only ${stepMs} ms` : 'no time'} per batch, ` +
          `so it waits for data at every ${key} tried. Give it a realistic training step (the box above) to see ` +
          `where loading stops being the bottleneck.`;
      } else if (hi < 0.05) {
        text =
          `The waiting line is flat near 0 %: the training step${stepMs ? ` (${stepMs} ms)` : ''} is slower than ` +
          `loading at every ${key} tried, ` +
          `so the loader is not the bottleneck and ${key} does not matter here.`;
      } else
        text =
          `The waiting line is flat: ${key} does not change how long the training loop waits over the ` +
          `values tried.`;
    }
    el.textContent = text;
    el.hidden = !text;
  }

  /** @param {Shown} shown */
  table({ rows, key, key2 }) {
    const cols = [
      [key, key],
      ...(key2 ? [[key2, key2]] : []),
      ['batches_per_s', 'batches/s'],
      ['input_bound', 'training loop waiting'],
      ['input_bound_steady', say('label.input_bound_steady')],
      ['worker_util', 'workers busy'],
      ['parked_high', 'reorder buffer max'],
      ['wall', 'simulated time'],
      ['batches', 'batches'],
      ...(typeof rows[0]?.memory === 'number' ? [['memory', 'memory']] : []),
    ]; // a recorded run's memory samples
    const best = Math.max(...rows.map((r) => Number(r.batches_per_s) || 0));
    const head = document.createElement('tr');
    for (const [, label] of cols) {
      const th = document.createElement('th');
      th.textContent = label;
      head.append(th);
    }
    const body = rows.map((r) => {
      const tr = document.createElement('tr');
      tr.dataset.testid = 'sweep-row';
      tr.setAttribute('data-testid', 'sweep-row');
      if (r.batches_per_s === best) tr.className = 'best';
      for (const [k] of cols) {
        const td = document.createElement('td');
        const v = r[k];
        if (k === 'input_bound' || k === 'input_bound_steady' || k === 'worker_util')
          td.textContent = typeof v === 'number' ? `${(v * 100).toFixed(0)} %` : '–';
        else if (k === 'wall') td.textContent = typeof v === 'number' ? `${fmt(v)} s` : '–';
        else if (k === 'memory') {
          td.textContent = typeof v === 'number' ? `${gb(v)}${r.memory_fits === false ? ' (over)' : ''}` : '–';
          if (r.memory_fits === false) td.className = 'bad';
        } else td.textContent = v === undefined || v === null ? '–' : fmt(v, k === 'batches_per_s' ? 1 : 2);
        if (k.startsWith('input_bound') && typeof v === 'number' && v > 0.2) td.className = 'bad';
        if (k === 'batches' && r.status && !['done', 'finished', 'ok'].includes(r.status))
          td.textContent += ` (${r.status})`;
        tr.append(td);
      }
      return tr;
    });
    $('sweep-table').replaceChildren(head, ...body);
  }

  /** Draw the chart again (a resize, another theme). */
  redraw() {
    if (this.last) drawChart(this, this.last);
  }
}

// The "Start a run" form: the scenario list, each scenario's parameter fields, the simulator's
// cost model in simulate mode, and POST /api/runs with the server's complaints put next to the
// fields they name. It also tells the what-if panel what to sweep from.

import { api, ApiError, errorText, errorField, fieldErrors } from './api.js';
import { fieldsFromSchema, renderForm } from './form.js';
import { COST_FIELDS, costsFromForm, costField } from '../model/costs.js';

const $ = (/** @type {string} */ id) => /** @type {HTMLElement} */ (document.getElementById(id));

export class RunForm {
  /**
   * @param {{
   *   started: (id: string, mode: string) => void,
   *   fieldsChanged: (fields: import('./form.js').Field[]) => void,
   * }} o `started`: the server accepted a run; `fieldsChanged`: another scenario's parameters
   */
  constructor({ started, fieldsChanged }) {
    this.onStarted = started;
    this.onFields = fieldsChanged;
    /**
     * @type {import('../model/types.js').Scenario[]} the server's scenarios: name, title, description, params (a JSON
     *   schema)
     */
    this.scenarios = [];
    /** @type {ReturnType<typeof renderForm>|null} the parameter fields of the chosen scenario (renderForm's handle) */
    this.form = null;
    /** @type {ReturnType<typeof renderForm>|null} the cost model's fields, made the first time simulate is chosen */
    this.costForm = null;
  }

  bind() {
    $('new-run').addEventListener('submit', (ev) => this.submit(ev));
    $('scenario').addEventListener('change', () => this.showScenario());
    for (const r of document.querySelectorAll('input[name="mode"]'))
      r.addEventListener('change', () => this.showMode());
  }

  async load() {
    let list;
    try {
      list = await api.scenarios();
    } catch (err) {
      $('form-error').textContent = `could not load scenarios: ${err instanceof Error ? err.message : err}`;
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
    // the select cuts long titles: its tooltip has the whole one
    const sel = /** @type {HTMLSelectElement} */ ($('scenario'));
    sel.title = sel.selectedOptions[0]?.textContent ?? '';
    this.form = renderForm($('params'), fieldsFromSchema(sc?.params));
    this.onFields(fieldsFromSchema(sc?.params));
    $('form-error').hidden = true;
    this.showMode();
  }

  /** What the what-if panel sweeps from: the form's scenario, parameters and (in simulate mode) cost model. */
  sweepSource() {
    const scenario = /** @type {HTMLSelectElement} */ ($('scenario')).value;
    const read = this.form ? this.form.read() : { values: {}, errors: {} };
    const bad = Object.entries(read.errors);
    if (bad.length) {
      for (const [field, msg] of bad) this.form?.showError(field, msg);
      /** @type {HTMLDetailsElement} */ ($('params-box')).open = true;
    }
    let costs = null;
    const sim = /** @type {HTMLInputElement} */ ($('mode-sim')).checked;
    if (sim && this.costForm) {
      const c = this.costForm.read();
      if (!Object.keys(c.errors).length) costs = costsFromForm(c.values);
    }
    return { scenario, params: bad.length ? null : read.values, costs };
  }

  showMode() {
    const sim = /** @type {HTMLInputElement} */ ($('mode-sim')).checked;
    $('costs-box').hidden = !sim;
    if (sim && !this.costForm)
      this.costForm = renderForm($('costs'), fieldsFromSchema(COST_FIELDS), { prefix: 'cost-' });
    $('mode-desc').textContent = sim
      ? 'The simulator runs the same protocol on a virtual clock in seconds, then plays it here: pause, step one ' +
        'event or one batch, scrub along the timeline, at any speed.'
      : 'A real torch DataLoader with real worker processes, shown as it runs; pause, step and stop it from ' +
        'the top bar.';
  }

  /** @param {SubmitEvent} ev */
  async submit(ev) {
    ev.preventDefault();
    const name = /** @type {HTMLSelectElement} */ ($('scenario')).value;
    const mode =
      /** @type {HTMLInputElement} */ (document.querySelector('input[name="mode"]:checked'))?.value ?? 'real';
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
    let costs = null;
    if (mode === 'sim' && this.costForm) {
      this.costForm.clearErrors();
      const c = this.costForm.read();
      const wrong = Object.entries(c.errors);
      if (wrong.length) {
        for (const [field, msg] of wrong) this.costForm.showError(field, msg);
        /** @type {HTMLDetailsElement} */ ($('costs-box')).open = true;
        return;
      }
      costs = costsFromForm(c.values);
    }
    const button = /** @type {HTMLButtonElement} */ ($('btn-start'));
    button.disabled = true;
    try {
      const run = await api.start(name, mode, values, costs);
      const id = run?.id;
      if (!id) throw new Error('the server did not return a run id');
      /** @type {HTMLDetailsElement} */ ($('params-box')).open = false; // the run needs the room now
      /** @type {HTMLDetailsElement} */ ($('costs-box')).open = false;
      this.onStarted(id, mode);
    } catch (err) {
      const body = err instanceof ApiError ? err.body : null;
      // each problem next to its field; what names no field of the form goes under the button
      let placed = 0,
        placedCosts = 0;
      for (const p of body ? fieldErrors(body) : []) {
        const cost = costField(p.field);
        if (cost && this.costForm?.showError(cost, p.message)) placedCosts += 1;
        else if (this.form.showError(p.field, p.message)) placed += 1;
      }
      if (placedCosts) /** @type {HTMLDetailsElement} */ ($('costs-box')).open = true;
      const field = placed ? null : body ? errorField(body, this.form.names()) : null;
      const message = body ? errorText(body) : err instanceof Error ? err.message : String(err);
      if (field && this.form.showError(field, message)) placed += 1;
      if (placed) /** @type {HTMLDetailsElement} */ ($('params-box')).open = true;
      else if (!placedCosts) {
        errBox.textContent = message || String(err);
        errBox.hidden = false;
      }
    } finally {
      button.disabled = false;
    }
  }
}

// Scenario parameter forms, generated from the JSON-schema "properties" that /api/scenarios sends.
// fieldsFromSchema and readValue are pure; renderForm builds the DOM.

/**
 * @typedef {{name:string, label:string, kind:'int'|'number'|'bool'|'enum'|'string', default:unknown,
 *   min?:number, max?:number, options?:unknown[], description:string, nullable:boolean}} Field
 */

/** @typedef {import('../model/types.js').FieldSchema} FieldSchema */

/** @typedef {{value: unknown} | {error: string}} Reading an input's value, or what it must be */

/** @param {Record<string, FieldSchema>|null|undefined} properties @returns {Field[]} */
export function fieldsFromSchema(properties) {
  if (!properties || typeof properties !== 'object') return [];
  return Object.entries(properties).map(([name, raw]) => {
    /** @type {FieldSchema} */
    let p = raw || {};
    let nullable = false;
    const alts = p.anyOf || p.oneOf;
    if (Array.isArray(alts)) {
      const real = alts.filter((a) => a && a.type !== 'null');
      nullable = real.length < alts.length;
      p = { ...real[0], ...p, anyOf: undefined, oneOf: undefined };
    }
    /** @type {Field['kind']} */
    const kind = Array.isArray(p.enum)
      ? 'enum'
      : p.type === 'integer'
        ? 'int'
        : p.type === 'number'
          ? 'number'
          : p.type === 'boolean'
            ? 'bool'
            : 'string';
    const min = p.minimum ?? (p.exclusiveMinimum !== undefined ? p.exclusiveMinimum : undefined);
    const max = p.maximum ?? (p.exclusiveMaximum !== undefined ? p.exclusiveMaximum : undefined);
    return {
      name,
      label: name,
      kind,
      default: p.default,
      min,
      max,
      options: p.enum,
      description: p.description || p.title || '',
      nullable,
    };
  });
}

/**
 * Turn an input's string into the JSON value the server expects (or an error message).
 * @param {Field} field @param {string|boolean} raw a checkbox's state, else the input's text
 * @returns {Reading}
 */
export function readValue(field, raw) {
  switch (field.kind) {
    case 'bool':
      return { value: !!raw };
    case 'int': {
      if (raw === '' && field.nullable) return { value: null };
      const v = Number(raw);
      if (raw === '' || !Number.isInteger(v)) return { error: 'a whole number' };
      return bounded(field, v);
    }
    case 'number': {
      if (raw === '' && field.nullable) return { value: null };
      const v = Number(raw);
      if (raw === '' || !Number.isFinite(v)) return { error: 'a number' };
      return bounded(field, v);
    }
    case 'enum': {
      const options = field.options ?? [];
      const v = options.find((o) => String(o) === String(raw));
      return v === undefined ? { error: `one of ${options.join(', ')}` } : { value: v };
    }
    default:
      return { value: String(raw) };
  }
}

/** @param {Field} field @param {number} v @returns {Reading} */
function bounded(field, v) {
  if (field.min !== undefined && v < field.min) return { error: `at least ${field.min}` };
  if (field.max !== undefined && v > field.max) return { error: `at most ${field.max}` };
  return { value: v };
}

/** @param {Field} f */
export function rangeText(f) {
  if (f.min !== undefined && f.max !== undefined) return `${f.min} – ${f.max}`;
  if (f.min !== undefined) return `≥ ${f.min}`;
  if (f.max !== undefined) return `≤ ${f.max}`;
  return '';
}

/**
 * Build inputs for `fields` inside `host`. Returns accessors for values and per-field errors.
 * @param {HTMLElement} host @param {Field[]} fields @param {{prefix?:string}} [o] input ids are `${prefix}${name}`
 */
export function renderForm(host, fields, { prefix = 'param-' } = {}) {
  host.replaceChildren();
  /** @type {Map<string, {field:Field, input:HTMLInputElement|HTMLSelectElement, error:HTMLElement}>} */
  const rows = new Map();
  for (const f of fields) {
    const row = document.createElement('div');
    row.className = `field field-${f.kind}`;
    row.dataset.field = f.name;
    const label = document.createElement('label');
    const id = `${prefix}${f.name}`;
    label.htmlFor = id;
    label.textContent = f.label;
    let input;
    if (f.kind === 'bool') {
      input = document.createElement('input');
      input.type = 'checkbox';
      input.checked = !!f.default;
    } else if (f.kind === 'enum') {
      input = document.createElement('select');
      for (const o of f.options ?? []) {
        const opt = document.createElement('option');
        opt.value = String(o);
        opt.textContent = String(o);
        input.append(opt);
      }
      input.value = String(f.default ?? f.options?.[0]);
    } else {
      input = document.createElement('input');
      input.type = f.kind === 'string' ? 'text' : 'number';
      if (f.kind === 'int') input.step = '1';
      if (f.kind === 'number') input.step = 'any';
      if (f.min !== undefined) input.min = String(f.min);
      if (f.max !== undefined) input.max = String(f.max);
      input.value = f.default === undefined || f.default === null ? '' : String(f.default);
    }
    input.id = id;
    input.name = f.name;
    const help = document.createElement('div');
    help.className = 'field-help';
    const range = rangeText(f);
    help.textContent = [f.description, range && `(${range})`].filter(Boolean).join(' ');
    const error = document.createElement('div');
    error.className = 'field-error';
    error.setAttribute('role', 'alert');
    error.hidden = true;
    if (f.kind === 'bool') {
      row.append(input, label, help, error);
    } else {
      row.append(label, input, help, error);
    }
    host.append(row);
    rows.set(f.name, { field: f, input, error });
  }
  return {
    names: () => [...rows.keys()],
    /** @returns {{values: Record<string, any>, errors: Record<string, string>}} */
    read() {
      /** @type {Record<string, any>} */
      const values = {};
      /** @type {Record<string, string>} */
      const errors = {};
      for (const [name, { field, input }] of rows) {
        const raw = field.kind === 'bool' ? /** @type {HTMLInputElement} */ (input).checked : input.value;
        const r = readValue(field, raw);
        if ('error' in r) errors[name] = `${name} must be ${r.error}`;
        else values[name] = r.value;
      }
      return { values, errors };
    },
    /** @param {string} name @param {string} message @returns {boolean} whether the form has that field */
    showError(name, message) {
      const row = rows.get(name);
      if (!row) return false;
      row.error.textContent = message;
      row.error.hidden = false;
      row.input.setAttribute('aria-invalid', 'true');
      return true;
    },
    clearErrors() {
      for (const { error, input } of rows.values()) {
        error.hidden = true;
        error.textContent = '';
        input.removeAttribute('aria-invalid');
      }
    },
  };
}

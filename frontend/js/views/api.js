// Thin wrappers over the ◆ HTTP routes (same origin; the server's HttpOnly cookie authenticates).

export class ApiError extends Error {
  /** @param {number} status @param {unknown} body the answer's JSON (or text) */
  constructor(status, body) {
    super(errorText(body) || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

/**
 * An answer's JSON object by its keys (null for anything else): error bodies are read defensively.
 * @param {unknown} body @returns {Record<string, unknown>|null}
 */
const keyed = (body) =>
  body !== null && typeof body === 'object' && !Array.isArray(body)
    ? /** @type {Record<string, unknown>} */ (body)
    : null;

/** A readable message from FastAPI-style error bodies ({detail: str | [{loc, msg}]}). @param {unknown} body */
export function errorText(body) {
  if (!body) return '';
  if (typeof body === 'string') return body;
  const b = keyed(body);
  if (!b) return '';
  const d = b.detail ?? b.message ?? b.error;
  if (typeof d === 'string') return d;
  if (Array.isArray(d))
    return d
      .map((x) =>
        typeof x === 'string'
          ? x
          : `${(x.loc || []).filter((/** @type {unknown} */ p) => p !== 'body' && p !== 'params').join('.')}: ${x.msg}`,
      )
      .join('; ');
  const dk = keyed(d);
  if (dk) return String(dk.message || dk.msg || JSON.stringify(dk));
  return '';
}

/**
 * Which form field an error is about: a pydantic `loc`, a `field` key, or a parameter named in the text.
 * @param {unknown} body @param {string[]} names
 * @returns {string|null}
 */
export function errorField(body, names) {
  const d = keyed(body)?.detail ?? body;
  const candidates = [];
  for (const p of fieldErrors(body)) candidates.push(p.field);
  const dk = keyed(d);
  if (dk) {
    if (typeof dk.field === 'string') candidates.push(dk.field);
    if (Array.isArray(dk.loc)) candidates.push(...dk.loc.map(String));
  }
  if (Array.isArray(d)) for (const x of d) if (x && Array.isArray(x.loc)) candidates.push(...x.loc.map(String));
  const field = keyed(body)?.field;
  if (typeof field === 'string') candidates.push(field);
  for (const c of candidates) if (names.includes(c)) return c;
  const text = errorText(body);
  // the longest name first, so `num_samples` wins over `num`
  for (const n of [...names].sort((a, b) => b.length - a.length)) {
    if (new RegExp(`(^|[^A-Za-z0-9_])${n}([^A-Za-z0-9_]|$)`).test(text)) return n;
  }
  return null;
}

/**
 * Per-field problems of a 422: the server's `errors: [{field: "params.x", message, allowed}]`,
 * with the `params.` prefix taken off so they match form field names.
 * @param {unknown} body
 * @returns {{field:string, message:string}[]}
 */
export function fieldErrors(body) {
  const errors = keyed(body)?.errors;
  /** @type {unknown[]} */
  const list = Array.isArray(errors) ? errors : [];
  return list.flatMap((x) => {
    const p = keyed(x);
    if (p === null || typeof p.field !== 'string') return [];
    return [
      {
        field: p.field.replace(/^(body\.)?params\./, ''),
        message: `${p.message ?? 'invalid value'}${p.allowed ? `; allowed: ${p.allowed}` : ''}`,
      },
    ];
  });
}

/**
 * One request; the answer's JSON (or text).
 * @template T the answer as docs/DESIGN.md §6 gives it: the server's word, not checked here
 * @param {string} method @param {string} path @param {unknown} [body]
 * @returns {Promise<T>}
 */
async function call(method, path, body) {
  const res = await fetch(path, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: 'same-origin',
  });
  let data = null;
  const text = await res.text();
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = text;
    }
  }
  if (!res.ok) throw new ApiError(res.status, data);
  return data;
}

/** @typedef {import('../model/types.js').RunBrief} RunBrief */
/** @typedef {import('../model/types.js').RunDetail} RunDetail */

export const api = {
  /** @returns {Promise<Record<string, unknown>>} */
  health: () => call('GET', '/api/health'),
  /** @returns {Promise<import('../model/types.js').Scenario[]>} */
  scenarios: () => call('GET', '/api/scenarios'),
  /** @returns {Promise<RunBrief[]>} */
  runs: () => call('GET', '/api/runs'),
  /** @param {string} id @returns {Promise<RunDetail>} */
  run: (id) => call('GET', `/api/runs/${encodeURIComponent(id)}`),
  /**
   * @param {string} scenario @param {string} mode @param {Record<string, unknown>} params
   * @param {Record<string, unknown>|null} [costs] @returns {Promise<RunDetail>}
   */
  start: (scenario, mode, params, costs = null) =>
    call('POST', '/api/runs', costs ? { scenario, mode, params, costs } : { scenario, mode, params }),
  /** @param {string} id @param {{action?: string, delay?: number}} body @returns {Promise<RunBrief>} */
  control: (id, body) => call('POST', `/api/runs/${encodeURIComponent(id)}/control`, body),
  /**
   * @param {string} id
   * @param {number} after
   * @param {number} limit
   * @returns {Promise<import('../model/types.js').EventsPage>}
   */
  events: (id, after, limit) => call('GET', `/api/runs/${encodeURIComponent(id)}/events?after=${after}&limit=${limit}`),
  /** @param {string} job a logdir job's id @returns {Promise<import('./job-table.js').JobAnswer>} */
  jobTable: (job) => call('GET', `/api/jobs/${encodeURIComponent(job)}/table`),
};

/** The websocket for a run, on the page's own host. @param {string} id @param {number} after */
export function runSocket(id, after) {
  const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
  return new WebSocket(`${proto}//${location.host}/ws/runs/${encodeURIComponent(id)}?after=${after}`);
}

/** The run list's websocket (WS /ws/runs): the whole list, pushed whenever it changes. */
export function runListSocket() {
  const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
  return new WebSocket(`${proto}//${location.host}/ws/runs`);
}

// Thin wrappers over the ◆ HTTP routes (same origin; the server's HttpOnly cookie authenticates).

export class ApiError extends Error {
  /** @param {number} status @param {any} body */
  constructor(status, body) {
    super(errorText(body) || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

/** A readable message from FastAPI-style error bodies ({detail: str | [{loc, msg}]}). */
export function errorText(body) {
  if (!body) return '';
  if (typeof body === 'string') return body;
  const d = body.detail ?? body.message ?? body.error;
  if (typeof d === 'string') return d;
  if (Array.isArray(d)) return d.map((x) => (typeof x === 'string' ? x : `${(x.loc || []).filter((p) => p !== 'body' && p !== 'params').join('.')}: ${x.msg}`)).join('; ');
  if (d && typeof d === 'object') return d.message || d.msg || JSON.stringify(d);
  return '';
}

/**
 * Which form field an error is about: a pydantic `loc`, a `field` key, or a parameter named in the text.
 * @param {any} body @param {string[]} names
 * @returns {string|null}
 */
export function errorField(body, names) {
  const d = body?.detail ?? body;
  const candidates = [];
  for (const p of fieldErrors(body)) candidates.push(p.field);
  if (d && typeof d === 'object' && !Array.isArray(d)) {
    if (typeof d.field === 'string') candidates.push(d.field);
    if (Array.isArray(d.loc)) candidates.push(...d.loc.map(String));
  }
  if (Array.isArray(d)) for (const x of d) if (x && Array.isArray(x.loc)) candidates.push(...x.loc.map(String));
  if (typeof body?.field === 'string') candidates.push(body.field);
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
 * @returns {{field:string, message:string}[]}
 */
export function fieldErrors(body) {
  const list = Array.isArray(body?.errors) ? body.errors : [];
  return list.filter((p) => p && typeof p.field === 'string').map((p) => ({
    field: p.field.replace(/^(body\.)?params\./, ''),
    message: `${p.message ?? 'invalid value'}${p.allowed ? `; allowed: ${p.allowed}` : ''}`,
  }));
}

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
    try { data = JSON.parse(text); } catch { data = text; }
  }
  if (!res.ok) throw new ApiError(res.status, data);
  return data;
}

export const api = {
  health: () => call('GET', '/api/health'),
  scenarios: () => call('GET', '/api/scenarios'),
  runs: () => call('GET', '/api/runs'),
  run: (id) => call('GET', `/api/runs/${encodeURIComponent(id)}`),
  start: (scenario, mode, params, costs = null) => call('POST', '/api/runs', costs ? { scenario, mode, params, costs } : { scenario, mode, params }),
  control: (id, body) => call('POST', `/api/runs/${encodeURIComponent(id)}/control`, body),
  events: (id, after, limit) => call('GET', `/api/runs/${encodeURIComponent(id)}/events?after=${after}&limit=${limit}`),
};

/** The websocket for a run, on the page's own host. */
export function runSocket(id, after) {
  const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
  return new WebSocket(`${proto}//${location.host}/ws/runs/${encodeURIComponent(id)}?after=${after}`);
}

/** The run list's websocket (WS /ws/runs): the whole list, pushed whenever it changes. */
export function runListSocket() {
  const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
  return new WebSocket(`${proto}//${location.host}/ws/runs`);
}

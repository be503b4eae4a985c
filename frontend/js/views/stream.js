// One run's event stream: websocket frames, REST catch-up on resync or holes, dedupe by seq,
// reconnect with after=lastSeq. Nothing is skipped silently: a range the server no longer holds
// is reported as a gap. Transports are injected (tests pass fakes), so this module is pure logic.

import { classifyMessage, invalidReason } from '../model/schema.js';

export const PAGE = 5000; // events per REST page when catching up

/** @typedef {import('../model/types.js').LoaderEvent} LoaderEvent */
/** @typedef {import('../model/types.js').Note} Note */

/**
 * @typedef {Pick<WebSocket, 'onopen' | 'onmessage' | 'onclose' | 'onerror' | 'close'>} SocketLike a WebSocket, or a
 *   test's fake
 */

/**
 * @typedef {object} StreamDeps
 * @property {(after:number) => SocketLike} openSocket returns a WebSocket-like object (onopen/onmessage/onclose/close)
 * @property {(after:number, limit:number) => Promise<unknown>} fetchEvents REST: events with seq > after
 * @property {(events:LoaderEvent[]) => void} onEvents accepted events, in seq order, each seq once
 * @property {(note:Note) => void} [onNote] gaps, invalid events, bad messages
 * @property {(status:string) => void} [onConnection] 'connecting' | 'live' | 'catching up' | 'reconnecting' | 'ended' |
 *   'closed'
 * @property {(meta:Record<string, unknown>) => void} [onRunStatus] hello / status / end messages:
 *   {status, paused, delay, ...}
 * @property {(fn:() => void, ms:number) => unknown} [setTimer]
 */

export class RunStream {
  /** @param {StreamDeps} deps */
  constructor(deps) {
    this.deps = deps;
    this.lastSeq = -1;
    /** @type {SocketLike|null} */
    this.socket = null;
    this.closed = false;
    this.ended = false; // run_end seen: a closing socket is not an error
    this.catchingUp = false;
    /** @type {unknown[][]} frames that came while catching up */
    this.pending = [];
    this.retry = 0;
    this.duplicates = 0;
    this.invalid = 0;
    this.frames = 0;
    this.messages = 0; // websocket messages, their characters, and resyncs: what the page is sent (bench/pipeline.py)
    this.chars = 0;
    this.resyncs = 0;
  }

  start() {
    this.connect();
    return this;
  }

  close() {
    this.closed = true;
    if (this.socket) this.socket.close();
    this.status('closed');
  }

  /** @param {string} s */
  status(s) {
    this.deps.onConnection?.(s);
  }

  /** @param {Note} n */
  note(n) {
    this.deps.onNote?.(n);
  }

  connect() {
    if (this.closed) return;
    this.status(this.retry ? 'reconnecting' : 'connecting');
    const ws = this.deps.openSocket(this.lastSeq);
    this.socket = ws;
    ws.onopen = () => {
      this.retry = 0;
      this.status(this.catchingUp ? 'catching up' : 'live');
    };
    ws.onmessage = (m) => this.message(m.data);
    ws.onclose = () => {
      if (this.socket !== ws) return;
      this.socket = null;
      if (this.closed) return;
      if (this.ended) {
        this.status('ended');
        return;
      }
      this.retry += 1;
      const delay = Math.min(5000, 250 * 2 ** Math.min(this.retry - 1, 5));
      this.status('reconnecting');
      (this.deps.setTimer ?? setTimeout)(() => this.connect(), delay);
    };
    ws.onerror = () => {};
  }

  /** @param {string} data one websocket message */
  message(data) {
    this.messages += 1;
    this.chars += data.length;
    let parsed;
    try {
      parsed = JSON.parse(data);
    } catch {
      this.note({ type: 'bad', reason: 'a websocket message was not JSON' });
      return;
    }
    const m = classifyMessage(parsed);
    if (m.type === 'frame') this.frame(m.events);
    else if (m.type === 'meta') this.meta(m.meta);
    else this.note({ type: 'bad', reason: m.reason });
  }

  /** @param {Record<string, unknown>} meta */
  meta(meta) {
    if (meta.type === 'resync') {
      // We fell behind: the server skipped [from, to]; fetch it over REST, then go on.
      const to = typeof meta.to === 'number' && Number.isInteger(meta.to) ? meta.to : null;
      this.resyncs += 1;
      this.catchUp(to);
    } else if (meta.type === 'gap') {
      // The store no longer holds [from, to]: show it, and move the cursor past it.
      this.note({ ...meta });
      if (typeof meta.to === 'number' && Number.isInteger(meta.to) && meta.to > this.lastSeq) this.lastSeq = meta.to;
    } else if (meta.type === 'hello' || meta.type === 'status') {
      this.deps.onRunStatus?.(meta);
    } else if (meta.type === 'end') {
      this.ended = true; // every event was sent; the server closes the socket next
      this.deps.onRunStatus?.(meta);
    } else {
      this.note({ ...meta });
    }
  }

  /** @param {unknown[]} events */
  frame(events) {
    this.frames += 1;
    if (this.catchingUp) {
      this.pending.push(events);
      return;
    }
    /** @type {LoaderEvent[]} */
    const accepted = [];
    for (let i = 0; i < events.length; i++) {
      const raw = events[i];
      const bad = invalidReason(raw);
      if (bad !== null) {
        this.invalid += 1;
        this.note({ type: 'invalid', reason: bad, event: raw });
        const seq = seqOf(raw);
        if (seq === this.lastSeq + 1) this.lastSeq = seq; // keep counting
        continue;
      }
      const e = /** @type {LoaderEvent} */ (raw); // invalidReason found nothing wrong
      if (e.seq <= this.lastSeq) {
        this.duplicates += 1;
        continue;
      }
      if (e.seq > this.lastSeq + 1) {
        // A hole: deliver what we have, fetch the missing range, then resume with the rest.
        this.emit(accepted);
        this.pending.push(events.slice(i));
        this.catchUp(e.seq - 1);
        return;
      }
      this.lastSeq = e.seq;
      if (e.kind === 'run_end') this.ended = true;
      accepted.push(e);
    }
    this.emit(accepted);
  }

  /** @param {LoaderEvent[]} events */
  emit(events) {
    if (events.length) this.deps.onEvents(events);
  }

  /** Fetch everything after lastSeq up to `to` (or until the server has no more) over REST. @param {number|null} to */
  async catchUp(to) {
    if (this.catchingUp) return;
    this.catchingUp = true;
    this.status('catching up');
    try {
      for (;;) {
        if (to !== null && this.lastSeq >= to) break;
        const limit = to === null ? PAGE : Math.min(PAGE, to - this.lastSeq);
        const page = normalizePage(await this.deps.fetchEvents(this.lastSeq, limit));
        if (page.gap) this.meta({ type: 'gap', ...page.gap });
        /** @type {LoaderEvent[]} */
        const fresh = [];
        for (const raw of page.events) {
          const bad = invalidReason(raw);
          if (bad !== null) {
            this.invalid += 1;
            this.note({ type: 'invalid', reason: bad, event: raw });
            const seq = seqOf(raw);
            if (seq !== null && seq > this.lastSeq) this.lastSeq = seq;
            continue;
          }
          const e = /** @type {LoaderEvent} */ (raw); // invalidReason found nothing wrong
          if (e.seq <= this.lastSeq) {
            this.duplicates += 1;
            continue;
          }
          if (e.seq > this.lastSeq + 1) {
            this.note({ type: 'gap', from: this.lastSeq + 1, to: e.seq - 1, reason: 'missing from the REST answer' });
          }
          this.lastSeq = e.seq;
          if (e.kind === 'run_end') this.ended = true;
          fresh.push(e);
        }
        this.emit(fresh);
        if (page.events.length === 0) {
          if (to !== null && this.lastSeq < to) {
            this.note({ type: 'gap', from: this.lastSeq + 1, to, reason: 'the server no longer holds these events' });
            this.lastSeq = to;
          }
          break;
        }
        if (page.events.length < limit) {
          if (to !== null && this.lastSeq < to) continue; // a short page: ask again for the rest
          break;
        }
      }
    } catch (err) {
      this.note({ type: 'bad', reason: `catching up failed: ${err instanceof Error ? err.message : err}; retrying` });
      this.catchingUp = false;
      (this.deps.setTimer ?? setTimeout)(() => this.catchUp(to), 1000);
      return;
    }
    this.catchingUp = false;
    const frames = this.pending;
    this.pending = [];
    for (const f of frames) this.frame(f);
    if (!this.catchingUp) this.status(this.socket ? 'live' : 'reconnecting');
  }
}

/** The integer `seq` of a decoded value that is not a valid event, or null. @param {unknown} raw */
function seqOf(raw) {
  const seq = raw !== null && typeof raw === 'object' ? /** @type {{seq?: unknown}} */ (raw).seq : undefined;
  return typeof seq === 'number' && Number.isInteger(seq) ? seq : null;
}

/**
 * REST answers may be a bare list or {events, gap}.
 * @param {unknown} body
 * @returns {{events: unknown[], gap: Record<string, unknown>|null}}
 */
export function normalizePage(body) {
  if (Array.isArray(body)) return { events: body, gap: null };
  if (body && typeof body === 'object') {
    const page = /** @type {Record<string, unknown>} */ (body);
    const events = Array.isArray(page.events) ? page.events : [];
    const gap = page.gap && typeof page.gap === 'object' ? /** @type {Record<string, unknown>} */ (page.gap) : null;
    return { events, gap };
  }
  return { events: [], gap: null };
}

// One run's event stream: websocket frames, REST catch-up on resync or holes, dedupe by seq,
// reconnect with after=lastSeq. Nothing is skipped silently: a range the server no longer holds
// is reported as a gap. Transports are injected (tests pass fakes), so this module is pure logic.

import { classifyMessage, invalidReason } from './schema.js';

export const PAGE = 5000; // events per REST page when catching up

/**
 * @typedef {object} StreamDeps
 * @property {(after:number) => any} openSocket returns a WebSocket-like object (onopen/onmessage/onclose/close)
 * @property {(after:number, limit:number) => Promise<any>} fetchEvents REST: events with seq > after
 * @property {(events:any[]) => void} onEvents accepted events, in seq order, each seq once
 * @property {(note:{type:string, [k:string]:any}) => void} [onNote] gaps, invalid events, bad messages
 * @property {(status:string) => void} [onConnection] 'connecting' | 'live' | 'catching up' | 'reconnecting' | 'ended' | 'closed'
 * @property {(meta:any) => void} [onRunStatus] hello / status / end messages: {status, paused, delay, ...}
 * @property {(fn:() => void, ms:number) => any} [setTimer]
 */

export class RunStream {
  /** @param {StreamDeps} deps */
  constructor(deps) {
    this.deps = deps;
    this.lastSeq = -1;
    this.socket = null;
    this.closed = false;
    this.ended = false; // run_end seen: a closing socket is not an error
    this.catchingUp = false;
    /** @type {any[][]} frames that came while catching up */
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

  status(s) {
    this.deps.onConnection?.(s);
  }

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

  meta(meta) {
    if (meta.type === 'resync') {
      // We fell behind: the server skipped [from, to]; fetch it over REST, then go on.
      const to = Number.isInteger(meta.to) ? meta.to : null;
      this.resyncs += 1;
      this.catchUp(to);
    } else if (meta.type === 'gap') {
      // The store no longer holds [from, to]: show it, and move the cursor past it.
      this.note({ ...meta });
      if (Number.isInteger(meta.to) && meta.to > this.lastSeq) this.lastSeq = meta.to;
    } else if (meta.type === 'hello' || meta.type === 'status') {
      this.deps.onRunStatus?.(meta);
    } else if (meta.type === 'end') {
      this.ended = true; // every event was sent; the server closes the socket next
      this.deps.onRunStatus?.(meta);
    } else {
      this.note({ ...meta });
    }
  }

  /** @param {any[]} events */
  frame(events) {
    this.frames += 1;
    if (this.catchingUp) {
      this.pending.push(events);
      return;
    }
    const accepted = [];
    for (let i = 0; i < events.length; i++) {
      const e = events[i];
      const bad = invalidReason(e);
      if (bad !== null) {
        this.invalid += 1;
        this.note({ type: 'invalid', reason: bad, event: e });
        if (e && Number.isInteger(e.seq) && e.seq === this.lastSeq + 1) this.lastSeq = e.seq; // keep counting
        continue;
      }
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

  emit(events) {
    if (events.length) this.deps.onEvents(events);
  }

  /** Fetch everything after lastSeq up to `to` (or until the server has no more) over REST. */
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
        const fresh = [];
        for (const e of page.events) {
          const bad = invalidReason(e);
          if (bad !== null) {
            this.invalid += 1;
            this.note({ type: 'invalid', reason: bad, event: e });
            if (e && Number.isInteger(e.seq) && e.seq > this.lastSeq) this.lastSeq = e.seq;
            continue;
          }
          if (e.seq <= this.lastSeq) { this.duplicates += 1; continue; }
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
      this.note({ type: 'bad', reason: `catching up failed: ${err?.message ?? err}; retrying` });
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

/** REST answers may be a bare list or {events, gap}. */
export function normalizePage(body) {
  if (Array.isArray(body)) return { events: body, gap: null };
  if (body && typeof body === 'object') {
    const events = Array.isArray(body.events) ? body.events : [];
    const gap = body.gap && typeof body.gap === 'object' ? body.gap : null;
    return { events, gap };
  }
  return { events: [], gap: null };
}

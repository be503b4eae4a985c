// Ranks side by side: a card per rank (its batches, rate, wait share, workers, how often it was the
// slowest to deliver a step) and the shard check per epoch. Click a card to show that rank in the
// picture. The logic is in ranks.js; this draws it, and only when something changed.

import { shardReport, slowestPerStep, slowestCounts } from './ranks.js';
import { recentRate } from './panels.js';
import { fmtDuration } from './timeline-store.js';

export class RanksView {
  /** @param {HTMLElement} host @param {(i:number) => void} onSelect @param {() => void} onChange */
  constructor(host, onSelect, onChange) {
    this.host = host;
    this.onSelect = onSelect;
    this.onChange = onChange;
    this.reset();
  }

  /** The next render writes the cards again (another rank was selected). */
  invalidate() {
    this.key = '';
  }

  /** A new run: forget the shard checks of the old one. */
  reset() {
    this.key = '';
    /** @type {Map<number, any>} epoch -> shard report (null while decoding) */
    this.shards = new Map();
  }

  /** @param {import('./track.js').Track[]} tracks @param {import('./track.js').Track} selected */
  render(tracks, selected) {
    const host = this.host;
    if (tracks.length < 2) { host.hidden = true; return; }
    host.hidden = false;
    // the slowest rank per step, for every epoch the ranks reached; each track keeps its own ticks
    const epochs = new Set();
    for (const tr of tracks) for (const ep of tr.yields.keys()) epochs.add(ep);
    const steps = [];
    for (const tr of tracks) tr.slow = [];
    for (const ep of [...epochs].sort((a, b) => a - b)) {
      const times = new Map(tracks.map((tr) => [tr.rank, tr.yields.get(ep) ?? []]));
      for (const s of slowestPerStep(times)) {
        steps.push(s);
        const tr = tracks.find((x) => x.rank === s.rank);
        tr.slow.push(times.get(s.rank)[s.step] - tr.wall0);
      }
    }
    const counts = slowestCounts(steps);
    // shard checks, for each epoch every rank reported one for (decoded once, asynchronously)
    const shardEpochs = [...tracks[0].epochEnds.keys()].filter((ep) => tracks.every((tr) => tr.epochEnds.has(ep)));
    for (const ep of shardEpochs) {
      if (this.shards.has(ep)) continue;
      const ends = new Map(tracks.map((tr) => [tr.rank, tr.epochEnds.get(ep)]));
      this.shards.set(ep, null);
      shardReport(ends, tracks[0].epochEnds.get(ep).shard_length).then(
        (r) => { this.shards.set(ep, r); this.invalidate(); this.onChange(); },
        (err) => { this.shards.set(ep, { error: String(err?.message ?? err) }); this.invalidate(); this.onChange(); },
      );
    }
    const cards = tracks.map((tr, i) => {
      const s = tr.player.state;
      const wall = (s.last_yield_t ?? s.t) - (s.first_t ?? 0);
      const share = wall > 0 ? s.consumer_wait / wall : 0;
      const c = counts.get(tr.rank);
      return {
        i, rank: tr.rank, selected: tr === selected, file: tr.source === 'file' ? tr.label : '',
        line: `${s.batches} batches · ${recentRate(tr.store.consumer, s.t).toFixed(1)}/s · waited ${(share * 100).toFixed(0)}%`,
        slow: steps.length ? `slowest in ${c ? c.steps : 0} of ${steps.length} steps${c ? ` (worst ${fmtDuration(c.worst)} behind)` : ''}` : 'no step yet',
        workers: [...s.workers.values()].sort((a, b) => a.id - b.id).map((w) => w.status),
      };
    });
    const shardLines = shardEpochs.map((ep) => ({ ep, r: this.shards.get(ep) }));
    const key = JSON.stringify([cards, shardLines]);
    if (key === this.key) return;
    this.key = key;
    const head = document.createElement('div');
    head.className = 'ranks-head';
    head.textContent = `${tracks.length} ranks of job ${selected.player.full.meta.job ?? '(files)'} — click one to show it in the picture; `
      + 'the timeline shows all of them on one clock, and a tick under a consumer row marks a step that rank delivered last';
    host.replaceChildren(head, ...cards.map((c) => this.card(c)), this.shardBox(shardLines));
  }

  card(c) {
    const card = document.createElement('button');
    card.type = 'button';
    card.className = `rank-card${c.selected ? ' selected' : ''}`;
    card.setAttribute('data-testid', 'rank-card');
    card.dataset.rank = String(c.rank);
    card.title = c.file || `rank ${c.rank}`;
    const title = document.createElement('b');
    title.textContent = `rank ${c.rank}${c.selected ? ' · shown' : ''}`;
    const chips = document.createElement('span');
    chips.className = 'chips';
    chips.title = `workers: ${c.workers.join(', ')}`;
    for (const st of c.workers) {
      const chip = document.createElement('i');
      chip.className = `wchip ${st}`;
      chips.append(chip);
    }
    const line = document.createElement('div');
    line.textContent = c.line;
    const slow = document.createElement('div');
    slow.className = 'slow';
    slow.textContent = c.slow;
    card.append(title, chips, line, slow);
    card.addEventListener('click', () => this.onSelect(c.i));
    return card;
  }

  shardBox(lines) {
    const box = document.createElement('div');
    box.className = 'shards';
    box.setAttribute('data-testid', 'shards');
    if (!lines.length) box.textContent = 'sample shards: checked when every rank has ended an epoch (runs with a DistributedSampler report what each rank read)';
    for (const { ep, r } of lines) {
      const div = document.createElement('div');
      if (!r) div.textContent = `epoch ${ep}: checking shards…`;
      else if (r.error) div.textContent = `epoch ${ep}: the shard digests could not be read: ${r.error}`;
      else {
        const per = Object.entries(r.per_rank).map(([rank, n]) => `rank ${rank}: ${n}`).join(', ');
        div.className = r.disjoint && r.complete ? 'ok' : 'bad';
        div.dataset.disjoint = String(r.disjoint);
        div.dataset.complete = String(r.complete);
        div.textContent = `epoch ${ep} shards: ${r.disjoint ? 'disjoint ✓' : `OVERLAP: ${r.overlap} indices read by more than one rank (e.g. ${r.overlap_sample.join(', ')})`} · `
          + `${r.complete ? 'complete ✓' : `MISSING: ${r.missing} indices read by no rank (e.g. ${r.missing_sample.join(', ')})`} (${per} samples)`;
      }
      box.append(div);
    }
    return box;
  }
}

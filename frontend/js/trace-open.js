// Opening trace files: the Open button, drag-and-drop anywhere on the page, the progress box, and
// the refusal of files that are not traces. Each file becomes a Track (a rank), replayed like a
// finished run; the page is handed the tracks once every file is read.

import { Track } from './track.js';
import { readTraceFileInWorkers, TraceError } from './trace-file.js';

// Web Workers that parse a file's segments side by side: one core is left to the page's thread,
// which applies the events (as costly as parsing them). `?parsers=N` in the page's address
// overrides it, for benchmarks.
const PARSERS = Number(new URLSearchParams(globalThis.location?.search).get('parsers')) ||
  Math.max(1, Math.min(3, (globalThis.navigator?.hardwareConcurrency ?? 2) - 1));

const $ = (/** @type {string} */ id) => /** @type {HTMLElement} */ (document.getElementById(id));

/**
 * What a finished read hands to the page.
 * @typedef {{tracks: Track[], files: number, events: number, ms: number, bytes: number}} Opened
 * @typedef {{ms: number, events: number, files: number, bytes: number}} LoadPerf the last load, measured
 */

export class TraceOpener {
  /**
   * @param {{load: LoadPerf|null}} perf the page's measurements: the last load's ms, events, files and bytes go to `load`
   * @param {(opened: Opened) => void} onOpened called when at least one file could be read
   */
  constructor(perf, onOpened) {
    this.perf = perf;
    this.onOpened = onOpened;
  }

  bind() {
    $('btn-open').addEventListener('click', () => $('file-input').click());
    $('file-input').addEventListener('change', (ev) => {
      const input = /** @type {HTMLInputElement} */ (ev.target);
      this.open(input.files ?? []).finally(() => { input.value = ''; });
    });
    $('file-error-close').addEventListener('click', () => { $('file-error').hidden = true; });
    // dragenter/dragleave fire for every child crossed: count them so the overlay does not flicker
    let depth = 0;
    const drop = $('drop');
    window.addEventListener('dragenter', (ev) => {
      if (!ev.dataTransfer?.types?.includes('Files')) return;
      depth += 1;
      drop.hidden = false;
    });
    window.addEventListener('dragleave', () => { depth = Math.max(0, depth - 1); if (!depth) drop.hidden = true; });
    window.addEventListener('dragover', (ev) => { if (ev.dataTransfer?.types?.includes('Files')) ev.preventDefault(); });
    window.addEventListener('drop', (ev) => {
      ev.preventDefault();
      depth = 0;
      drop.hidden = true;
      if (ev.dataTransfer?.files?.length) this.open(ev.dataTransfer.files);
    });
  }

  /** Open dropped or picked trace files: one track per file (per rank). @param {FileList|File[]} list */
  async open(list) {
    const files = [...list];
    if (!files.length) return;
    /** @type {string[]} */
    const errors = [];
    const total = files.reduce((s, f) => s + f.size, 0);
    const t0 = performance.now();
    $('loading').hidden = false;
    const tracks = await this.readAll(files, total, errors);
    const ms = performance.now() - t0;
    $('loading').hidden = true;
    const events = tracks.reduce((s, tr) => s + tr.player.length, 0);
    this.perf.load = { ms, events, files: files.length, bytes: total };
    $('file-error').hidden = !errors.length;
    $('file-error-text').textContent = errors.join('\n');
    if (!tracks.length) return;
    rankTracks(tracks);
    for (const tr of tracks) tr.player.following = false;
    this.onOpened({ tracks, files: files.length, events, ms, bytes: total });
  }

  /**
   * Read each file into a track; a file refused outright adds its reason to `errors`.
   * @param {File[]} files @param {number} total their bytes @param {string[]} errors
   */
  async readAll(files, total, errors) {
    /** @type {Track[]} */
    const tracks = [];
    let before = 0;
    for (const file of files) {
      const tr = new Track({ rank: tracks.length, label: file.name, source: 'file' });
      $('loading-text').textContent = `reading ${file.name}…`;
      let reserved = false;
      try {
        await readTraceFileInWorkers(file, {
          workers: PARSERS,
          onHeader: (h) => { tr.header = h; },
          onRows: (rows) => tr.ingestRows(rows),
          onProgress: (done) => {
            if (!reserved && done < file.size) reserved = reserveRows(tr, done, file.size);
            const frac = total ? (before + done) / total : 1;
            $('loading-bar').style.width = `${(frac * 100).toFixed(1)}%`;
            $('loading-text').textContent = `reading ${file.name}: ${tr.player.length.toLocaleString('en')} events`;
          },
        });
      } catch (err) {
        if (!(err instanceof TraceError)) throw err;
        if (!tr.player.length) { errors.push(err.message); before += file.size; continue; }
        tr.fileError = err.message; // keep what came before the damage, and say where it is
        tr.note({ type: 'bad', reason: err.message });
      }
      before += file.size;
      tr.complete = true;
      tracks.push(tr);
    }
    return tracks;
  }
}

/**
 * Size the track's event table for the whole file from the rows its first bytes held, so that a
 * long trace is not copied into twice-larger columns as it grows (and does not end up with up to
 * twice the memory it needs). Returns whether an estimate could be made.
 * @param {Track} tr @param {number} bytesRead @param {number} fileBytes
 */
function reserveRows(tr, bytesRead, fileBytes) {
  const rows = tr.player.length;
  if (!rows || !bytesRead) return false;
  tr.player.table.reserve(Math.ceil((rows * fileBytes / bytesRead) * 1.03));
  return true;
}

/** Ranks from each run_start (files without one, or with a rank taken twice, keep their order). @param {Track[]} tracks */
function rankTracks(tracks) {
  for (const tr of tracks) {
    const meta = tr.player.full.meta;
    if (tracks.length > 1 && Number.isInteger(meta.rank) && !tracks.some((o) => o !== tr && o.player.full.meta.rank === meta.rank)) tr.rank = meta.rank;
  }
  tracks.sort((a, b) => a.rank - b.rank);
}

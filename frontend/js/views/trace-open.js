// Opening trace files: the Open button, drag-and-drop anywhere on the page, the progress box, and
// the refusal of files that are not traces. Each file becomes a Track (a rank), replayed like a
// finished run; the page is handed the tracks once every file is read.

import { Track } from '../model/track.js';
import { PART_NAME, readTraceFileInWorkers, TraceError } from './trace-file.js';

// Web Workers that parse a file's segments side by side: one core is left to the page's thread,
// which applies the events (as costly as parsing them). `?parsers=N` in the page's address
// overrides it, for benchmarks.
const PARSERS =
  Number(new URLSearchParams(globalThis.location?.search).get('parsers')) ||
  Math.max(1, Math.min(3, (globalThis.navigator?.hardwareConcurrency ?? 2) - 1));

// The Parquet reader and its decoders (a dozen modules) load when a Parquet trace is first opened,
// not with the page: a 1,024-rank job's view, opened on 2 cores, competes with its table for them.
const parquetReader = () => import('./parquet-trace.js');

const $ = (/** @type {string} */ id) => /** @type {HTMLElement} */ (document.getElementById(id));

/**
 * What a finished read hands to the page.
 * @typedef {{tracks: Track[], files: number, events: number, ms: number, bytes: number}} Opened
 * @typedef {{ms: number, events: number, files: number, bytes: number}} LoadPerf the last load, measured
 * A trace to read: a JSON-lines file, or the part files of a Parquet trace (in order).
 * @typedef {{name: string, size: number, file?: File, parts?: File[]}} TraceInput
 */

const PICKED_PARTS = 'Parquet trace'; // part files picked without their directory: named by their run once read

/**
 * Picked or dropped files as traces: each file one trace, except the part files of a Parquet trace
 * (`part-N.parquet`), which make one trace per directory they came from (all picked parts, one).
 * A directory's other files (a writer's unfinished `.part-N.parquet.tmp`) are no part of it.
 * @param {Array<{file: File, dir?: string}>} entries @returns {TraceInput[]}
 */
export function groupTraces(entries) {
  /** @type {TraceInput[]} */
  const traces = [];
  /** @type {Map<string, TraceInput>} */
  const byDir = new Map();
  for (const { file, dir } of entries) {
    if (!PART_NAME.test(file.name)) {
      if (dir === undefined) traces.push({ name: file.name, size: file.size, file });
      continue;
    }
    const key = dir ?? '';
    let trace = byDir.get(key);
    if (!trace) {
      trace = { name: dir || PICKED_PARTS, size: 0, parts: [] };
      byDir.set(key, trace);
      traces.push(trace);
    }
    trace.parts?.push(file);
    trace.size += file.size;
  }
  for (const trace of byDir.values()) trace.parts?.sort((a, b) => (a.name < b.name ? -1 : 1));
  return traces;
}

/**
 * The files of a drop, a dropped directory's own files with its name (a Parquet trace), read
 * from the entries taken while the drop event lasted.
 * @param {DataTransfer} data @returns {Promise<Array<{file: File, dir?: string}>>}
 */
async function droppedFiles(data) {
  const entries = [...data.items].map((item) => item.webkitGetAsEntry?.() ?? null);
  if (entries.some((e) => e === null)) return [...data.files].map((file) => ({ file }));
  /** @type {Array<{file: File, dir?: string}>} */
  const files = [];
  for (const entry of /** @type {FileSystemEntry[]} */ (entries)) {
    if (entry.isDirectory) {
      for (const child of await directoryEntries(/** @type {FileSystemDirectoryEntry} */ (entry))) {
        if (child.isFile)
          files.push({ file: await fileOf(/** @type {FileSystemFileEntry} */ (child)), dir: entry.name });
      }
    } else if (entry.isFile) {
      files.push({ file: await fileOf(/** @type {FileSystemFileEntry} */ (entry)) });
    }
  }
  return files;
}

/** @param {FileSystemDirectoryEntry} dir @returns {Promise<FileSystemEntry[]>} */
async function directoryEntries(dir) {
  const reader = dir.createReader();
  /** @type {FileSystemEntry[]} */
  const all = [];
  for (;;) {
    // readEntries gives at most 100 at a time
    const batch = await new Promise((resolve, reject) => reader.readEntries(resolve, reject));
    if (!batch.length) return all;
    all.push(...batch);
  }
}

/** @param {FileSystemFileEntry} entry @returns {Promise<File>} */
function fileOf(entry) {
  return new Promise((resolve, reject) => entry.file(resolve, reject));
}

export class TraceOpener {
  /**
   * @param {{load: LoadPerf|null}} perf the page's measurements: the last load's ms, events, files and bytes go to
   *   `load`
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
      this.open([...(input.files ?? [])].map((file) => ({ file }))).finally(() => {
        input.value = '';
      });
    });
    $('file-error-close').addEventListener('click', () => {
      $('file-error').hidden = true;
    });
    // dragenter/dragleave fire for every child crossed: count them so the overlay does not flicker
    let depth = 0;
    const drop = $('drop');
    window.addEventListener('dragenter', (ev) => {
      if (!ev.dataTransfer?.types?.includes('Files')) return;
      depth += 1;
      drop.hidden = false;
    });
    window.addEventListener('dragleave', () => {
      depth = Math.max(0, depth - 1);
      if (!depth) drop.hidden = true;
    });
    window.addEventListener('dragover', (ev) => {
      if (ev.dataTransfer?.types?.includes('Files')) ev.preventDefault();
    });
    window.addEventListener('drop', (ev) => {
      ev.preventDefault();
      depth = 0;
      drop.hidden = true;
      if (ev.dataTransfer?.files?.length) droppedFiles(ev.dataTransfer).then((files) => this.open(files));
    });
  }

  /**
   * Open dropped or picked trace files: one track per trace (per rank); a Parquet trace's part
   * files make one trace (groupTraces).
   * @param {Array<{file: File, dir?: string}>} entries
   */
  async open(entries) {
    const traces = groupTraces(entries);
    if (!traces.length) return;
    /** @type {string[]} */
    const errors = [];
    const total = traces.reduce((s, t) => s + t.size, 0);
    const t0 = performance.now();
    $('loading').hidden = false;
    const tracks = await this.readAll(traces, total, errors);
    const ms = performance.now() - t0;
    $('loading').hidden = true;
    const events = tracks.reduce((s, tr) => s + tr.player.length, 0);
    this.perf.load = { ms, events, files: entries.length, bytes: total };
    $('file-error').hidden = !errors.length;
    $('file-error-text').textContent = errors.join('\n');
    if (!tracks.length) return;
    rankTracks(tracks);
    for (const tr of tracks) tr.player.following = false;
    this.onOpened({ tracks, files: entries.length, events, ms, bytes: total });
  }

  /**
   * Read each trace into a track; a trace refused outright adds its reason to `errors`.
   * @param {TraceInput[]} traces @param {number} total their bytes @param {string[]} errors
   */
  async readAll(traces, total, errors) {
    /** @type {Track[]} */
    const tracks = [];
    let before = 0;
    for (const trace of traces) {
      const tr = new Track({ rank: tracks.length, label: trace.name, source: 'file' });
      $('loading-text').textContent = `reading ${trace.name}…`;
      let reserved = false;
      /** @type {import('./trace-file.js').ReadOptions} */
      const options = {
        workers: PARSERS,
        onHeader: (h) => {
          tr.header = h;
          if (trace.name === PICKED_PARTS && typeof h.run === 'string') tr.label = `${h.run}.trace.parquet`;
        },
        onRows: (rows) => tr.ingestRows(rows),
        onCount: (events) => {
          reserved = true;
          tr.player.table.reserve(events);
        },
        onProgress: (done) => {
          if (!reserved && done < trace.size) reserved = reserveRows(tr, done, trace.size);
          const frac = total ? (before + done) / total : 1;
          $('loading-bar').style.width = `${(frac * 100).toFixed(1)}%`;
          $('loading-text').textContent = `reading ${trace.name}: ${tr.player.length.toLocaleString('en')} events`;
        },
      };
      try {
        if (trace.parts) await (await parquetReader()).readParquetTraceInWorkers(trace.parts, trace.name, options);
        else if (trace.file) await readTraceFileInWorkers(trace.file, options);
      } catch (err) {
        if (!(err instanceof TraceError)) throw err;
        if (!tr.player.length) {
          errors.push(err.message);
          before += trace.size;
          continue;
        }
        tr.fileError = err.message; // keep what came before the damage, and say where it is
        tr.note({ type: 'bad', reason: err.message });
      }
      before += trace.size;
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
  tr.player.table.reserve(Math.ceil(((rows * fileBytes) / bytesRead) * 1.03));
  return true;
}

/**
 * Ranks from each run_start (files without one, or with a rank taken twice, keep their order).
 * @param {Track[]} tracks
 */
function rankTracks(tracks) {
  for (const tr of tracks) {
    const meta = tr.player.full.meta;
    if (
      tracks.length > 1 &&
      Number.isInteger(meta.rank) &&
      !tracks.some((o) => o !== tr && o.player.full.meta.rank === meta.rank)
    )
      tr.rank = meta.rank;
  }
  tracks.sort((a, b) => a.rank - b.rank);
}

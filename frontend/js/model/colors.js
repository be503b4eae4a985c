// Task colors: neighbouring task ids get far-apart hues (golden angle), so a task that overtakes
// its predecessor stands out. Pure.

const GOLDEN = 137.508;

/** @param {number} idx task id @returns {number} hue in degrees */
export function taskHue(idx) {
  return (((idx * GOLDEN) % 360) + 360) % 360;
}

/** Fill color of a task token. @param {number} idx @param {number} [lightness] */
export function taskColor(idx, lightness = 58) {
  return `hsl(${taskHue(idx).toFixed(1)} 70% ${lightness}%)`;
}

/** Text color that reads on a task token (dark on the light yellow/green hues). @param {number} idx */
export function taskInk(idx) {
  const h = taskHue(idx);
  return h > 40 && h < 200 ? '#10141c' : '#ffffff';
}

/**
 * The canvases' colours, one set per theme (the page's own CSS has the same two themes as
 * light-dark() variables): text colours reach 4.5:1 on the backgrounds they are drawn on
 * (tests/browser/test_views_themes_and_axe.py measures it from the pixels).
 * @typedef {typeof DARK} Palette
 */
const DARK = {
  bg: '#0f141b',
  panel: '#161d27',
  panelEdge: '#2a3444',
  ink: '#e6edf3',
  dim: '#8b98a9', // secondary text
  faint: '#4b5768', // lines only: too faint for text
  accent: '#58a6ff',
  buffer: '#f2b84b', // reorder buffer: data parked, waiting for the head-of-line task
  wait: '#f0616d', // consumer waiting for data
  ok: '#3fb950',
  stuck: '#ff7b72',
  fetch: '#2f81f7',
  pin: '#56b6c8', // the pin-memory thread
  alarmInk: '#ffd7d5', // text on a stuck or dead thing
  // the timeline
  axis: '#10161e',
  axisSeek: '#141c27', // the axis strip when it is a scrubber
  grid: '#222c39',
  groupBg: '#1a2230',
  rowA: '#0f141b',
  rowB: '#121821',
  pinRowBg: '#101a1f',
  pinInk: '#8fd3e0',
  hatch: '#1a222c',
  consumerRowBg: '#15121a',
  memUss: '#b187f0', // a process's private memory (USS) on its memory lane
  memShared: '#4e4168', // its shared memory, stacked above the USS in a lighter tone of the lane
  headroom: '#2f8f45', // the host's headroom lane
  epochLine: '#5b6b82',
  epochInk: '#9fb0c6',
  future: 'rgba(11,16,22,0.55)', // after the playhead
  spanEdge: 'rgba(0,0,0,0.35)', // the line between two neighbouring spans
  selection: 'rgba(88,166,255,0.16)', // a selected time range
  hit: '#ffffff', // a search hit's outline
  // the pipeline picture
  alarmTint: '#3a1d22',
  alarmFetch: '#4a1f27',
  exitedTint: '#12171e',
  fetchBox: '#1b2533',
  fetchEdge: '#2d3b50',
  arrow: '#2b3545',
  arrowDim: '#3a4558',
  pinBox: '#14222a',
  pinEdge: '#3d7f8f',
  bufferFull: '#2e2614',
  rcvdBox: '#14202e',
  hatchStroke: '#1f2732',
  failedToken: '#5a1e25',
  // charts
  plotBg: '#121821',
  chartGrid: '#1f2935',
  /** @type {readonly string[]} one per line of a chart */
  lines: ['#58a6ff', '#f2b84b', '#3fb950', '#d2a8ff', '#ff7b72', '#79c0ff'],
};

/** @type {Palette} */
const LIGHT = {
  bg: '#ffffff',
  panel: '#f6f8fa',
  panelEdge: '#d0d7de',
  ink: '#1f2328',
  dim: '#57606a',
  faint: '#8c959f',
  accent: '#0969da',
  buffer: '#bf8700',
  wait: '#cf222e',
  ok: '#1a7f37',
  stuck: '#cf222e',
  fetch: '#0969da',
  pin: '#1b7c83',
  alarmInk: '#82071e',
  axis: '#f0f3f6',
  axisSeek: '#e8edf3',
  grid: '#d8dee4',
  groupBg: '#eaeef2',
  rowA: '#ffffff',
  rowB: '#f6f8fa',
  pinRowBg: '#eef7f8',
  pinInk: '#1b6f76',
  hatch: '#e4e8ec',
  consumerRowBg: '#fbf3f4',
  memUss: '#8250df',
  memShared: '#ddd0f7',
  headroom: '#4fae6a',
  epochLine: '#8c959f',
  epochInk: '#424a53',
  future: 'rgba(255,255,255,0.6)',
  spanEdge: 'rgba(255,255,255,0.6)',
  selection: 'rgba(9,105,218,0.12)',
  hit: '#1f2328',
  alarmTint: '#ffebe9',
  alarmFetch: '#ffd8d3',
  exitedTint: '#f0f3f6',
  fetchBox: '#eef2f7',
  fetchEdge: '#c6d0db',
  arrow: '#b6c0cb',
  arrowDim: '#9aa5b1',
  pinBox: '#e6f4f6',
  pinEdge: '#5aa9b4',
  bufferFull: '#fff4d6',
  rcvdBox: '#e6f0fb',
  hatchStroke: '#e1e6eb',
  failedToken: '#ffd8d3',
  plotBg: '#f6f8fa',
  chartGrid: '#e1e6eb',
  lines: ['#0969da', '#9a6700', '#1a7f37', '#8250df', '#cf222e', '#1b7c83'],
};

/** Both themes' canvas colours, by the theme's name. */
export const PALETTES = Object.freeze({ dark: Object.freeze(DARK), light: Object.freeze(LIGHT) });

/**
 * The colours the canvases draw with now: the theme's (usePalette). Views read it at draw time, so
 * a theme change takes effect at their next draw.
 * @type {Palette}
 */
export const PALETTE = { ...DARK };

/** Draw with `theme`'s colours from now on. @param {'dark'|'light'} theme */
export function usePalette(theme) {
  Object.assign(PALETTE, PALETTES[theme]);
}

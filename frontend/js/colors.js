// Task colors: neighbouring task ids get far-apart hues (golden angle), so a task that overtakes
// its predecessor stands out. Pure.

const GOLDEN = 137.508;

/** @param {number} idx task id @returns {number} hue in degrees */
export function taskHue(idx) {
  return ((idx * GOLDEN) % 360 + 360) % 360;
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

export const PALETTE = Object.freeze({
  bg: '#0f141b',
  panel: '#161d27',
  panelEdge: '#2a3444',
  ink: '#e6edf3',
  dim: '#8b98a9',
  faint: '#4b5768',
  accent: '#58a6ff',
  buffer: '#f2b84b', // reorder buffer: data parked, waiting for the head-of-line task
  wait: '#f0616d', // consumer waiting for data
  ok: '#3fb950',
  stuck: '#ff7b72',
  fetch: '#2f81f7',
  pin: '#56b6c8', // the pin-memory thread
});

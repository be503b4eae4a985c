// The pin-memory stage as the page shows it: whether it exists, runs, or was turned off, and why,
// in plain words. Pure: config and counters in, words out.

/**
 * @typedef {{mode:'none'|'active'|'disabled', why:string, short:string, box:string}} PinStage
 */

/**
 * @param {import('./reducer.js').LoaderState} state
 * @returns {PinStage}
 * `short`: one word for the counter; `box`: a few words for the picture; `why`: the whole story.
 */
export function pinStage(state) {
  const c = state.config || {};
  if (!c.pin_memory) {
    return {
      mode: 'none',
      short: 'off',
      box: '',
      why: 'pin_memory=False: batches go from the result queue straight to the training loop',
    };
  }
  const device = c.pin_memory_device ? ` (device ${c.pin_memory_device})` : '';
  if (c.pin_memory_active === true || state.pin_bytes > 0 || state.pin_time > 0) {
    return {
      mode: 'active',
      short: 'on',
      box: '',
      why: `pin_memory=True${device}: a pin-memory thread copies each batch to page-locked memory`,
    };
  }
  if (state.mode === 'sim') {
    return {
      mode: 'disabled',
      short: 'no cost',
      box: 'simulated without a pin cost: batches pass straight through',
      why: 'pin_memory=True, but the simulation has no pin cost (pin_ms_per_mb = 0): batches pass straight through',
    };
  }
  if (c.pin_memory_active === false) {
    return {
      mode: 'disabled',
      short: 'disabled',
      box: 'torch turned pinning off: no accelerator (no CUDA) on this machine',
      why:
        'pin_memory=True, but torch turned pinning off: this machine has no accelerator (no CUDA device), so ' +
        'no pin-memory thread runs and batches stay in pageable memory',
    };
  }
  // an older trace without pin_memory_active: say what we know
  return {
    mode: 'disabled',
    short: 'unknown',
    box: 'no batch seen in a pin thread yet',
    why: 'pin_memory=True, but no batch was seen in the pin-memory thread yet',
  };
}

/** Pin throughput in MB/s for the counters, or null. @param {import('./reducer.js').LoaderState} state */
export function pinRate(state) {
  return state.pin_time > 0 ? state.pin_bytes / state.pin_time / 1e6 : null;
}

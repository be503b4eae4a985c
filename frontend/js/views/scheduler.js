// One requestAnimationFrame loop for the whole page, after Perfetto's RafScheduler: anything that
// changed asks for a frame (`wake`), and the frame runs the registered callbacks in order, once.
// The scheduler only schedules: it never fetches, parses or touches the DOM itself, so nothing in
// the frame loop waits on the network.

/**
 * A frame callback: draws from what is already here; returns true to ask for another frame.
 * @typedef {(wall:number) => boolean|void} FrameCallback
 */

export class Scheduler {
  /** @param {(cb: FrameRequestCallback) => number} [raf] injected in tests */
  constructor(raf = (cb) => requestAnimationFrame(cb)) {
    this.raf = raf;
    /** @type {FrameCallback[]} */
    this.callbacks = [];
    this.requested = false;
    /** @type {ReturnType<typeof setTimeout>|null} a throttled redraw waiting for its turn */
    this.timer = null;
    this.due = false; // that redraw's turn came: its frame is asked for but has not run yet
  }

  /** @param {FrameCallback} fn run at every frame, in the order registered */
  onFrame(fn) {
    this.callbacks.push(fn);
  }

  /** Ask for a frame; many asks before it comes make one frame. */
  wake() {
    if (this.requested) return;
    this.requested = true;
    this.raf(() => this.frame());
  }

  /**
   * One more frame after `ms`: a throttled panel that skipped this frame still shows the newest
   * state once its turn comes, even if nothing else wakes the page by then.
   * @param {number} ms
   */
  later(ms) {
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.due = true;
      this.wake();
    }, ms + 10);
  }

  /**
   * Whether a throttled redraw is still due (tests wait for none before reading the panels): until
   * its frame has run, not only until its timer fired.
   */
  get pending() {
    return this.timer !== null || this.due;
  }

  frame() {
    this.requested = false;
    this.due = false;
    const wall = performance.now();
    let again = false;
    for (const fn of this.callbacks) again = fn(wall) === true || again;
    if (again) this.wake();
  }
}

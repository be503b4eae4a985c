// The Scheduler's `pending`, which the browser tests wait on before a screenshot or a read of the
// panels: a throttled redraw is pending until the frame it asked for has run.
import { test, mock } from 'node:test';
import assert from 'node:assert/strict';
import { Scheduler } from '../js/views/scheduler.js';

test('a throttled redraw stays pending from later() until its frame has run', () => {
  mock.timers.enable({ apis: ['setTimeout'] });
  try {
    /** @type {FrameRequestCallback[]} */
    const frames = [];
    const s = new Scheduler((cb) => frames.push(cb));
    let drawn = 0;
    s.onFrame(() => {
      drawn += 1;
    });
    s.later(100);
    assert.equal(s.pending, true);
    mock.timers.tick(110); // the timer fired and asked for a frame; the frame has not come yet
    assert.equal(frames.length, 1);
    assert.equal(s.pending, true, 'pending until the frame that shows the newest state has run');
    /** @type {FrameRequestCallback} */ (frames.shift())(0);
    assert.equal(drawn, 1);
    assert.equal(s.pending, false);
  } finally {
    mock.timers.reset();
  }
});

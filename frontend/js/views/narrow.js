// Below 1000 px the side column goes under the picture: the findings would come after the timeline,
// the histograms and the sweep, about 1,300 px down at 800 px. There, the cards that say what is
// wrong (a stuck or dead worker's card, the training loop stuck in next(), the diagnosis with its
// findings) move up, right under the playback bar; back to the side column in a wide window.

const $ = (/** @type {string} */ id) => /** @type {HTMLElement} */ (document.getElementById(id));
export const NARROW = '(max-width: 999px)'; // app.css's one-column layout
const MOVED = ['consumer-card', 'worker-card', 'diagnosis-card'];

export class NarrowLayout {
  constructor() {
    this.media = window.matchMedia(NARROW);
    /** @type {Array<{card: HTMLElement, next: Node|null}>} where each card sits in the side column */
    this.homes = MOVED.map((id) => ({ card: $(id), next: $(id).nextSibling }));
  }

  bind() {
    this.media.addEventListener('change', () => this.apply());
    this.apply();
  }

  apply() {
    const slot = $('narrow-slot');
    if (this.media.matches) {
      slot.append(...this.homes.map((h) => h.card));
      slot.hidden = false;
      return;
    }
    for (const { card, next } of [...this.homes].reverse()) $('side').insertBefore(card, next);
    slot.hidden = true;
  }
}

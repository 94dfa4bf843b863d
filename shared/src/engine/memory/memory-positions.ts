import type { Positions } from "../catalog-store.js";

/** The cluster's event counter, for one process. */
export class MemoryPositions implements Positions {
  private value = 0;

  next(): number {
    return ++this.value;
  }

  async current(): Promise<number> {
    return this.value;
  }

  raiseTo(position: number): void {
    if (position > this.value) this.value = position;
  }
}

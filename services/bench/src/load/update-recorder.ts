import { nowMicros } from "../core/clock.js";
import { Histogram } from "../core/histogram.js";

/**
 * Turns received `resources/updated` frames into latencies. The update URI ends in
 * `/<step>.<seq>.<emitMicros>` (see bench-uris.ts); the latency is now minus emitMicros, on the
 * cross-process clock. Only updates of the current step count; others are strays.
 */
export class UpdateRecorder {
  readonly histogram = new Histogram();
  received = 0;
  strays = 0;
  firstMicros = 0;
  lastMicros = 0;
  private step = -1;
  private trackSeq = false;
  private readonly perSeq = new Map<number, { receivers: number; max: number }>();

  reset(step: number, trackSeq: boolean): void {
    this.step = step;
    this.trackSeq = trackSeq;
    this.histogram.reset();
    this.received = this.strays = this.firstMicros = this.lastMicros = 0;
    this.perSeq.clear();
  }

  /** `data` holds the URI between `start` (after the opening quote) and `end` (the closing quote). */
  onUpdate(data: string, start: number, end: number): void {
    const slash = data.lastIndexOf("/", end);
    if (slash < start) return;
    const dot1 = data.indexOf(".", slash);
    const dot2 = dot1 < 0 ? -1 : data.indexOf(".", dot1 + 1);
    if (dot2 < 0 || dot2 > end) return;
    const step = Number(data.slice(slash + 1, dot1));
    if (step !== this.step) {
      this.strays++;
      return;
    }
    const now = nowMicros();
    const latency = now - Number(data.slice(dot2 + 1, end));
    this.histogram.record(latency);
    this.received++;
    if (this.firstMicros === 0) this.firstMicros = now;
    this.lastMicros = now;
    if (this.trackSeq) {
      const seq = Number(data.slice(dot1 + 1, dot2));
      const entry = this.perSeq.get(seq);
      if (entry === undefined) this.perSeq.set(seq, { receivers: 1, max: latency });
      else {
        entry.receivers++;
        if (latency > entry.max) entry.max = latency;
      }
    }
  }

  perSeqEntries(): [number, number, number][] {
    return [...this.perSeq].map(([seq, { receivers, max }]) => [seq, receivers, max]);
  }
}

/** A histogram on the wire (IPC): sparse `[bucket, count]` pairs. */
export interface HistogramData {
  buckets: [number, number][];
  count: number;
  max: number;
}

/** Values below this are exact; above, each power of two has `SUB_BUCKETS` buckets. */
const LINEAR = 128;
const SUB_BUCKETS = 64;
const MAX_VALUE = 2 ** 31 - 1;

/**
 * Log-linear histogram of non-negative integers (latencies in µs), relative error ≤ 1/64 above
 * 128. Mergeable, so each load generator records its own and the orchestrator adds them up.
 */
export class Histogram {
  private readonly counts = new Float64Array(LINEAR + 25 * SUB_BUCKETS);
  private total = 0;
  private maxValue = 0;

  static from(data: HistogramData): Histogram {
    const histogram = new Histogram();
    histogram.merge(data);
    return histogram;
  }

  get count(): number {
    return this.total;
  }

  get max(): number {
    return this.maxValue;
  }

  record(value: number): void {
    const v = Math.min(MAX_VALUE, Math.max(0, Math.round(value)));
    this.counts[bucketOf(v)]! += 1;
    this.total += 1;
    if (v > this.maxValue) this.maxValue = v;
  }

  merge(data: HistogramData): void {
    for (const [bucket, count] of data.buckets) this.counts[bucket]! += count;
    this.total += data.count;
    if (data.max > this.maxValue) this.maxValue = data.max;
  }

  /** The value at quantile `q` (0..1), as the middle of its bucket (capped at the max seen); NaN when empty. */
  quantile(q: number): number {
    if (this.total === 0) return Number.NaN;
    const rank = Math.max(1, Math.ceil(q * this.total));
    let seen = 0;
    for (let bucket = 0; bucket < this.counts.length; bucket++) {
      seen += this.counts[bucket]!;
      if (seen >= rank) return Math.min(this.maxValue, midpointOf(bucket));
    }
    return this.maxValue;
  }

  toData(): HistogramData {
    const buckets: [number, number][] = [];
    this.counts.forEach((count, bucket) => {
      if (count > 0) buckets.push([bucket, count]);
    });
    return { buckets, count: this.total, max: this.maxValue };
  }

  reset(): void {
    this.counts.fill(0);
    this.total = 0;
    this.maxValue = 0;
  }
}

function bucketOf(v: number): number {
  if (v < LINEAR) return v;
  const shift = 31 - Math.clz32(v) - 6; // v >>> shift lies in [64, 128)
  return LINEAR + (shift - 1) * SUB_BUCKETS + ((v >>> shift) - SUB_BUCKETS);
}

function midpointOf(bucket: number): number {
  if (bucket < LINEAR) return bucket;
  const shift = Math.floor((bucket - LINEAR) / SUB_BUCKETS) + 1;
  const mantissa = ((bucket - LINEAR) % SUB_BUCKETS) + SUB_BUCKETS;
  return (mantissa << shift) + ((1 << shift) - 1) / 2;
}

/** Number formatting for the Markdown report and the logs. */
export function fmt(value: number | null | undefined, digits = 2): string {
  if (value === null || value === undefined || !Number.isFinite(value)) return "—";
  if (Number.isInteger(value) && Math.abs(value) < 10_000) return String(value);
  const abs = Math.abs(value);
  if (abs >= 10_000) return Math.round(value).toLocaleString("en-US");
  if (abs >= 100) return value.toFixed(0);
  if (abs >= 10) return value.toFixed(Math.min(1, digits));
  return value.toFixed(digits);
}

export function fmtRatio(value: number | null): string {
  return value === null ? "—" : `${value.toFixed(2)}×`;
}

/** Nearest-rank quantile of a list of numbers; NaN when empty. */
export function quantileOf(values: number[], q: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] ?? Number.NaN;
}

export function range(n: number, offset = 0): number[] {
  return Array.from({ length: n }, (_, i) => i + offset);
}

export function kb(bytes: number): number {
  return bytes / 1024;
}

import type { ChartSeries } from "./result-model.js";

const WIDTH = 520;
const HEIGHT = 352;
const MARGIN = { left: 64, right: 16, top: 36, bottom: 76 };

/** Broker lines by engine, raw lines darker or lighter by the engine they were measured beside. */
function colorOf(label: string): string {
  const redis = label.includes("redis");
  if (label.startsWith("raw")) return redis ? "#7f8c8d" : "#2c3e50";
  return redis ? "#2471a3" : "#c0392b";
}

/**
 * latency.svg: latency (log scale) against offered load (log scale), broker and baseline, one
 * panel per chart kind (unicast: p50/p99 vs updates/s; hot URI: p99 vs deliveries/s). Hand-written
 * SVG, no plotting dependency.
 */
export function renderLatencyChart(series: ChartSeries[], title: string): string {
  const panels: { chart: ChartSeries["chart"]; heading: string; xLabel: string; limitMs?: number }[] = [
    { chart: "unicast", heading: "1. Unicast: latency vs offered rate", xLabel: "offered updates/s (one receiver each)" },
    { chart: "hot-uri", heading: "2. Hot URI (1k sessions): p99 vs offered load", xLabel: "offered deliveries/s", limitMs: 100 },
  ];
  const drawn = panels.filter((p) => series.some((s) => s.chart === p.chart && s.points.length > 0));
  const width = Math.max(1, drawn.length) * WIDTH;
  const body = drawn.map((panel, i) => renderPanel(series.filter((s) => s.chart === panel.chart), panel.heading, panel.xLabel, i * WIDTH, panel.limitMs)).join("\n");
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${HEIGHT + 24}" viewBox="0 0 ${width} ${HEIGHT + 24}" font-family="sans-serif" font-size="11">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="${width / 2}" y="16" text-anchor="middle" font-size="13" font-weight="bold">${escape(title)}</text>`,
    `<g transform="translate(0,20)">${body}</g>`,
    "</svg>",
  ].join("\n");
}

/** One log-log panel; `limitMs` draws the pass/fail latency limit as a dotted line. */
function renderPanel(series: ChartSeries[], heading: string, xLabel: string, offsetX: number, limitMs?: number): string {
  const points = series.flatMap((s) => s.points).filter(([x, y]) => x > 0 && y > 0 && Number.isFinite(y));
  if (points.length === 0) return "";
  const xs = points.map(([x]) => x);
  const ys = [...points.map(([, y]) => y), ...(limitMs !== undefined ? [limitMs] : [])];
  const x0 = Math.log10(Math.min(...xs)) - 0.05;
  const x1 = Math.log10(Math.max(...xs)) + 0.05;
  const y0 = Math.floor(Math.log10(Math.min(...ys)));
  const y1 = Math.ceil(Math.log10(Math.max(...ys)));
  const plotW = WIDTH - MARGIN.left - MARGIN.right;
  const plotH = HEIGHT - MARGIN.top - MARGIN.bottom;
  const round = (v: number): number => Math.round(v * 10) / 10;
  const sx = (x: number): number => round(MARGIN.left + ((Math.log10(x) - x0) / (x1 - x0 || 1)) * plotW);
  const sy = (y: number): number => round(MARGIN.top + plotH - ((Math.log10(y) - y0) / (y1 - y0 || 1)) * plotH);
  const parts: string[] = [`<g transform="translate(${offsetX},0)">`];
  parts.push(`<text x="${WIDTH / 2}" y="${MARGIN.top - 14}" text-anchor="middle" font-weight="bold">${escape(heading)}</text>`);
  for (let e = y0; e <= y1; e++) {
    for (const m of [1, 2, 5]) {
      const v = m * 10 ** e;
      if (v < 10 ** y0 || v > 10 ** y1) continue;
      const y = sy(v);
      parts.push(`<line x1="${MARGIN.left}" x2="${WIDTH - MARGIN.right}" y1="${y}" y2="${y}" stroke="#e5e5e5"/>`);
      parts.push(`<text x="${MARGIN.left - 6}" y="${y + 4}" text-anchor="end">${label(v)}</text>`);
    }
  }
  for (const x of [...new Set(xs)].sort((a, b) => a - b)) {
    parts.push(`<line x1="${sx(x)}" x2="${sx(x)}" y1="${MARGIN.top}" y2="${MARGIN.top + plotH}" stroke="#f0f0f0"/>`);
    parts.push(`<text x="${sx(x)}" y="${MARGIN.top + plotH + 14}" text-anchor="middle">${label(x)}</text>`);
  }
  parts.push(`<rect x="${MARGIN.left}" y="${MARGIN.top}" width="${plotW}" height="${plotH}" fill="none" stroke="#888"/>`);
  if (limitMs !== undefined) {
    parts.push(`<line x1="${MARGIN.left}" x2="${WIDTH - MARGIN.right}" y1="${sy(limitMs)}" y2="${sy(limitMs)}" stroke="#e67e22" stroke-dasharray="2 3"/>`);
    parts.push(`<text x="${WIDTH - MARGIN.right - 4}" y="${sy(limitMs) - 4}" text-anchor="end" fill="#e67e22">p99 limit ${limitMs} ms</text>`);
  }
  parts.push(`<text x="${MARGIN.left + plotW / 2}" y="${MARGIN.top + plotH + 28}" text-anchor="middle">${escape(xLabel)}</text>`);
  parts.push(`<text transform="translate(14,${MARGIN.top + plotH / 2}) rotate(-90)" text-anchor="middle">latency, ms (log)</text>`);
  series.forEach((s, i) => {
    const color = colorOf(s.label);
    const dash = s.label.includes("p50") ? "" : ' stroke-dasharray="6 3"';
    const valid = s.points.filter(([x, y]) => x > 0 && y > 0 && Number.isFinite(y));
    if (valid.length === 0) return;
    parts.push(`<polyline fill="none" stroke="${color}" stroke-width="2"${dash} points="${valid.map(([x, y]) => `${sx(x)},${sy(y)}`).join(" ")}"/>`);
    for (const [x, y] of valid) parts.push(`<circle cx="${sx(x)}" cy="${sy(y)}" r="3" fill="${color}"/>`);
    const lx = MARGIN.left + (i % 2) * 200;
    const ly = MARGIN.top + plotH + 42 + Math.floor(i / 2) * 12;
    parts.push(`<g transform="translate(${lx},${ly})"><line x1="0" x2="22" y1="0" y2="0" stroke="${color}" stroke-width="2"${dash}/><text x="28" y="4">${escape(s.label)}</text></g>`);
  });
  parts.push("</g>");
  return parts.join("\n");
}

function label(v: number): string {
  if (v >= 1_000_000) return `${v / 1_000_000}M`;
  if (v >= 1_000) return `${v / 1_000}k`;
  return String(Number(v.toPrecision(3)));
}

function escape(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

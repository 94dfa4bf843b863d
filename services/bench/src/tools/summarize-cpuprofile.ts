/**
 * Summarises V8 .cpuprofile files (from `npm run bench -- --cpu-prof`): top functions by self
 * time and by total (inclusive) time, and self time per package. Usage:
 *
 *   node dist/tools/summarize-cpuprofile.js results/broker-unicast-memory.cpuprofile [--top 25]
 *
 * Self time of a function = the sampled time its frame was on top of the stack; total time = the
 * sampled time it was anywhere on the stack (counted once per sample, so recursion is not doubled).
 */
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
  columnNumber: number;
}

interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}

interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

export interface FunctionCost {
  name: string;
  where: string;
  selfMs: number;
  totalMs: number;
}

export interface ProfileSummary {
  durationMs: number;
  sampledMs: number;
  functions: FunctionCost[];
  packages: { name: string; selfMs: number }[];
}

/** Where a frame lives, shortened: `pkg/file:line` for node_modules, `src/...:line` for the repo. */
function locate(frame: CallFrame): string {
  const url = frame.url.replace(/^file:\/\//, "");
  if (url === "") return "(native)";
  const nm = url.lastIndexOf("node_modules/");
  const short = nm >= 0 ? url.slice(nm + "node_modules/".length) : url.replace(/^.*\/(services|shared)\//, "$1/");
  return `${short}:${frame.lineNumber + 1}`;
}

function packageOf(frame: CallFrame): string {
  const url = frame.url.replace(/^file:\/\//, "");
  if (url === "") return frame.functionName.startsWith("(") ? frame.functionName : "(native/V8)";
  if (url.startsWith("node:")) return "node core";
  const nm = url.lastIndexOf("node_modules/");
  if (nm >= 0) {
    const rest = url.slice(nm + "node_modules/".length).split("/");
    return rest[0]?.startsWith("@") === true ? `${rest[0]}/${rest[1] ?? ""}` : (rest[0] ?? url);
  }
  const repo = /\/(services\/[^/]+|shared)\//.exec(url);
  return repo?.[1] ?? url;
}

/**
 * Aggregates a profile. Samples taken inside a function named in `excludeUnder` are dropped (the
 * bench's own profiler start/stop RPCs show up in step profiles otherwise).
 */
export function summarize(profile: CpuProfile, excludeUnder: readonly string[] = ["profileStart", "profileStop"]): ProfileSummary {
  const byId = new Map<number, ProfileNode>();
  const parent = new Map<number, number>();
  for (const node of profile.nodes) {
    byId.set(node.id, node);
    for (const child of node.children ?? []) parent.set(child, node.id);
  }
  const key = (frame: CallFrame): string => `${frame.functionName || "(anonymous)"}\u0000${locate(frame)}`;
  const self = new Map<string, number>();
  const total = new Map<string, number>();
  const packages = new Map<string, number>();
  let sampled = 0;
  const excluded = new Set(excludeUnder);
  const isExcluded = (nodeId: number): boolean => {
    for (let id: number | undefined = nodeId; id !== undefined; id = parent.get(id)) {
      if (excluded.has(byId.get(id)?.callFrame.functionName ?? "")) return true;
    }
    return false;
  };
  profile.samples.forEach((nodeId, i) => {
    const dt = (profile.timeDeltas[i] ?? 0) / 1000;
    const node = byId.get(nodeId);
    if (node === undefined || (excluded.size > 0 && isExcluded(nodeId))) return;
    sampled += dt;
    const k = key(node.callFrame);
    self.set(k, (self.get(k) ?? 0) + dt);
    const pkg = packageOf(node.callFrame);
    packages.set(pkg, (packages.get(pkg) ?? 0) + dt);
    const seen = new Set<string>();
    for (let id: number | undefined = nodeId; id !== undefined; id = parent.get(id)) {
      const frame = byId.get(id)?.callFrame;
      if (frame === undefined) break;
      const fk = key(frame);
      if (seen.has(fk)) continue;
      seen.add(fk);
      total.set(fk, (total.get(fk) ?? 0) + dt);
    }
  });
  const functions = [...total.keys()].map((k) => {
    const [name = "", where = ""] = k.split("\u0000");
    return { name, where, selfMs: self.get(k) ?? 0, totalMs: total.get(k) ?? 0 };
  });
  return {
    durationMs: (profile.endTime - profile.startTime) / 1000,
    sampledMs: sampled,
    functions,
    packages: [...packages].map(([name, selfMs]) => ({ name, selfMs })).sort((a, b) => b.selfMs - a.selfMs),
  };
}

function render(file: string, summary: ProfileSummary, top: number): string {
  const pct = (ms: number): string => `${((100 * ms) / summary.sampledMs).toFixed(1).padStart(5)} %`;
  const ms = (v: number): string => v.toFixed(0).padStart(7);
  const idle = summary.functions.find((f) => f.name === "(idle)")?.selfMs ?? 0;
  const lines = [`# ${file}`, `duration ${summary.durationMs.toFixed(0)} ms, sampled ${summary.sampledMs.toFixed(0)} ms, idle ${pct(idle)}`, "", "## self time by package"];
  for (const p of summary.packages.slice(0, 15)) lines.push(`${ms(p.selfMs)} ms ${pct(p.selfMs)}  ${p.name}`);
  lines.push("", "## top functions by self time");
  for (const f of [...summary.functions].sort((a, b) => b.selfMs - a.selfMs).slice(0, top)) lines.push(`${ms(f.selfMs)} ms ${pct(f.selfMs)}  ${f.name || "(anonymous)"}  ${f.where}`);
  lines.push("", "## top functions by total time (broker and shared code, SDK, xstate, zod)");
  const interesting = summary.functions.filter((f) => /^(services|shared)\/|@modelcontextprotocol|xstate|zod/.test(f.where));
  for (const f of interesting.sort((a, b) => b.totalMs - a.totalMs).slice(0, top)) lines.push(`${ms(f.totalMs)} ms ${pct(f.totalMs)}  ${f.name || "(anonymous)"}  ${f.where}`);
  return lines.join("\n");
}

if (import.meta.url === `file://${process.argv[1] ?? ""}`) {
  const { values, positionals } = parseArgs({ args: process.argv.slice(2), options: { top: { type: "string", default: "25" } }, allowPositionals: true });
  if (positionals.length === 0) {
    process.stderr.write("usage: node dist/tools/summarize-cpuprofile.js <file.cpuprofile>… [--top N]\n");
    process.exit(2);
  }
  for (const file of positionals) {
    const profile = JSON.parse(readFileSync(file, "utf8")) as CpuProfile;
    process.stdout.write(`${render(file, summarize(profile), Number(values.top))}\n\n`);
  }
}

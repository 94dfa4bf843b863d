/**
 * Summarises a V8 .heapsnapshot (from `npm run bench -- --heap-snapshot`): retained-by-nobody-in-
 * particular self sizes aggregated by constructor (objects) or node type (strings, code, arrays…),
 * largest first, with counts and an optional per-session division. Usage:
 *
 *   node dist/tools/summarize-heapsnapshot.js <after.heapsnapshot> [--base <empty.heapsnapshot>] [--per <sessions>] [--top 30]
 *
 * Self size is the object's own size (not what it keeps alive). With `--base` (the same server
 * with no sessions) the groups are the growth between the two, and `--per` divides that growth by
 * the number of sessions added: what each session costs, by kind.
 */
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";

interface HeapSnapshot {
  snapshot: { meta: { node_fields: string[]; node_types: [string[], ...unknown[]] } };
  nodes: number[];
  strings: string[];
}

export interface HeapGroup {
  name: string;
  count: number;
  bytes: number;
}

/** after − before, per group, largest growth first. */
export function diffGroups(before: HeapGroup[], after: HeapGroup[]): HeapGroup[] {
  const byName = new Map(before.map((g) => [g.name, g]));
  return after.map((g) => ({ name: g.name, count: g.count - (byName.get(g.name)?.count ?? 0), bytes: g.bytes - (byName.get(g.name)?.bytes ?? 0) })).sort((a, b) => b.bytes - a.bytes);
}

export function summarizeHeap(snapshot: HeapSnapshot): { total: number; groups: HeapGroup[] } {
  const fields = snapshot.snapshot.meta.node_fields;
  const types = snapshot.snapshot.meta.node_types[0];
  const stride = fields.length;
  const typeAt = fields.indexOf("type");
  const nameAt = fields.indexOf("name");
  const sizeAt = fields.indexOf("self_size");
  const groups = new Map<string, HeapGroup>();
  let total = 0;
  for (let i = 0; i < snapshot.nodes.length; i += stride) {
    const type = types[snapshot.nodes[i + typeAt] ?? 0] ?? "?";
    const size = snapshot.nodes[i + sizeAt] ?? 0;
    const name = type === "object" || type === "closure" ? `${type === "closure" ? "closure " : ""}${snapshot.strings[snapshot.nodes[i + nameAt] ?? 0] ?? "?"}` : `(${type})`;
    total += size;
    const group = groups.get(name);
    if (group === undefined) groups.set(name, { name, count: 1, bytes: size });
    else {
      group.count++;
      group.bytes += size;
    }
  }
  return { total, groups: [...groups.values()].sort((a, b) => b.bytes - a.bytes) };
}

if (import.meta.url === `file://${process.argv[1] ?? ""}`) {
  const { values, positionals } = parseArgs({
    args: process.argv.slice(2),
    options: { top: { type: "string", default: "30" }, per: { type: "string" }, base: { type: "string" } },
    allowPositionals: true,
  });
  if (positionals.length === 0) {
    process.stderr.write("usage: node dist/tools/summarize-heapsnapshot.js <file.heapsnapshot> [--base <file>] [--per <sessions>] [--top N]\n");
    process.exit(2);
  }
  const per = values.per === undefined ? undefined : Number(values.per);
  const load = (file: string) => summarizeHeap(JSON.parse(readFileSync(file, "utf8")) as HeapSnapshot);
  const base = values.base === undefined ? undefined : load(values.base);
  for (const file of positionals) {
    const after = load(file);
    const total = after.total - (base?.total ?? 0);
    const groups = base === undefined ? after.groups : diffGroups(base.groups, after.groups);
    const lines = [`# ${file}${values.base !== undefined ? ` minus ${values.base}` : ""}`, `total self size ${(total / 1024 / 1024).toFixed(1)} MB${per !== undefined ? `, ${(total / per / 1024).toFixed(2)} KB per session` : ""}`, ""];
    lines.push(`${"KB".padStart(9)} ${"count".padStart(8)}${per !== undefined ? `${"B/session".padStart(11)}${"n/session".padStart(10)}` : ""}  constructor / type`);
    for (const g of groups.slice(0, Number(values.top))) {
      const perCols = per !== undefined ? `${(g.bytes / per).toFixed(0).padStart(11)}${(g.count / per).toFixed(1).padStart(10)}` : "";
      lines.push(`${(g.bytes / 1024).toFixed(0).padStart(9)} ${String(g.count).padStart(8)}${perCols}  ${g.name}`);
    }
    process.stdout.write(`${lines.join("\n")}\n\n`);
  }
}

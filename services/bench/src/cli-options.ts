import { parseArgs } from "node:util";

export interface CliOptions {
  quick: boolean;
  cpuProf: boolean;
  heapSnapshot: boolean;
  /** Scenario ids to run (all when empty). */
  only: string[];
  help: boolean;
}

export const SCENARIO_IDS = ["unicast", "hot-uri", "broadcast", "memory", "subscribe", "list-storm", "cluster-list-storm", "worker-kill", "storm", "scale"] as const;

export const USAGE = `Usage: npm run bench -- [--quick] [--cpu-prof] [--heap-snapshot] [--only <ids>]

  --quick          reduced run (under 3 minutes)
  --cpu-prof       run broker children with node --cpu-prof, plus one profile per measured step
                   (results/*.cpuprofile; summarise with npm run profile:summary -- <file>)
  --heap-snapshot  in the memory scenario, snapshot the broker heap at the first session count
                   (results/*.heapsnapshot; summarise with npm run heap:summary -- <file>)
  --only <ids>     comma-separated scenario ids or numbers: ${SCENARIO_IDS.map((id, i) => `${i + 1}=${id}`).join(", ")}

Results: results/results.json, results/results.md, results/latency.svg (next to this package).`;

export function parseCli(argv: string[]): CliOptions {
  const { values } = parseArgs({
    args: argv,
    options: {
      quick: { type: "boolean", default: false },
      "cpu-prof": { type: "boolean", default: false },
      "heap-snapshot": { type: "boolean", default: false },
      only: { type: "string" },
      help: { type: "boolean", short: "h", default: false },
    },
    strict: true,
  });
  const only = (values.only ?? "")
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s !== "")
    .map((s) => (/^\d+$/.test(s) ? (SCENARIO_IDS[Number(s) - 1] ?? s) : s));
  for (const id of only) if (!(SCENARIO_IDS as readonly string[]).includes(id)) throw new Error(`unknown scenario '${id}'`);
  return { quick: values.quick, cpuProf: values["cpu-prof"], heapSnapshot: values["heap-snapshot"], only, help: values.help };
}

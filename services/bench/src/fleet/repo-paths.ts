/**
 * Where the deployed entry points and the deploy files are, from this package's build
 * (`services/bench/dist/<folder>/…`, or its sources one level deeper under `src`: the same depth).
 */
import { existsSync, readdirSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";

export const REPO_ROOT = fileURLToPath(new URL("../../../../", import.meta.url));

export const PATHS = {
  brokerCli: join(REPO_ROOT, "services/broker/dist/cli.js"),
  workerMain: join(REPO_ROOT, "services/worker/dist/main.js"),
  demoBackend: join(REPO_ROOT, "services/broker/dist/demo/demo-backend.js"),
  /** What docker-compose.yml runs its brokers and worker on. */
  fleetConfig: join(REPO_ROOT, "deploy/fleet.config.json"),
  /** docker-compose.yml's load balancer. */
  haproxyCfg: join(REPO_ROOT, "deploy/haproxy.cfg"),
} as const;

/** The packages the fleet runs, each with its built entry point. */
const BUILT: { dir: string; entry: string }[] = [
  { dir: "shared", entry: "shared/dist/index.js" },
  { dir: "shared/member", entry: "shared/member/dist/index.js" },
  { dir: "services/broker", entry: "services/broker/dist/cli.js" },
  { dir: "services/worker", entry: "services/worker/dist/main.js" },
];

/** A path relative to the repository, for messages. */
export function fromRepo(path: string): string {
  return relative(REPO_ROOT, path) || ".";
}

/**
 * What is wrong with this tree's builds: `missing` (a package not built: the fleet cannot run) or
 * `stale` (built before its sources last changed: it runs, but not what the sources say).
 * `npm run fleet` and `npm run chaos` build first; this is for running the scripts directly.
 */
export function buildProblems(): { missing: string[]; stale: string[] } {
  const missing: string[] = [];
  const stale: string[] = [];
  for (const { dir, entry } of BUILT) {
    if (!existsSync(join(REPO_ROOT, entry))) {
      missing.push(entry);
      continue;
    }
    // tsc -b writes the build info whenever it builds: it says when the package was last built.
    const info = statSync(join(REPO_ROOT, dir, "dist/.tsbuildinfo"), { throwIfNoEntry: false }) ?? statSync(join(REPO_ROOT, entry));
    if (newestMtime(join(REPO_ROOT, dir, "src")) > info.mtimeMs) stale.push(dir);
  }
  return { missing, stale };
}

function newestMtime(dir: string): number {
  if (!existsSync(dir)) return 0;
  return Math.max(0, ...readdirSync(dir, { recursive: true, encoding: "utf8" }).map((file) => statSync(join(dir, file)).mtimeMs));
}

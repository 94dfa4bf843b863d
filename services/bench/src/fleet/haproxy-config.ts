/**
 * Variants of deploy/haproxy.cfg (the compose fleet's load balancer), made from the file itself at
 * run time so that local fleets and the chaos harness run what compose runs. The file names its
 * servers `server brokerN "${BROKERN}" <options>` (addresses from the environment, as compose sets
 * them); a variant has one such line per broker, each like the file's first, and may leave out the
 * stickiness (`stick-table`, `stick on`, `stick store-response`) to balance every request round-robin.
 */

/** How the load balancer spreads requests. */
export type Balancing = "sticky" | "round-robin";

const SERVER_LINE = /^(\s*)server\s+broker\d+\s+"\$\{BROKER\d+\}"(.*)$/;
const STICK_LINE = /^\s*stick(-table)?\s/;

/** The environment variable that holds broker `i`'s address (1-based), as the file spells it. */
export function brokerEnv(i: number): string {
  return `BROKER${i}`;
}

/**
 * deploy/haproxy.cfg's text with `brokers` server lines (BROKER1…BROKERn) and, for
 * `round-robin`, without its stick lines. Throws when the text has no server line of that form
 * (the file changed shape: the variant would silently differ from it).
 */
export function haproxyVariant(cfg: string, options: { brokers: number; balancing: Balancing; serverHeader?: string }): string {
  const lines = cfg.split("\n");
  const first = lines.findIndex((line) => SERVER_LINE.test(line));
  if (first < 0) throw new Error('deploy/haproxy.cfg has no `server brokerN "${BROKERN}" …` line to repeat');
  const [, indent = "", options_ = ""] = SERVER_LINE.exec(lines[first] as string) ?? [];
  const servers = Array.from({ length: options.brokers }, (_, k) => `${indent}server broker${k + 1} "\${${brokerEnv(k + 1)}}"${options_}`);
  const out: string[] = [];
  lines.forEach((line, index) => {
    if (SERVER_LINE.test(line)) {
      if (index === first) out.push(...servers);
      return;
    }
    if (options.balancing === "round-robin" && STICK_LINE.test(line)) return;
    out.push(line);
    // Diagnostics only (the chaos harness): which server answered, in a response header.
    if (options.serverHeader !== undefined && /^\s*balance\s/.test(line)) out.push(`${indentOf(line)}http-response set-header ${options.serverHeader} %s`);
  });
  const changes = [`${options.brokers} broker server line(s)`];
  if (options.balancing === "round-robin") changes.push("stickiness left out (round-robin)");
  if (options.serverHeader !== undefined) changes.push(`the answering server named in ${options.serverHeader}`);
  const header = `# Generated from deploy/haproxy.cfg: ${changes.join(", ")}.`;
  return `${header}\n${out.join("\n")}`;
}

function indentOf(line: string): string {
  return /^\s*/.exec(line)?.[0] ?? "";
}

/** Whether the file keeps sessions on their broker (it has stick lines). */
export function isSticky(cfg: string): boolean {
  return cfg.split("\n").some((line) => STICK_LINE.test(line));
}

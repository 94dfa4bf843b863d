import { spawnSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";

/** This process's open-file limit (`/proc/self/limits`; undefined where there is none). */
export function openFileLimit(): { soft: number; hard: number } | undefined {
  try {
    const line = readFileSync("/proc/self/limits", "utf8")
      .split("\n")
      .find((l) => l.startsWith("Max open files"));
    const [soft, hard] = (line ?? "").replace("Max open files", "").trim().split(/\s+/);
    const parse = (value: string | undefined): number => (value === "unlimited" ? Number.MAX_SAFE_INTEGER : Number(value));
    const limit = { soft: parse(soft), hard: parse(hard) };
    return Number.isFinite(limit.soft) && Number.isFinite(limit.hard) ? limit : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Raises this process's open-file limit to `want` (children forked afterwards inherit it) with
 * util-linux `prlimit`: the soft limit up to the hard one is always allowed, a higher hard limit
 * only with privilege (CAP_SYS_RESOURCE). Returns the limit in force afterwards, and why it is
 * lower than `want` when it is.
 */
export function raiseOpenFileLimit(want: number): { soft: number; hard: number; refused: string | undefined } {
  const before = openFileLimit();
  if (before === undefined) return { soft: 0, hard: 0, refused: "no /proc/self/limits (not Linux): the open-file limit is unknown" };
  if (before.soft >= want) return { ...before, refused: undefined };
  const set = (n: number) => spawnSync("prlimit", ["--pid", String(process.pid), `--nofile=${n}:${Math.max(n, before.hard)}`], { encoding: "utf8" });
  const raised = set(want);
  let refused: string | undefined;
  if (raised.error !== undefined || raised.status !== 0) {
    refused = `raising it to ${want} was refused (${(raised.error?.message ?? raised.stderr).trim() || `prlimit exit ${raised.status}`})`;
    if (before.soft < before.hard) set(before.hard);
  }
  const after = openFileLimit() ?? before;
  return { ...after, refused: after.soft >= want ? undefined : (refused ?? `the limit stayed at ${after.soft}`) };
}

/** Open file descriptors of this process (Linux; undefined elsewhere). */
export function openFileCount(): number | undefined {
  try {
    return readdirSync("/proc/self/fd").length;
  } catch {
    return undefined;
  }
}

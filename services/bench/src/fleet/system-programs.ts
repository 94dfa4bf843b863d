/**
 * Programs the local fleet needs from the system (haproxy, redis-server): found on the PATH, or
 * installed with apt-get when this process may (root on a Debian-like system), as the brief of the
 * fleet asks (`apt-get install -y haproxy`).
 */
import { execFileSync, spawnSync } from "node:child_process";

/** Where `program` is on the PATH, or undefined. */
export function which(program: string): string | undefined {
  const found = spawnSync("sh", ["-c", `command -v ${program}`], { encoding: "utf8" });
  const path = found.stdout.trim();
  return found.status === 0 && path !== "" ? path : undefined;
}

/**
 * `program`'s path, installing `aptPackage` first when it is missing (apt-get update once if the
 * install alone fails). Throws, saying what to install, when that is not possible here.
 */
export function ensureProgram(program: string, aptPackage: string, log: (message: string) => void): string {
  const present = which(program);
  if (present !== undefined) return present;
  const root = process.getuid?.() === 0;
  if (!root || which("apt-get") === undefined) throw new Error(`${program} is not installed: install it (e.g. apt-get install -y ${aptPackage}) and run again`);
  log(`${program} is not installed: apt-get install -y ${aptPackage} …`);
  const install = (): boolean => spawnSync("apt-get", ["install", "-y", "-q", aptPackage], { stdio: "ignore", env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" } }).status === 0;
  if (!install()) {
    execFileSync("apt-get", ["update", "-q"], { stdio: "ignore" });
    if (!install()) throw new Error(`apt-get install -y ${aptPackage} failed: install ${program} and run again`);
  }
  const installed = which(program);
  if (installed === undefined) throw new Error(`${aptPackage} was installed but ${program} is not on the PATH`);
  return installed;
}

import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

/** The built command line: `npm run build` (or the turbo build) must have run. */
export const CLI_BIN = fileURLToPath(new URL("../../dist/cli.js", import.meta.url));

export interface BinRun {
  readonly child: ChildProcess;
  /** Everything written so far. */
  stdout(): string;
  stderr(): string;
  /** Complete stdout lines so far. */
  lines(): string[];
  /** Resolves once the output of `stream` satisfies `ready` (checked on every chunk); rejects if the process ends first. */
  until(stream: "stdout" | "stderr", ready: (text: string) => boolean): Promise<void>;
  /** The exit code, or 128 + n when the process died of signal n without handling it. */
  readonly exited: Promise<number>;
}

const SIGNALS: Record<string, number> = { SIGINT: 2, SIGKILL: 9, SIGTERM: 15 };

/** Spawns `node dist/cli.js <args>` with piped output. */
export function runBin(args: readonly string[]): BinRun {
  if (!existsSync(CLI_BIN)) throw new Error(`${CLI_BIN} is missing: build the package first (npm run build)`);
  const child = spawn(process.execPath, [CLI_BIN, ...args], { stdio: ["ignore", "pipe", "pipe"] });
  const output = { stdout: "", stderr: "" };
  const watchers: { stream: "stdout" | "stderr"; ready: (text: string) => boolean; resolve: () => void; reject: (error: Error) => void }[] = [];
  const check = (): void => {
    for (const watcher of [...watchers]) {
      if (!watcher.ready(output[watcher.stream])) continue;
      watchers.splice(watchers.indexOf(watcher), 1);
      watcher.resolve();
    }
  };
  for (const stream of ["stdout", "stderr"] as const) {
    child[stream].setEncoding("utf8");
    child[stream].on("data", (chunk: string) => {
      output[stream] += chunk;
      check();
    });
  }
  const exited = new Promise<number>((resolve) => {
    child.on("close", (code, signal) => {
      check();
      for (const watcher of watchers.splice(0)) watcher.reject(new Error(`the process ended (${code ?? signal}) before its ${watcher.stream} was as expected:\n${output[watcher.stream]}\n${output.stderr}`));
      resolve(code ?? 128 + (SIGNALS[signal ?? ""] ?? 0));
    });
  });
  return {
    child,
    stdout: () => output.stdout,
    stderr: () => output.stderr,
    lines: () => output.stdout.split("\n").slice(0, -1),
    until: (stream, ready) =>
      new Promise<void>((resolve, reject) => {
        watchers.push({ stream, ready, resolve, reject });
        check();
      }),
    exited,
  };
}

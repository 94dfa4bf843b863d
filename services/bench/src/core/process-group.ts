import { fork, spawn, type ChildProcess } from "node:child_process";
import { closeSync, createWriteStream, mkdirSync, openSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { childLink } from "./links.js";
import { RpcClient, type ApiShape } from "./rpc.js";

/** A forked helper process with an RPC client to the API it serves. */
export interface ManagedChild<A extends ApiShape> {
  readonly name: string;
  readonly pid: number;
  readonly rpc: RpcClient<A>;
  /** Resolves with the exit code (or signal name) once the process is gone. */
  readonly exited: Promise<number | string>;
  /**
   * Ends the process: `graceful` (a call that makes it exit, e.g. its `stop` RPC) gets 15 s to
   * take effect (a CPU profile is written at exit), then SIGTERM, then SIGKILL.
   */
  stop(graceful?: () => Promise<unknown>): Promise<void>;
}

/** A process of the project's own (e.g. the worker) run as it is deployed: no RPC, its stderr watched. */
export interface PlainChild {
  readonly name: string;
  readonly pid: number;
  readonly exited: Promise<number | string>;
  /** The first stderr line (so far or to come) matching `pattern`; rejects when the process exits first, or after `timeoutMs`. */
  waitForLine(pattern: RegExp, timeoutMs: number): Promise<string>;
  /** SIGKILL now, by pid; resolves once the process is gone. */
  kill(): Promise<void>;
  /** SIGTERM, then SIGKILL after its grace (3 s unless spawned with another). */
  stop(): Promise<void>;
}

export interface SpawnOptions {
  env?: Record<string, string>;
  /** Its own process group: a Ctrl-C in the terminal reaches the orchestrator only, which stops the children in its own order. */
  detached?: boolean;
  /** How long `stop` waits after SIGTERM before SIGKILL (default 3 s). */
  termGraceMs?: number;
}

/**
 * Owns every helper process of a run: each is forked with an IPC channel (or spawned, for the
 * project's own entry points) and its stdout/stderr in `logs/<name>.log`, and each is ended by
 * `stopAll` (by pid, one by one) however the run ends. Forked children also exit on their own when
 * the IPC channel closes (see `exitWithParent`).
 */
export class ProcessGroup {
  private readonly children = new Set<{ process: ChildProcess; stop: () => Promise<void> }>();
  private seq = 0;

  constructor(readonly logDir: string) {
    mkdirSync(logDir, { recursive: true });
  }

  fork<A extends ApiShape>(script: URL, name: string, options: { execArgv?: string[]; env?: Record<string, string> } = {}): ManagedChild<A> {
    const label = `${String(++this.seq).padStart(2, "0")}-${name}`;
    const logFd = openSync(join(this.logDir, `${label}.log`), "w");
    const child = fork(fileURLToPath(script), [], {
      execArgv: options.execArgv ?? [],
      env: { ...process.env, ...options.env },
      stdio: ["ignore", logFd, logFd, "ipc"],
    });
    closeSync(logFd);
    const { pid, exited, stop } = this.own(child, name);
    return { name: label, pid, rpc: new RpcClient<A>(childLink(child), label), exited, stop };
  }

  /** Runs `node <script> ...args` as deployed (no IPC), stdout and stderr in its log. */
  spawnNode(script: string, args: string[], name: string, options: SpawnOptions = {}): PlainChild {
    return this.spawn(process.execPath, [script, ...args], name, options);
  }

  /** Runs any program (no IPC), stdout and stderr in its log, its stderr lines watchable. */
  spawn(command: string, args: string[], name: string, options: SpawnOptions = {}): PlainChild {
    const label = `${String(++this.seq).padStart(2, "0")}-${name}`;
    const logFile = join(this.logDir, `${label}.log`);
    // Both streams append (stdout straight from the child, stderr through here), so neither overwrites the other.
    closeSync(openSync(logFile, "w"));
    const logFd = openSync(logFile, "a");
    const child = spawn(command, args, { env: { ...process.env, ...options.env }, stdio: ["ignore", logFd, "pipe"], detached: options.detached === true });
    closeSync(logFd);
    const log = createWriteStream(logFile, { flags: "a" });
    // A program that cannot be started reports it here (its pid is then undefined: `own` throws).
    child.once("error", (error) => log.write(`[bench] ${command}: ${error.message}\n`));
    const lines: string[] = [];
    const watchers = new Set<(line: string) => void>();
    let partial = "";
    child.stderr?.on("data", (chunk: Buffer) => {
      log.write(chunk);
      const text = partial + chunk.toString("utf8");
      const parts = text.split("\n");
      partial = parts.pop() ?? "";
      for (const line of parts) {
        if (lines.length < 1_000) lines.push(line);
        for (const watcher of watchers) watcher(line);
      }
    });
    child.stderr?.once("end", () => log.end());
    const { pid, exited, stop } = this.own(child, name, options.termGraceMs);
    const waitForLine = (pattern: RegExp, timeoutMs: number): Promise<string> => {
      const seen = lines.find((line) => pattern.test(line));
      if (seen !== undefined) return Promise.resolve(seen);
      return new Promise((resolve, reject) => {
        const done = (): void => {
          watchers.delete(watcher);
          clearTimeout(timer);
        };
        const watcher = (line: string): void => {
          if (!pattern.test(line)) return;
          done();
          resolve(line);
        };
        const timer = setTimeout(() => {
          done();
          reject(new Error(`${label}: no line matching ${String(pattern)} within ${timeoutMs} ms (see ${logFile})`));
        }, timeoutMs);
        watchers.add(watcher);
        void exited.then((code) => {
          done();
          reject(new Error(`${label} exited (${code}) before a line matching ${String(pattern)} (see ${logFile})`));
        });
      });
    };
    const kill = async (): Promise<void> => {
      if (child.exitCode === null && child.signalCode === null) process.kill(pid, "SIGKILL");
      await exited;
      await stop();
    };
    return { name: label, pid, exited, waitForLine, kill, stop: () => stop() };
  }

  /** Tracks `child` until it exits; its `stop` ends it (after `graceful`, if given) and forgets it. */
  private own(child: ChildProcess, name: string, termGraceMs = 3_000): { pid: number; exited: Promise<number | string>; stop: (graceful?: () => Promise<unknown>) => Promise<void> } {
    const exited = new Promise<number | string>((resolve) => child.once("exit", (code, signal) => resolve(code ?? signal ?? "unknown")));
    const pid = child.pid;
    if (pid === undefined) throw new Error(`could not start ${name}`);
    const stop = async (graceful?: () => Promise<unknown>): Promise<void> => {
      if (child.exitCode === null && child.signalCode === null) {
        if (graceful !== undefined) {
          void graceful().catch(() => undefined);
          await Promise.race([exited, delay(15_000)]);
        }
        if (child.exitCode === null && child.signalCode === null) process.kill(pid, "SIGTERM");
        if ((await Promise.race([exited, delay(termGraceMs).then(() => "timeout")])) === "timeout") process.kill(pid, "SIGKILL");
        await exited;
      }
      this.children.delete(entry);
    };
    const entry = { process: child, stop: () => stop() };
    this.children.add(entry);
    return { pid, exited, stop };
  }

  /** Ends every child still running. */
  async stopAll(): Promise<void> {
    await Promise.all([...this.children].map((child) => child.stop()));
  }

  /** Synchronous last resort (process exit handler): SIGKILL whatever is left, by pid. */
  killAllNow(): void {
    for (const child of this.children) {
      const pid = child.process.pid;
      if (pid !== undefined && child.process.exitCode === null && child.process.signalCode === null) {
        try {
          process.kill(pid, "SIGKILL");
        } catch {
          // already gone
        }
      }
    }
  }
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}

/** In a child: exit when the parent's IPC channel goes away, so no helper outlives a run. */
export function exitWithParent(cleanup?: () => Promise<void> | void): void {
  process.once("disconnect", () => {
    void Promise.resolve(cleanup?.()).finally(() => process.exit(0));
  });
}

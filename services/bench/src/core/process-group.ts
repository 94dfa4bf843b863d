import { fork, type ChildProcess } from "node:child_process";
import { closeSync, mkdirSync, openSync } from "node:fs";
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

/**
 * Owns every helper process of a run: each is forked with an IPC channel and its stdout/stderr
 * in `logs/<name>.log`, and each is ended by `stopAll` (by pid, one by one) however the run ends.
 * Children also exit on their own when the IPC channel closes (see `exitWithParent`).
 */
export class ProcessGroup {
  private readonly children = new Set<{ process: ChildProcess; stop: () => Promise<void> }>();
  private seq = 0;

  constructor(private readonly logDir: string) {
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
        if ((await Promise.race([exited, delay(3_000).then(() => "timeout")])) === "timeout") process.kill(pid, "SIGKILL");
        await exited;
      }
      this.children.delete(entry);
    };
    const entry = { process: child, stop: () => stop() };
    this.children.add(entry);
    return { name: label, pid, rpc: new RpcClient<A>(childLink(child), label), exited, stop };
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

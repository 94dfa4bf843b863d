import type { Logger } from "./logger.js";

/** Closes `broker` and exits (code 0) on SIGTERM or SIGINT, once; the returned function does the same for any other reason. */
export function stopOnSignals(broker: { close(): Promise<void> }, logger: Logger): (reason: string) => Promise<void> {
  let stopping = false;
  const stop = async (reason: string): Promise<void> => {
    if (stopping) return;
    stopping = true;
    logger.info({ reason }, "shutting down");
    await broker.close();
    process.exit(0);
  };
  process.on("SIGTERM", () => void stop("SIGTERM"));
  process.on("SIGINT", () => void stop("SIGINT"));
  return stop;
}

/** Starts the backends (and the engine's connections); on failure logs it, closes the broker and resolves false. */
export async function startBackendsOrClose(broker: { startBackends(): Promise<void>; close(): Promise<void> }, logger: Logger): Promise<boolean> {
  try {
    await broker.startBackends();
    return true;
  } catch (error) {
    logger.fatal({ err: (error as Error).message }, "cannot start");
    await broker.close();
    return false;
  }
}

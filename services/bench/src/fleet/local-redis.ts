/**
 * A Redis for a local fleet: the one at the given URL when it answers, or a `redis-server` of our
 * own on 127.0.0.1, started as compose starts its Redis (`--save "" --appendonly no`: nothing is
 * kept on disk, so a restart comes back empty).
 */
import { Redis } from "ioredis";
import { pollUntil } from "../core/clock.js";
import type { PlainChild, ProcessGroup, SpawnOptions } from "../core/process-group.js";
import { unlessExited } from "./members.js";
import { ensureProgram } from "./system-programs.js";

/** Whether a Redis answers PING at `url` within 2 s. */
export async function redisAnswers(url: string): Promise<boolean> {
  const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 2_000 });
  redis.on("error", () => undefined); // the failed connect rejects connect() below
  try {
    await redis.connect();
    return (await redis.ping()) === "PONG";
  } catch {
    return false;
  } finally {
    redis.disconnect();
  }
}

export interface LocalRedis {
  readonly url: string;
  readonly port: number;
  readonly child: PlainChild;
}

/** Starts `redis-server` on 127.0.0.1:`port` with nothing on disk; resolves once it answers PING. */
export async function startRedisServer(group: ProcessGroup, port: number, name: string, log: (message: string) => void, options: SpawnOptions = {}): Promise<LocalRedis> {
  const program = ensureProgram("redis-server", "redis-server", log);
  const child = group.spawn(program, ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no"], name, options);
  const url = `redis://127.0.0.1:${port}`;
  try {
    await unlessExited(child, pollUntil(() => redisAnswers(url), 10_000, `redis-server on port ${port} to answer`, 100));
  } catch (error) {
    await child.stop();
    throw error;
  }
  return { url, port, child };
}

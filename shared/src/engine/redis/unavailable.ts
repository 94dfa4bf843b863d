import { BrokerError } from "../../errors.js";

/**
 * A Redis failure on the way of a client's request, as the error the client gets: whether Redis
 * refused the request (it answered with an error: out of memory, a read-only replica) or did not
 * answer. What Redis or the client library said stays in the error's cause, for the log; a client
 * is not told the cluster's internals.
 */
export async function unavailable<T>(command: Promise<T>): Promise<T> {
  try {
    return await command;
  } catch (error) {
    throw new BrokerError("CLUSTER_UNAVAILABLE", `The cluster's shared state (Redis) ${describe(error)}; retry later.`, undefined, { cause: error });
  }
}

function describe(error: unknown): string {
  if ((error as Error | undefined)?.name !== "ReplyError") return "did not answer";
  const message = (error as Error).message;
  if (message.startsWith("OOM")) return "refused the request: it is out of memory";
  if (message.startsWith("READONLY")) return "refused the request: it is a read-only replica";
  return "refused the request";
}

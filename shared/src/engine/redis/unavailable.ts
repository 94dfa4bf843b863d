import { BrokerError } from "../../errors.js";

/** A Redis failure on the way of a client's request, as the error the client gets. */
export async function unavailable<T>(command: Promise<T>): Promise<T> {
  try {
    return await command;
  } catch (error) {
    throw new BrokerError("CLUSTER_UNAVAILABLE", `The cluster's shared state (Redis) did not answer (${(error as Error).message}); retry later.`, undefined, { cause: error });
  }
}

import { ReplyError } from "ioredis";
import { expect, it } from "vitest";
import { BrokerError } from "../../src/errors.js";
import { unavailable } from "../../src/engine/redis/unavailable.js";

it("tells a client whether Redis refused its request or did not answer, without the client library's words", async () => {
  const outcome = (error: Error) => unavailable(Promise.reject(error)).then(() => undefined, (e: unknown) => e as BrokerError);
  const oom = await outcome(new ReplyError("OOM command not allowed when used memory > 'maxmemory'."));
  expect(oom).toBeInstanceOf(BrokerError);
  expect(oom).toMatchObject({ code: "CLUSTER_UNAVAILABLE", message: "The cluster's shared state (Redis) refused the request: it is out of memory; retry later." });
  expect((await outcome(new ReplyError("READONLY You can't write against a read only replica.")))?.message).toContain("read-only replica");
  const away = await outcome(new Error("Reached the max retries per request limit (which is 1). Refer to \"maxRetriesPerRequest\" option for details."));
  expect(away?.message).toBe("The cluster's shared state (Redis) did not answer; retry later.");
  expect((away?.cause as Error).message).toContain("max retries");
});

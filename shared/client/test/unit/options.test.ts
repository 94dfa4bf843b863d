import { describe, expect, it } from "vitest";
import { BrokerClient, type BrokerClientOptions } from "../../src/index.js";
import { TestBackend } from "../helpers/test-backend.js";

const transport = new TestBackend().legacyTransport;

describe("BrokerClient options", () => {
  it.each<[string, BrokerClientOptions, string]>([
    ["neither url nor transport", {}, "url"],
    ["both url and transport", { url: "http://127.0.0.1/mcp", transport }, "url"],
    ["a relative url", { url: "/mcp" }, "url"],
    ["a url that is not http", { url: "ws://127.0.0.1/mcp" }, "url"],
    ["headers with a transport", { transport, headers: { a: "b" } }, "headers"],
    ["a header that is not a string", { url: "http://127.0.0.1/mcp", headers: { a: 1 as unknown as string } }, "headers"],
    ["default metadata that is not a string", { transport, defaultMetadata: { a: 1 as unknown as string } }, "defaultMetadata"],
    ["default metadata that is not an object", { transport, defaultMetadata: "a=b" as never }, "defaultMetadata"],
    ["an unknown era", { transport, era: "future" as never }, "era"],
    ["a header name with a space", { url: "http://127.0.0.1:1/mcp", headers: { "Bad Name": "v" } }, "headers"],
    ["a header value with a line break", { url: "http://127.0.0.1:1/mcp", headers: { "x-key": "a\nb" } }, "headers"],
    ["a negative debounce", { transport, listChangedDebounceMs: -1 }, "listChangedDebounceMs"],
    ["a zero request timeout", { transport, requestTimeoutMs: 0 }, "requestTimeoutMs"],
    ["a request timeout Node cannot time (over 2^31 - 1 ms)", { transport, requestTimeoutMs: 2 ** 31 }, "requestTimeoutMs"],
    ["a heartbeat Node cannot time", { transport, reconnect: { heartbeatIntervalMs: 3e9 } }, "reconnect.heartbeatIntervalMs"],
    ["a debounce Node cannot time", { transport, listChangedDebounceMs: 3e9 }, "listChangedDebounceMs"],
    ["a negative initial delay", { transport, reconnect: { initialDelayMs: -5 } }, "reconnect.initialDelayMs"],
    ["a non-finite max delay", { transport, reconnect: { maxDelayMs: Number.POSITIVE_INFINITY } }, "reconnect.maxDelayMs"],
    ["a max delay below the initial delay", { transport, reconnect: { initialDelayMs: 1_000, maxDelayMs: 10 } }, "reconnect.maxDelayMs"],
    ["a multiplier below 1", { transport, reconnect: { multiplier: 0.5 } }, "reconnect.multiplier"],
    ["a fractional maxAttempts", { transport, reconnect: { maxAttempts: 1.5 } }, "reconnect.maxAttempts"],
    ["zero maxAttempts", { transport, reconnect: { maxAttempts: 0 } }, "reconnect.maxAttempts"],
    ["a negative heartbeat", { transport, reconnect: { heartbeatIntervalMs: -1 } }, "reconnect.heartbeatIntervalMs"],
    ["a NaN heartbeat", { transport, reconnect: { heartbeatIntervalMs: Number.NaN } }, "reconnect.heartbeatIntervalMs"],
    ["a clock without clearTimeout", { transport, clock: { now: () => 0, setTimeout: () => ({}) } as never }, "clock"],
    ["a random that is not a function", { transport, random: 0.5 as never }, "random"],
    ["a non-boolean list-change switch", { transport, listChangedNotifications: { tools: "yes" as never } }, "listChangedNotifications.tools"],
  ])("rejects %s with INVALID_OPTIONS naming the option", (_case, options, option) => {
    let thrown: unknown;
    try {
      new BrokerClient(options);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toMatchObject({ name: "BrokerClientError", code: "INVALID_OPTIONS", data: { option } });
    expect((thrown as Error).message).toContain(option);
  });

  it("accepts the edge values and fills in the defaults", () => {
    expect(() => new BrokerClient({ transport, listChangedDebounceMs: 0, reconnect: { initialDelayMs: 0, maxDelayMs: 0, multiplier: 1, maxAttempts: 1, heartbeatIntervalMs: 0 } })).not.toThrow();
    expect(() => new BrokerClient({ url: new URL("https://example.com/mcp"), headers: { Authorization: "Bearer x" }, reconnect: false, requestTimeoutMs: 5 })).not.toThrow();
    // An option given as undefined keeps its default rather than breaking the policy.
    expect(() => new BrokerClient({ transport, reconnect: { maxDelayMs: undefined, multiplier: undefined } })).not.toThrow();
    expect(new BrokerClient({ transport }).state).toBe("disconnected");
  });
});

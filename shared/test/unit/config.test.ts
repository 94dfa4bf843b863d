import { mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { ConfigError } from "../../src/errors.js";
import { loadConfigFile } from "../../src/config/load.js";
import { parseConfig, parsePort } from "../../src/config/parse.js";

async function file(name: string, text: string): Promise<string> {
  const dir = await mkdtemp(path.join(tmpdir(), "cfg-"));
  const target = path.join(dir, name);
  await writeFile(target, text);
  return target;
}

function issuesOf(fn: () => unknown): string[] {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return [...(error as ConfigError).issues];
  }
  throw new Error("expected a ConfigError");
}

describe("config", () => {
  it("accepts the documented example as written", async () => {
    const target = await file(
      "broker.json",
      JSON.stringify({
        backends: [
          { id: "everything", command: "npx", args: ["-y", "@modelcontextprotocol/server-everything"] },
          { id: "remote", url: "http://127.0.0.1:3101/mcp", headers: { Authorization: "Bearer x" } },
        ],
      }),
    );
    const config = await loadConfigFile(target);
    expect(config.server.host).toBe("127.0.0.1");
    expect(config.backends.map((b) => b.id)).toEqual(["everything", "remote"]);
    const stdio = config.backends[0] as { cwd?: string };
    expect(stdio.cwd).toBe(path.dirname(target));
  });

  it("reads YAML", async () => {
    const target = await file("broker.yaml", "backends:\n  - id: a\n    url: http://127.0.0.1:1/mcp\nserver:\n  port: 4000\n");
    const config = await loadConfigFile(target);
    expect(config.server.port).toBe(4000);
  });

  it("names the file and the field of every problem", async () => {
    const target = await file("bad.json", JSON.stringify({ backends: [{ id: "Bad_Id", url: "http://x/mcp" }], server: { port: "x" } }));
    const error = await loadConfigFile(target).then(
      () => undefined,
      (e: unknown) => e as ConfigError,
    );
    expect(error).toBeInstanceOf(ConfigError);
    expect(error?.message).toContain(target);
    expect(error?.issues.some((i) => i.startsWith("backends.0.id:"))).toBe(true);
    expect(error?.issues.some((i) => i.startsWith("server.port:"))).toBe(true);
  });

  it("rejects durations Node timers cannot hold (they would fire at once)", () => {
    const issues = issuesOf(() =>
      parseConfig({ backends: [{ id: "a", command: "x", healthIntervalMs: 3e9 }], server: { sessionIdleMs: 3e9 }, lists: { debounceMs: 2_147_483_648 } }, "t.json"),
    );
    expect(issues).toEqual([
      expect.stringMatching(/^server\.sessionIdleMs: must be at most 2147483647 ms/),
      expect.stringMatching(/^backends\.0\.healthIntervalMs: must be at most 2147483647 ms/),
      expect.stringMatching(/^lists\.debounceMs: must be at most 2147483647 ms/),
    ]);
    expect(parseConfig({ backends: [], server: { sessionIdleMs: 2_147_483_647 } }, "t.json").server.sessionIdleMs).toBe(2_147_483_647);
  });

  it("rejects a backend with both or neither transport, unknown fields and duplicate ids", () => {
    expect(issuesOf(() => parseConfig({ backends: [{ id: "a" }] }, "x.json")).join("\n")).toContain("backends.0");
    expect(issuesOf(() => parseConfig({ backends: [{ id: "a", command: "x", url: "http://h/" }] }, "x.json")).join("\n")).toContain("backends.0");
    expect(issuesOf(() => parseConfig({ backends: [], extra: 1 }, "x.json")).join("\n")).toContain("extra");
    const dup = issuesOf(() => parseConfig({ backends: [{ id: "a", command: "x" }, { id: "a", command: "y" }] }, "x.json"));
    expect(dup.join("\n")).toContain("backends.1.id: duplicate backend id 'a'");
  });

  it("names the field at fault in a stdio or HTTP backend, not the transport choice", () => {
    const issues = (backend: Record<string, unknown>) => issuesOf(() => parseConfig({ backends: [{ id: "a", ...backend }] }, "x.json"));
    expect(issues({ command: "x", prefix: "x__" })).toEqual([expect.stringMatching(/^backends\.0\.prefix: /)]);
    expect(issues({ command: "x", env: { X: 5 } })).toEqual([expect.stringMatching(/^backends\.0\.env\.X: /)]);
    expect(issues({ url: "http://h/mcp", timeoutMs: "5" })).toEqual([expect.stringMatching(/^backends\.0\.timeoutMs: /)]);
    expect(issues({})).toEqual(["backends.0: a backend needs `command` (stdio) or `url` (Streamable HTTP)"]);
    // Without either, what is wrong whatever the transport is named too.
    expect(issuesOf(() => parseConfig({ backends: [{ id: "9b", timeoutMs: -1 }] }, "x.json"))).toEqual([
      "backends.0: a backend needs `command` (stdio) or `url` (Streamable HTTP)",
      expect.stringMatching(/^backends\.0\.id: /),
      expect.stringMatching(/^backends\.0\.timeoutMs: /),
    ]);
    expect(issues({ command: "x", url: "http://h/mcp" })).toEqual(["backends.0: a backend needs either `command` (stdio) or `url` (Streamable HTTP), not both"]);
  });

  it("refuses what would fail every connection: a bad header, a reconnect delay over its maximum, a missing folder", async () => {
    const issues = (backend: Record<string, unknown>) => issuesOf(() => parseConfig({ backends: [{ id: "a", ...backend }] }, "x.json")).join("\n");
    expect(issues({ url: "http://h/mcp", headers: { "Bad Header": "v" } })).toMatch(/^backends\.0\.headers.*must be a header name/);
    expect(issues({ url: "http://h/mcp", headers: { "X-Key": "a\r\nInjected: 1" } })).toMatch(/^backends\.0\.headers\.X-Key: must not contain line breaks/);
    expect(issues({ command: "x", reconnect: { initialDelayMs: 5_000, maxDelayMs: 100 } })).toMatch(/^backends\.0\.reconnect\.initialDelayMs: initialDelayMs must be at most maxDelayMs/);
    expect(parseConfig({ backends: [{ id: "a", url: "http://h/mcp", headers: { Authorization: "Bearer t", "X-Api-Key": "k" } }] }, "x.json").backends[0]).toMatchObject({ headers: { Authorization: "Bearer t" } });
    const missing = await file("broker.json", JSON.stringify({ backends: [{ id: "a", command: "node", cwd: "no-such-folder" }] }));
    await expect(loadConfigFile(missing)).rejects.toThrow(/backends\.0\.cwd: no such folder: .*no-such-folder/);
    const present = await file("broker.json", JSON.stringify({ backends: [{ id: "a", command: "node", cwd: "." }] }));
    expect((await loadConfigFile(present)).backends[0]).toMatchObject({ cwd: path.dirname(present) });
  });

  it("takes toolChanges and pinnedTools, and refuses a pin that is not a logged hash", () => {
    const held = parseConfig({ backends: [{ id: "a", command: "x", toolChanges: "hold", pinnedTools: { echo: "AbCdEfGhIjKlMnOpQrStUv" } }] }, "x.json");
    expect(held.backends[0]).toMatchObject({ toolChanges: "hold", pinnedTools: { echo: "AbCdEfGhIjKlMnOpQrStUv" } });
    expect(parseConfig({ backends: [{ id: "a", command: "x" }] }, "x.json").backends[0]?.toolChanges).toBe("accept");
    expect(issuesOf(() => parseConfig({ backends: [{ id: "a", command: "x", pinnedTools: { echo: "sha256:abc" } }] }, "x.json")).join("\n")).toContain("backends.0.pinnedTools.echo");
    expect(issuesOf(() => parseConfig({ backends: [{ id: "a", command: "x", toolChanges: "ask" }] }, "x.json")).join("\n")).toContain("backends.0");
  });

  it("reports unreadable files and bad syntax as config errors", async () => {
    await expect(loadConfigFile("/nonexistent/broker.json")).rejects.toBeInstanceOf(ConfigError);
    const target = await file("broken.json", "{ not json");
    await expect(loadConfigFile(target)).rejects.toThrow(/not valid JSON/);
  });

  it("refuses a Redis URL that is not one (a typo in REDIS_URL is a config error, not a start failure)", () => {
    for (const url of ["garbage", "127.0.0.1:6379", "http://r:6379", "redis://"]) {
      expect(() => parseConfig({ backends: [] }, "x.json", { REDIS_URL: url }), url).toThrow(/redisUrl|REDIS_URL/);
      expect(() => parseConfig({ backends: [], redisUrl: url }, "x.json", {}), url).toThrow(/redisUrl/);
    }
    expect(() => parseConfig({ backends: [], redisUrl: "" }, "x.json", {})).toThrow(/redisUrl/);
    expect(parseConfig({ backends: [], redisUrl: "rediss://user:pw@r.example:6380/2" }, "x.json", {}).redisUrl).toBe("rediss://user:pw@r.example:6380/2");
  });

  it("refuses an empty host (it would bind every interface) and a key with white space (a Bearer token cannot carry it)", () => {
    expect(() => parseConfig({ backends: [], server: { host: "" } }, "x.json", {})).toThrow(/server\.host/);
    expect(() => parseConfig({ backends: [], server: { host: "  " } }, "x.json", {})).toThrow(/server\.host/);
    expect(() => parseConfig({ backends: [] }, "x.json", {}, { host: "" })).toThrow(/--host/);
    expect(() => parseConfig({ backends: [], auth: { apiKeys: [{ key: "team a key 0123456789", principal: "a" }] } }, "x.json", {})).toThrow(/white space/);
    expect(() => parseConfig({ backends: [], console: { adminKeys: ["admin key 0123456789"] } }, "x.json", {})).toThrow(/white space/);
    expect(parseConfig({ backends: [], server: { host: "0.0.0.0" } }, "x.json", {}).server.host).toBe("0.0.0.0");
  });

  it("refuses jobs.process false on the memory engine (nothing else would run its jobs), not on the Redis engine", () => {
    expect(issuesOf(() => parseConfig({ backends: [], jobs: { process: false } }, "x.json", {}))).toEqual([expect.stringMatching(/^jobs\.process: false needs the Redis engine .* memory engine/)]);
    expect(parseConfig({ backends: [], jobs: { process: false } }, "x.json", { REDIS_URL: "redis://r:6379" }).jobs.process).toBe(false);
    expect(parseConfig({ backends: [], jobs: { process: false }, redis: { cluster: ["r:7000"] } }, "x.json", {}).jobs.process).toBe(false);
  });

  it("applies PORT, HOST and REDIS_URL over the file, and command-line flags over both", () => {
    const config = parseConfig({ backends: [] }, "x.json", { PORT: "4100", HOST: "0.0.0.0", REDIS_URL: "redis://r:6379" });
    expect(config.server).toMatchObject({ port: 4100, host: "0.0.0.0" });
    expect(config.redisUrl).toBe("redis://r:6379");
    const flagged = parseConfig({ backends: [] }, "x.json", { PORT: "4100" }, { port: 4200, host: "::1" });
    expect(flagged.server).toMatchObject({ port: 4200, host: "::1" });
    expect(issuesOf(() => parseConfig({ backends: [] }, "x.json", { PORT: "http" }))).toEqual(["PORT (environment): 'http' is not a port number (0-65535)"]);
    // Number(" ") is 0, a random port: only digits are a port.
    for (const PORT of [" ", "1e3", "0x50", "65536", "-1"]) {
      expect(issuesOf(() => parseConfig({ backends: [] }, "x.json", { PORT }))).toEqual([`PORT (environment): '${PORT}' is not a port number (0-65535)`]);
    }
    expect(parsePort("0")).toBe(0);
    expect(parsePort("65535")).toBe(65_535);
    expect(parsePort("")).toBeUndefined();
  });
});

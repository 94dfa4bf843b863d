import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { localFleetConfig, readJsonConfig } from "../../src/fleet/fleet-config.js";
import { haproxyVariant, isSticky } from "../../src/fleet/haproxy-config.js";
import { PATHS } from "../../src/fleet/repo-paths.js";

const cfg = readFileSync(PATHS.haproxyCfg, "utf8");

describe("haproxyVariant (deploy/haproxy.cfg for local fleets)", () => {
  it("repeats the file's server line once per broker, addresses from BROKER1…BROKERn", () => {
    const variant = haproxyVariant(cfg, { brokers: 3, balancing: "sticky" });
    const servers = variant.split("\n").filter((line) => line.trim().startsWith("server "));
    expect(servers.map((line) => line.trim())).toEqual(['server broker1 "${BROKER1}" check', 'server broker2 "${BROKER2}" check', 'server broker3 "${BROKER3}" check']);
    expect(isSticky(variant)).toBe(true);
    // Everything else is the file's.
    expect(variant.split("\n").filter((line) => !line.trim().startsWith("server ")).slice(1)).toEqual(cfg.split("\n").filter((line) => !line.trim().startsWith("server ")));
  });

  it("leaves out the stick lines for round-robin, and can name the answering server", () => {
    const variant = haproxyVariant(cfg, { brokers: 2, balancing: "round-robin", serverHeader: "x-server" });
    expect(isSticky(variant)).toBe(false);
    expect(variant).toContain("http-response set-header x-server %s");
    expect(variant).toContain("balance roundrobin");
  });

  it("keeps deploy/haproxy.cfg passing SSE frames on at once (without it each waits up to ~200 ms)", () => {
    expect(cfg.split("\n").map((line) => line.trim())).toContain("option http-no-delay");
    expect(haproxyVariant(cfg, { brokers: 2, balancing: "round-robin" })).toContain("option http-no-delay");
  });

  it("refuses a file without a server line to repeat", () => {
    expect(() => haproxyVariant("backend brokers\n  balance roundrobin\n", { brokers: 2, balancing: "sticky" })).toThrow(/server brokerN/);
  });
});

describe("localFleetConfig (deploy/fleet.config.json for local fleets)", () => {
  it("points the compose demo service at its local address and changes nothing else", () => {
    const fleet = readJsonConfig(PATHS.fleetConfig);
    const local = localFleetConfig(fleet, { demo: "127.0.0.1:3100" });
    expect(local.backends).toEqual([{ id: "demo", url: "http://127.0.0.1:3100/mcp" }]);
    expect({ ...local, backends: fleet.backends }).toEqual(fleet);
  });

  it("refuses a backend on a compose service the fleet does not run", () => {
    expect(() => localFleetConfig({ backends: [{ id: "x", url: "http://other:1/mcp" }] }, { demo: "127.0.0.1:3100" })).toThrow(/other/);
  });
});

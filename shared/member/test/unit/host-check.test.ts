import type { IncomingMessage } from "node:http";
import { describe, expect, it } from "vitest";
import { HostCheck } from "../../src/operations.js";

const request = (host: string | undefined): IncomingMessage => ({ headers: host === undefined ? {} : { host } }) as IncomingMessage;

describe("HostCheck", () => {
  it("passes local and configured hosts, and refuses others every time, also after a host passed", () => {
    const check = new HostCheck(["broker.example"]);
    for (let round = 0; round < 3; round++) {
      expect(check.check(request("127.0.0.1:3000"))).toEqual({ ok: true });
      expect(check.check(request("broker.example"))).toEqual({ ok: true });
      expect(check.check(request("attacker.example:80"))).toEqual({ ok: false, status: 403, message: "Invalid Host: attacker.example" });
      expect(check.check(request(undefined))).toEqual({ ok: false, status: 403, message: "Missing Host header" });
      expect(check.check(request("bad host/"))).toMatchObject({ ok: false, status: 403 });
    }
  });

  it("keeps checking once it remembers as many passed values as it keeps", () => {
    const check = new HostCheck(["broker.example"]);
    for (let port = 1; port <= 200; port++) expect(check.check(request(`broker.example:${port}`))).toEqual({ ok: true });
    expect(check.check(request("attacker.example"))).toMatchObject({ ok: false, status: 403 });
    expect(check.check(request("broker.example:200"))).toEqual({ ok: true });
  });

  it("passes anything when every host is allowed", () => {
    expect(new HostCheck(["*"]).check(request("anything.example"))).toEqual({ ok: true });
  });
});

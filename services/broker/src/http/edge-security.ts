import { createHash, timingSafeEqual } from "node:crypto";
import type { IncomingMessage } from "node:http";
import { HostCheck } from "@mcp-broker/member";
import { localhostAllowedHostnames, validateOriginHeader } from "@modelcontextprotocol/server";

export const ANONYMOUS = "anonymous";

export type EdgeVerdict = { ok: true; principal: string } | { ok: false; status: 401 | 403; message: string; headers?: Record<string, string> };

/**
 * The checks every MCP request passes before anything else: Host (DNS rebinding), Origin (403),
 * then bearer API keys (401) when any are configured. A session id is never authentication.
 */
export class EdgeSecurity {
  private readonly hosts: HostCheck;
  private readonly origins: string[] | "any";
  private readonly keys: { digest: Buffer; principal: string }[];
  /** Exact origins granted CORS (`server.corsOrigins`); their hostnames pass the Origin check too. */
  private readonly cors: ReadonlySet<string>;

  /** Also takes the key as a Basic password, and challenges browsers with Basic in this realm (the console). */
  private readonly basicRealm: string | undefined;

  constructor(options: { allowedHosts: string[]; allowedOrigins: string[]; corsOrigins?: string[]; apiKeys: { key: string; principal: string }[]; basicRealm?: string }) {
    this.basicRealm = options.basicRealm;
    this.cors = new Set((options.corsOrigins ?? []).map((origin) => new URL(origin).origin));
    const corsHosts = [...this.cors].map((origin) => new URL(origin).hostname);
    this.hosts = new HostCheck(options.allowedHosts);
    this.origins = options.allowedOrigins.includes("*") ? "any" : [...localhostAllowedHostnames(), ...options.allowedOrigins, ...corsHosts];
    this.keys = options.apiKeys.map((k) => ({ digest: digest(k.key), principal: k.principal }));
  }

  get authRequired(): boolean {
    return this.keys.length > 0;
  }

  /** Host only (DNS rebinding): also guards `/readyz`, whose backend states and failures are not for any page to read. */
  checkHost(req: IncomingMessage): { ok: true } | { ok: false; status: 403; message: string } {
    return this.hosts.check(req);
  }

  /**
   * The request's `Origin` when it is one of `server.corsOrigins` exactly (scheme, host and port)
   * and the Host check passes: a browser page there may read the answers, its preflights are
   * answered. CORS is opt-in: allowing an Origin (DNS-rebinding check) does not grant it.
   */
  corsOrigin(req: IncomingMessage): string | undefined {
    const origin = req.headers.origin;
    if (origin === undefined || !this.cors.has(origin) || !this.checkHost(req).ok) return undefined;
    return origin;
  }

  check(req: IncomingMessage): EdgeVerdict {
    const host = this.checkHost(req);
    if (!host.ok) return host;
    if (this.origins !== "any" && req.headers.origin !== undefined) {
      const origin = validateOriginHeader(req.headers.origin, this.origins);
      if (!origin.ok) return { ok: false, status: 403, message: origin.message };
    }
    if (this.keys.length === 0) return { ok: true, principal: ANONYMOUS };
    const key = this.presentedKey(req.headers.authorization);
    if (key === undefined) {
      const challenge = this.basicRealm === undefined ? 'Bearer realm="mcp-broker"' : `Basic realm="${this.basicRealm}", charset="UTF-8"`;
      return { ok: false, status: 401, message: "Missing bearer token: send Authorization: Bearer <api key>.", headers: { "www-authenticate": challenge } };
    }
    const presented = digest(key);
    const found = this.keys.find((k) => timingSafeEqual(k.digest, presented));
    if (found === undefined) {
      const challenge = this.basicRealm === undefined ? 'Bearer realm="mcp-broker", error="invalid_token"' : `Basic realm="${this.basicRealm}", charset="UTF-8"`;
      return { ok: false, status: 401, message: "Invalid API key.", headers: { "www-authenticate": challenge } };
    }
    return { ok: true, principal: found.principal };
  }

  /** The key of `Authorization: Bearer <key>`, or (with `basicRealm`) the password of `Basic` (any user name). */
  private presentedKey(header: string | undefined): string | undefined {
    if (header === undefined) return undefined;
    const bearer = /^Bearer\s+(\S+)\s*$/i.exec(header);
    if (bearer?.[1] !== undefined) return bearer[1];
    const basic = this.basicRealm === undefined ? null : /^Basic\s+([A-Za-z0-9+/]+=*)\s*$/i.exec(header);
    if (basic?.[1] === undefined) return undefined;
    const decoded = Buffer.from(basic[1], "base64").toString("utf8");
    const colon = decoded.indexOf(":");
    return colon < 0 ? undefined : decoded.slice(colon + 1);
  }
}

function digest(key: string): Buffer {
  return createHash("sha256").update(key).digest();
}

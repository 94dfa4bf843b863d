import { z } from "zod";

/**
 * Backend ids become a URI scheme prefix (`<id>+<uri>`) and a tool prefix (`<id>__<name>`), so they
 * must start with a letter (URI scheme rule) and may not contain `_` or `+` (keeps both splits
 * unambiguous).
 */
export const BACKEND_ID_PATTERN = /^[a-z][a-z0-9-]{0,62}$/;

/** What `redisUrl` (and REDIS_URL) must look like: ioredis reads these. */
export const REDIS_URL = /^rediss?:\/\/\S+$/i;
export const REDIS_URL_EXPECTED = "a redis:// or rediss:// URL, such as redis://127.0.0.1:6379";

/** Node timers fire at once for longer delays than this (2^31 - 1 ms, about 24.8 days). */
export const MAX_TIMER_MS = 2_147_483_647;
const TOO_LONG = `must be at most ${MAX_TIMER_MS} ms (about 24.8 days)`;
const positiveMs = z.number().int().positive().max(MAX_TIMER_MS, TOO_LONG);
const ms = z.number().int().min(0).max(MAX_TIMER_MS, TOO_LONG);

const reconnectSchema = z
  .object({
    initialDelayMs: positiveMs.default(500),
    maxDelayMs: positiveMs.default(30_000),
    multiplier: z.number().min(1).default(2),
  })
  .strict()
  .refine((reconnect) => reconnect.initialDelayMs <= reconnect.maxDelayMs, { error: "initialDelayMs must be at most maxDelayMs", path: ["initialDelayMs"] });

/** An HTTP header name (RFC 9110 token), and a value without line breaks (both refused by fetch at every request). */
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const HEADER_VALUE = /^[^\r\n\0]*$/;

const backendCommon = {
  id: z
    .string()
    .regex(BACKEND_ID_PATTERN, "must be lowercase letters, digits and '-', starting with a letter (at most 63)"),
  /** Prefix this backend's names (`<id>__tool`, `<id>+uri`). Set false only when names cannot collide. */
  prefix: z.boolean().default(true),
  /** Which protocol era to speak: `auto` probes `server/discover` and falls back to `initialize`. */
  era: z.enum(["auto", "legacy", "modern"]).default("auto"),
  /** Per-request timeout towards this backend. */
  timeoutMs: positiveMs.default(30_000),
  reconnect: reconnectSchema.prefault({}),
  /** Polling interval for subscribed resources when the backend cannot push updates. */
  pollIntervalMs: positiveMs.optional(),
  /** Re-list interval when the backend does not announce list changes. */
  relistIntervalMs: positiveMs.optional(),
  /** Ping interval that detects a backend gone away (HTTP) or hung (any) between requests. */
  healthIntervalMs: positiveMs.default(15_000),
  /** How long a ping may take before the backend counts as degraded; unset: min(5000, timeoutMs). */
  healthTimeoutMs: positiveMs.optional(),
  /** `hold`: a tool definition that changed (or a tool that appeared) after the first list is held until pinned. */
  toolChanges: z.enum(["accept", "hold"]).default("accept"),
  /** Tool name → canonical hash of the one definition to expose (implies `toolChanges: "hold"`; others are held). */
  pinnedTools: z.record(z.string(), z.string().regex(/^[A-Za-z0-9_-]{22}$/, "must be a definition hash as logged (22 characters)")).optional(),
};

const stdioBackend = z
  .object({
    ...backendCommon,
    command: z.string().min(1),
    args: z.array(z.string()).default([]),
    env: z.record(z.string(), z.string()).optional(),
    cwd: z.string().optional(),
  })
  .strict();

const httpBackend = z
  .object({
    ...backendCommon,
    url: z.url({ protocol: /^https?$/, error: "must be an http(s) URL" }),
    /** Sent on every request to this backend; the client's own credentials never are. */
    headers: z
      .record(z.string().regex(HEADER_NAME, "must be a header name (letters, digits and !#$%&'*+-.^_`|~)"), z.string().regex(HEADER_VALUE, "must not contain line breaks"))
      .default({}),
  })
  .strict();

export const backendConfigSchema = z.union([stdioBackend, httpBackend], {
  error: "a backend needs either `command` (stdio) or `url` (Streamable HTTP), not both",
});

const apiKeySchema = z
  .object({
    // Sent as `Bearer <key>`: a key with white space could never be presented.
    key: z.string().min(16, "must be at least 16 characters").regex(/^\S+$/, "may not contain white space"),
    principal: z.string().min(1).regex(/^[^:\s]+$/, "may not contain ':' or white space"),
  })
  .strict();

/** A Redis Cluster seed node: `host:port` (IPv6 in brackets), never a URL. */
export const SEED_NODE = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})$/;
const seedNodeSchema = z.string().refine((node) => SEED_NODE.test(node) && Number(SEED_NODE.exec(node)?.[2]) <= 65_535, {
  message: "a Redis Cluster seed node is host:port (for example 127.0.0.1:7000), not a URL",
});

export const brokerConfigSchema = z
  .object({
    server: z
      .object({
        // Empty would bind every interface (Node's listen): say 0.0.0.0 or :: for that.
        host: z.string().trim().min(1, "must name an address (0.0.0.0 or :: for every interface)").default("127.0.0.1"),
        port: z.number().int().min(0).max(65_535).default(3000),
        /** Hostnames accepted in `Origin`; localhost names are always accepted. */
        allowedOrigins: z.array(z.string()).default([]),
        /** Hostnames accepted in `Host`; localhost names are always accepted. */
        allowedHosts: z.array(z.string()).default([]),
        /** Exact origins (`https://app.example.com:8443`) whose browser pages may call the broker (CORS); none by default. */
        corsOrigins: z.array(z.url({ error: "must be an origin such as https://app.example.com" })).default([]),
        maxBodyBytes: z.number().int().positive().default(4 * 1024 * 1024),
        /** A legacy session with no open stream and no request for this long is ended. */
        sessionIdleMs: positiveMs.default(30 * 60_000),
        /** SSE keep-alive comment interval; 0 disables. */
        keepAliveMs: ms.default(15_000),
        /** Legacy sessions plus modern listen streams one principal may hold at once. */
        maxSessionsPerPrincipal: z.number().int().positive().default(10_000),
        /** Events a legacy session keeps for Last-Event-ID resumption (more: longer gaps covered, more memory). */
        resumeHistory: z.number().int().min(0).max(100_000).default(64),
        /** A request (headers and body) must arrive within this long, or it gets 408. */
        requestTimeoutMs: positiveMs.default(30_000),
        /** A stopping broker lets the requests in flight (tool calls) finish for at most this long before it closes their connections. */
        drainMs: ms.default(10_000),
        /** `/mcp` requests before the broker serves: held until it does, or refused with 503 (behind a load balancer that retries elsewhere). */
        whileStarting: z.enum(["hold", "refuse"]).default("hold"),
        /** Also serve HTTP/2 without TLS (h2c, prior knowledge) on the same port, for a load balancer that speaks HTTP/2 to its backends. */
        http2: z.boolean().default(true),
      })
      .strict()
      .prefault({}),
    auth: z
      .object({ apiKeys: z.array(apiKeySchema).default([]) })
      .strict()
      .prefault({}),
    backends: z.array(backendConfigSchema),
    /** The operator console's API at /console/api/ (off by default): admin keys, or loopback requests only when there are none. */
    console: z
      .object({
        enabled: z.boolean().default(false),
        adminKeys: z.array(z.string().min(16, { error: "must be at least 16 characters" }).regex(/^\S+$/, "may not contain white space")).default([]),
      })
      .strict()
      .prefault({}),
    /** A modern client's InputRequiredResult rounds (see README, "Questions from backends"). */
    interaction: z
      .object({
        /** Seals the requestState handed to modern clients; the same on every instance of a cluster (unset: the cluster's shared secret in Redis, or a lone memory-engine broker's own). */
        stateKey: z.string().min(32, { error: "must be at least 32 characters" }).optional(),
        /** How long a held call and a sealed requestState wait for the client's retry. */
        heldCallMs: positiveMs.default(5 * 60_000),
      })
      .strict()
      .prefault({}),
    /** The broker's own resource discovery tools (catalog_resources, describe_resource, search_resources, catalog_resource_templates) in tools/list. */
    metaTools: z.boolean().default(true),
    subscriptions: z
      .object({
        maxPerSession: z.number().int().positive().default(1_000),
        maxPerPrincipal: z.number().int().positive().default(10_000),
        maxTotal: z.number().int().positive().default(1_000_000),
        /** How long an upstream subscription outlives its last subscriber. */
        releaseGraceMs: ms.default(5_000),
        pollIntervalMs: positiveMs.default(10_000),
      })
      .strict()
      .prefault({}),
    lists: z
      .object({
        debounceMs: ms.default(1_000),
        relistIntervalMs: positiveMs.default(5 * 60_000),
        /** Items per page of the aggregated lists. */
        pageSize: z.number().int().min(1).max(10_000).default(500),
      })
      .strict()
      .prefault({}),
    jobs: z
      .object({
        /**
         * This member runs the cluster's jobs (list reloads, reaping, audits, lowered limits). A lone
         * broker must; in a fleet with workers, brokers may leave them to the workers.
         */
        process: z.boolean().default(true),
        /** Jobs this member runs at once (one key never runs twice at once). */
        concurrency: z.number().int().min(1).max(100).default(8),
        /** Runs a failing job gets before it fails for good; the retries back off exponentially from backoffMs. */
        attempts: z.number().int().min(1).max(100).default(10),
        backoffMs: positiveMs.default(500),
        /** A running job's lock (Redis engine): a member that stops renewing it loses the job to another within about twice this (one found dead, sooner). */
        lockMs: z.number().int().min(1_000).max(MAX_TIMER_MS, TOO_LONG).default(30_000),
        /** How often the subscription counts are recounted from the sessions' sets and repaired. */
        auditIntervalMs: positiveMs.default(5 * 60_000),
      })
      .strict()
      .prefault({}),
    logging: z
      .object({ level: z.enum(["trace", "debug", "info", "warn", "error", "fatal", "silent"]).default("info") })
      .strict()
      .prefault({}),
    /** Set (or REDIS_URL): the Redis engine; every instance with the same Redis and key prefix is one cluster. */
    redisUrl: z.string().regex(REDIS_URL, REDIS_URL_EXPECTED).optional(),
    redis: z
      .object({
        /** Prefix of every Redis key and channel: clusters sharing one Redis need different prefixes. */
        keyPrefix: z.string().min(1).max(64).regex(/^[^\s{}]+$/, "no whitespace or braces").default("mcp-broker:"),
        /** How long a backend's watcher lease lasts without renewal (renewed every third of it). */
        leaseTtlMs: z.number().int().min(1_000).max(MAX_TIMER_MS, TOO_LONG).default(2_000),
        /**
         * How long an instance counts as alive after its last heartbeat (sent every fifth of it).
         * The others release what a dead instance's sessions held once it has passed.
         */
        instanceTtlMs: z.number().int().min(1_000).max(MAX_TIMER_MS, TOO_LONG).default(30_000),
        /** How long a subscribe waits for the backend's watcher on another instance (longer than a backend's default timeoutMs, which the watcher waits for). */
        watcherTimeoutMs: positiveMs.default(35_000),
        /** Workers (mcp-broker-worker) take backends' watcher leases before brokers (see README, "Running a cluster"). */
        workersWatchFirst: z.boolean().default(true),
        /**
         * Set (or REDIS_CLUSTER_NODES): the Redis engine on a Redis Cluster, through these seed nodes
         * (`host:port`; any reachable node tells the client the rest). Instead of `redisUrl`.
         */
        cluster: z.array(seedNodeSchema).min(1).max(100).optional(),
      })
      .strict()
      .prefault({}),
  })
  .strict()
  .superRefine((config, ctx) => {
    const seen = new Map<string, number>();
    config.backends.forEach((backend, index) => {
      const first = seen.get(backend.id);
      if (first !== undefined) {
        ctx.addIssue({
          code: "custom",
          path: ["backends", index, "id"],
          message: `duplicate backend id '${backend.id}' (also backends.${first}.id)`,
        });
      }
      seen.set(backend.id, index);
    });
    if (config.redisUrl !== undefined && config.redis.cluster !== undefined) {
      ctx.addIssue({ code: "custom", path: ["redis", "cluster"], message: "set either redisUrl (one Redis) or redis.cluster (Redis Cluster seed nodes), not both" });
    }
    const keys = new Set<string>();
    config.auth.apiKeys.forEach((entry, index) => {
      if (keys.has(entry.key)) {
        ctx.addIssue({ code: "custom", path: ["auth", "apiKeys", index, "key"], message: "duplicate API key" });
      }
      keys.add(entry.key);
    });
  });

export type BrokerConfig = z.output<typeof brokerConfigSchema>;
export type BrokerConfigInput = z.input<typeof brokerConfigSchema>;
export type BackendConfig = z.output<typeof backendConfigSchema>;
export type StdioBackendConfig = Extract<BackendConfig, { command: string }>;
export type HttpBackendConfig = Extract<BackendConfig, { url: string }>;

export function isStdioBackend(backend: BackendConfig): backend is StdioBackendConfig {
  return "command" in backend;
}

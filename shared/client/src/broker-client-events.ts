import type { CallToolResult, ProtocolEra } from "@modelcontextprotocol/client";
import type { UriTemplateVariables } from "@mcp-broker/shared";
import type { CachedPrompt, CachedResource, CachedTemplateResource, CachedToolCall } from "./cache/content-cache.js";
import type { ConnectionState } from "./connection/connection-supervisor.js";
import type { Prompt, Resource, ResourceTemplate, Tool } from "./lists/list-catalog.js";
import type { RequestMetadata } from "./request-metadata.js";

/**
 * Why a subscribed resource is reported updated: the server said so (`notification`), or it may
 * have changed while the client could not hear (`resync`: after a reconnect, a reopened listen
 * stream, or a pending subscription accepted at last).
 */
export type ResourceUpdateReason = "notification" | "resync";

/**
 * Why cached resource content changed: a fetch of yours (`read`: `readResource`,
 * `readResourceFromTemplate`), or the client's own re-read after an update of a subscribed URI
 * (`update`, with that update's `reason`). An update reported this way fires no `resourceUpdated`.
 */
export type ResourceContentCause = { readonly cause: "read" } | { readonly cause: "update"; readonly reason: ResourceUpdateReason };

/** A content change of a resource, from the direct cache or from one template's entry, and its cause. */
export type ResourceContentChange = ResourceContentCause &
  (
    | {
        readonly source: "resource";
        readonly uri: string;
        /** The new entry; null when the server answered a fetch with an error (the entry was dropped; see `error`). */
        readonly entry: CachedResource | null;
        /** `entry`, under InspectorClient's name. */
        readonly content: CachedResource | null;
        readonly error?: unknown;
      }
    | {
        readonly source: "template";
        readonly uri: string;
        readonly uriTemplate: string;
        readonly entry: CachedTemplateResource | null;
        readonly content: CachedTemplateResource | null;
        readonly error?: unknown;
      }
  ) & {
    /** The entry's timestamp, or when the error arrived. */
    readonly timestamp: Date;
  };

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

/** What the client knows of a resource content change before it adds InspectorClient's fields. */
export type ResourceContentOutcome = DistributiveOmit<ResourceContentChange, "content" | "timestamp">;

/** A tool call's outcome: the entry, and InspectorClient's flat payload of the same outcome. */
export interface ToolCallResultChange {
  readonly name: string;
  readonly entry: CachedToolCall;
  readonly toolName: string;
  readonly params: Readonly<Record<string, unknown>>;
  /** The tool's result; null when the call threw. */
  readonly result: CallToolResult | null;
  readonly timestamp: Date;
  readonly success: boolean;
  /** The message of the error, when `success` is false. */
  readonly error?: string;
  readonly metadata?: RequestMetadata;
}

/** The events of a `BrokerClient`, by name, with the `detail` each carries. */
export interface BrokerClientEventMap {
  /** The connection state changed (`attempt`: failed reconnect attempts so far). */
  connectionChange: { readonly state: ConnectionState; readonly era: ProtocolEra | undefined; readonly error?: unknown; readonly attempt?: number };
  /** The tool list was (re)loaded; on failure `tools` is the previous list and `error` says why. */
  toolsChange: { readonly tools: readonly Tool[]; readonly error?: unknown };
  resourcesChange: { readonly resources: readonly Resource[]; readonly error?: unknown };
  resourceTemplatesChange: { readonly resourceTemplates: readonly ResourceTemplate[]; readonly error?: unknown };
  promptsChange: { readonly prompts: readonly Prompt[]; readonly error?: unknown };
  /**
   * The set of subscribed URIs changed, or which of them are pending (refused on a resubscribe,
   * retried with backoff and after each reload of the resource list).
   */
  resourceSubscriptionsChange: { readonly uris: readonly string[]; readonly pending: readonly string[] };
  /**
   * A subscribed resource (or a sub-resource of one) changed, and no new content of it comes with
   * the update: nothing of it is cached, or the client's re-read of its cached entries got no
   * answer (the entries stay as they were; an `error` event "re-read <uri>" follows) or has
   * nothing left to announce (every entry cleared or refetched meanwhile). Read it if you need it.
   *
   * Contract: each update of a subscribed URI fires either this, once, or `resourceContentChange`
   * with `cause: "update"` once per cached entry still current when the re-read answers — never
   * both, never neither (unless the URI was unsubscribed before its re-read ended).
   */
  resourceUpdated: { readonly uri: string; readonly reason: ResourceUpdateReason };
  /**
   * Cached resource content changed: fetched by a read (`cause: "read"`), or re-read by the client
   * after an update of a subscribed URI whose content is cached (`cause: "update"`, in place of
   * `resourceUpdated`; one event per entry, the direct entry first, then each template entry).
   */
  resourceContentChange: ResourceContentChange;
  /**
   * InspectorClient's event for a template entry with new content (a read, or a re-read after an
   * update); fired right after the `resourceContentChange` with `source: "template"`.
   */
  resourceTemplateContentChange: {
    readonly uriTemplate: string;
    readonly content: CachedTemplateResource;
    readonly params: UriTemplateVariables;
    readonly timestamp: Date;
  };
  /**
   * A prompt was fetched; `entry` is null when the server answered with an error (the entry was
   * dropped; see `error`). `content` is `entry` under InspectorClient's name.
   */
  promptContentChange: {
    readonly name: string;
    readonly entry: CachedPrompt | null;
    readonly content: CachedPrompt | null;
    readonly timestamp: Date;
    readonly error?: unknown;
  };
  toolCallResultChange: ToolCallResultChange;
  /** A failure of background work that no call of yours could receive (e.g. a refused resubscribe). */
  error: { readonly error: unknown; readonly operation: string };
}

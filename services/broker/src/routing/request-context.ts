import type { ClientInteraction } from "@mcp-broker/member";
import type { ProtocolEra } from "@mcp-broker/shared";

export const LOG_LEVELS = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/** Everything a request handler may know about who asked and how to answer. */
export interface RequestContext {
  readonly era: ProtocolEra;
  /** The authenticated principal (`anonymous` when no API keys are configured). */
  readonly principal: string;
  /** Legacy session id, when the request belongs to one. */
  readonly sessionId: string | undefined;
  /** Aborted when the client goes away or cancels. */
  readonly signal: AbortSignal;
  /** The client's progress token for this request, if it asked for progress. */
  readonly progressToken: string | number | undefined;
  /** Minimum level of backend log messages this client wants for this request; none when undefined. */
  readonly logLevel: LogLevel | undefined;
  /** Sends a notification on this request's own response stream (progress, log messages). */
  notify(method: string, params: Record<string, unknown>): void;
  /** The client as a backend's requests during this call reach it (sampling, elicitation, roots); undefined when it cannot be asked. */
  readonly interaction?: ClientInteraction | undefined;
}

export function levelAtLeast(level: unknown, minimum: LogLevel): boolean {
  const index = LOG_LEVELS.indexOf(level as LogLevel);
  return index >= 0 && index >= LOG_LEVELS.indexOf(minimum);
}

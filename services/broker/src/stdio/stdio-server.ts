import type { Readable, Writable } from "node:stream";
import { StringDecoder } from "node:string_decoder";
import { classifyInboundRequest } from "@modelcontextprotocol/server";
import type { ClientInteraction } from "@mcp-broker/member";
import { META, NOTIFICATION } from "@mcp-broker/shared";
import type { Broker } from "../broker.js";
import type { JsonRpcRequest } from "../routing/dispatcher.js";
import { rpcError } from "../http/mcp-endpoint.js";
import { unsupportedRevision } from "../http/modern-headers.js";
import { nestsTooDeep, TOO_DEEP_MESSAGE, topLevelId } from "../routing/message-depth.js";
import { LOG_LEVELS, type LogLevel, type RequestContext } from "../routing/request-context.js";
import type { LegacySession } from "../session/legacy-session.js";
import { acknowledgement, parseListenRequest, wantsListChanges, type ListenRequest } from "../session/listen-request.js";
import type { PreparedNotification } from "../fanout/prepared-notification.js";
import { resumeOrder } from "../fanout/event-ids.js";

const STDIO_PRINCIPAL = "stdio";

type Json = Record<string, unknown>;

/**
 * Serves one local client over stdio (newline-delimited JSON-RPC), in either era: a legacy client
 * opens with `initialize` and gets one session; a modern client sends enveloped requests and
 * `subscriptions/listen`, each listen tagged by its request id on the shared channel.
 * Resolves when the input ends.
 */
export function serveStdio(broker: Broker, io: { input: Readable; output: Writable }): Promise<void> {
  const maxLine = broker.config.server.maxBodyBytes;
  const oversized = () => rpcError(null, -32600, `Message too large: the limit is ${maxLine} bytes (server.maxBodyBytes); dropped.`);
  let pending = "";
  const writeLine = (line: string) => io.output.write(line);
  const send = (message: unknown) => writeLine(`${JSON.stringify(message)}\n`);
  let session: LegacySession | undefined;
  /** While the session of the latest `initialize` is being made: legacy requests after it wait for it. */
  let sessionReady: Promise<void> | undefined;
  let stdoutClosed = false;
  const listens = new Map<string | number, { close(): void }>();
  const inflight = new Map<string | number, AbortController>();

  /** The legacy client, as a backend's requests during one of its calls reach it: written to stdout, answered on stdin. */
  const interactionOf = (asked: LegacySession, callSignal: AbortSignal): ClientInteraction => ({
    principal: asked.principal,
    supports: asked.supports,
    ask: (method, params, signal) => {
      const write = (message: unknown): boolean => {
        if (stdoutClosed) return false;
        send(message);
        return true;
      };
      return asked.askClient(write, method, params, AbortSignal.any([signal, callSignal]));
    },
  });

  const context = (era: "legacy" | "modern", request: JsonRpcRequest, signal: AbortSignal): RequestContext => {
    const meta = (request.params?._meta ?? {}) as Json;
    const token = meta.progressToken;
    const level = meta[META.logLevel];
    return {
      era,
      principal: STDIO_PRINCIPAL,
      sessionId: session?.id,
      signal,
      progressToken: typeof token === "string" || typeof token === "number" ? token : undefined,
      logLevel: era === "modern" ? (LOG_LEVELS.includes(level as LogLevel) ? (level as LogLevel) : undefined) : session?.logLevel,
      notify: (method, params) => send({ jsonrpc: "2.0", method, params }),
      interaction: era === "legacy" && session !== undefined ? interactionOf(session, signal) : undefined,
    };
  };

  const run = async (era: "legacy" | "modern", request: JsonRpcRequest): Promise<void> => {
    const abort = new AbortController();
    inflight.set(request.id, abort);
    try {
      send(await broker.dispatcher.handle(request, context(era, request, abort.signal), era === "legacy" ? session : undefined));
    } finally {
      inflight.delete(request.id);
    }
  };

  const listen = (message: JsonRpcRequest): void => {
    let request: ListenRequest;
    try {
      request = parseListenRequest(message.params);
    } catch (error) {
      send(broker.dispatcher.errorResponse(message.id, error, "modern"));
      return;
    }
    const cursor = { subscriptionId: message.id, cursorPrefix: broker.sessions.cursorPrefix(STDIO_PRINCIPAL) };
    /** Held notifications: until the acknowledgement, and while a resumption is read. */
    let backlog: PreparedNotification[] | undefined = [];
    let resuming = false;
    const handle = broker.sessions.openListen(
      STDIO_PRINCIPAL,
      request.flags,
      request.uris ?? [],
      () => ({
        principal: STDIO_PRINCIPAL,
        flags: request.flags,
        wants: wantsListChanges(request.flags),
        deliver: (notification: PreparedNotification) => {
          if (backlog !== undefined) backlog.push(notification);
          else writeLine(notification.jsonLine(cursor));
        },
        hold: () => {
          resuming = true;
          backlog ??= [];
        },
        release: (told, late) => {
          resuming = false;
          const held = backlog ?? [];
          backlog = undefined;
          for (const notification of resumeOrder(told, held, late)) writeLine(notification.jsonLine(cursor));
        },
      }),
      (outcome) => {
        if (outcome.type === "listen.rejected") {
          listens.delete(message.id);
          send(broker.dispatcher.errorResponse(message.id, outcome.error, "modern"));
          return;
        }
        send(acknowledgement(message.id, request, outcome));
        if (resuming) return;
        for (const notification of backlog ?? []) writeLine(notification.jsonLine(cursor));
        backlog = undefined;
      },
      request.cursor,
    );
    listens.set(message.id, handle);
  };

  const handleMessage = (message: unknown): void => {
    if (typeof message !== "object" || message === null || Array.isArray(message)) {
      send(rpcError(null, -32600, "Invalid Request: expected one JSON-RPC message per line."));
      return;
    }
    const msg = message as Json;
    // A response: the client's answer to a backend's request the broker passed on to it (see ClientRequests).
    if (typeof msg.method !== "string") {
      session?.clientAnswered(msg);
      return;
    }
    const route = classifyInboundRequest({ httpMethod: "POST", body: message });
    const id = typeof msg.id === "string" || typeof msg.id === "number" ? msg.id : null;
    if (route.kind === "reject") {
      if (id !== null) send(rpcError(id, route.code, route.message, route.data));
      return;
    }
    if (msg.method === NOTIFICATION.cancelled) {
      const requestId = (msg.params as Json | undefined)?.requestId;
      if (typeof requestId === "string" || typeof requestId === "number") {
        inflight.get(requestId)?.abort();
        listens.get(requestId)?.close();
        listens.delete(requestId);
      }
      return;
    }
    if (id === null) return; // other notifications need no answer
    const request = message as unknown as JsonRpcRequest;
    if (route.kind === "modern") {
      const unsupported = unsupportedRevision(route.classification.revision);
      if (unsupported !== undefined) {
        send(rpcError(id, unsupported.code, unsupported.message, unsupported.data));
        return;
      }
      if (request.method === "subscriptions/listen") listen(request);
      else void run("modern", request);
      return;
    }
    if (request.method === "initialize") {
      session?.close("re-initialized");
      session = undefined;
      const params = request.params ?? {};
      const ready = broker.sessions
        .createLegacySession(STDIO_PRINCIPAL, { protocolVersion: broker.dispatcher.negotiatedVersion(params), clientInfo: params.clientInfo, capabilities: params.capabilities })
        .then(
          (created) => {
            session = created;
            void created.attachStream(
              {
                get closed() {
                  return stdoutClosed;
                },
                write: (notification) => writeLine(notification.jsonLine()),
                onClose: () => undefined,
                close: () => undefined,
              },
              undefined,
            );
            void run("legacy", request);
          },
          (error: unknown) => {
            send(broker.dispatcher.errorResponse(id, error, "legacy"));
          },
        )
        .finally(() => {
          if (sessionReady === ready) sessionReady = undefined;
        });
      sessionReady = ready;
      return;
    }
    const serve = (): void => {
      if (session === undefined) {
        send(rpcError(id, -32600, "Send initialize first (or use the 2026-07-28 per-request envelope)."));
        return;
      }
      session.touch();
      void run("legacy", request);
    };
    if (sessionReady === undefined) serve();
    else void sessionReady.then(serve);
  };

  return new Promise((resolve) => {
    // Chunks split multi-byte characters; the decoder carries the partial bytes to the next chunk.
    const decoder = new StringDecoder("utf8");
    /** The rest of an oversized line is still arriving: drop it up to its newline. */
    let skipping = false;
    io.input.on("data", (chunk: Buffer) => {
      pending += decoder.write(chunk);
      let newline: number;
      while ((newline = pending.indexOf("\n")) >= 0) {
        const line = pending.slice(0, newline).replace(/\r$/, "");
        pending = pending.slice(newline + 1);
        if (skipping) {
          skipping = false;
          continue;
        }
        if (line.trim() === "") continue;
        if (line.length > maxLine) {
          send(oversized());
          continue;
        }
        if (nestsTooDeep(line)) {
          send(rpcError(topLevelId(line), -32600, TOO_DEEP_MESSAGE));
          continue;
        }
        let message: unknown;
        try {
          message = JSON.parse(line);
        } catch {
          send(rpcError(null, -32700, "Parse error: a line is not valid JSON."));
          continue;
        }
        handleMessage(message);
      }
      if (pending.length > maxLine) {
        if (!skipping) send(oversized());
        pending = "";
        skipping = true;
      }
    });
    const end = () => {
      stdoutClosed = true;
      for (const listenHandle of listens.values()) listenHandle.close();
      session?.close("stdin closed");
      resolve();
    };
    io.input.once("end", end);
    io.input.once("close", end);
  });
}

import type { Readable, Writable } from "node:stream";
import { StringDecoder } from "node:string_decoder";
import { classifyInboundRequest } from "@modelcontextprotocol/server";
import type { ClientInteraction } from "@mcp-broker/member";
import { isJsonObject, META, NOTIFICATION } from "@mcp-broker/shared";
import type { Broker } from "../broker.js";
import type { JsonRpcRequest } from "../routing/dispatcher.js";
import { rpcError } from "../http/mcp-endpoint.js";
import { unsupportedRevision } from "../http/modern-headers.js";
import { nestsTooDeep, TOO_DEEP_MESSAGE, topLevelId } from "../routing/message-depth.js";
import { LOG_LEVELS, type LogLevel, type RequestContext } from "../routing/request-context.js";
import type { LegacySession } from "../session/legacy-session.js";
import { acknowledgement, parseListenRequest, wantsListChanges, type ListenRequest } from "../session/listen-request.js";
import { validateParams } from "../routing/validate-params.js";
import type { PreparedNotification } from "../fanout/prepared-notification.js";
import { resumeOrder } from "../fanout/event-ids.js";

const STDIO_PRINCIPAL = "stdio";

/**
 * Bytes waiting on stdout past which the client counts as not reading (by default), as an HTTP stream is cut off
 * at this many (sse-stream.ts): notifications then wait (a legacy session's in its history, sent
 * once stdout drains; a listen stream ends, and its client reopens it with its cursor) instead of
 * being buffered without bound.
 */
const MAX_QUEUED_BYTES = 8 * 1024 * 1024;

type Json = Record<string, unknown>;

/**
 * Serves one local client over stdio (newline-delimited JSON-RPC), in either era: a legacy client
 * opens with `initialize` and gets one session; a modern client sends enveloped requests and
 * `subscriptions/listen`, each listen tagged by its request id on the shared channel.
 * Resolves when the input ends.
 */
export function serveStdio(broker: Broker, io: { input: Readable; output: Writable; maxQueuedBytes?: number }): Promise<void> {
  const maxLine = broker.config.server.maxBodyBytes;
  const maxQueued = io.maxQueuedBytes ?? MAX_QUEUED_BYTES;
  const oversized = (id: string | number | null) => rpcError(id, -32600, `Message too large: the limit is ${maxLine} bytes (server.maxBodyBytes); dropped.`);
  let pending = "";
  /** stdout closed or failed (the client went away): nothing more is written, and serving ends. */
  let stdoutClosed = false;
  /** The client stopped reading: MAX_QUEUED_BYTES wait on stdout; notifications wait until it drains. */
  let fallenBehind = false;
  const writeLine = (line: string): void => {
    if (stdoutClosed) return;
    io.output.write(line);
    if (!fallenBehind && io.output.writableLength > maxQueued) fallBehind();
  };
  const send = (message: unknown) => writeLine(`${JSON.stringify(message)}\n`);
  let session: LegacySession | undefined;
  /** The legacy session's stream: stdout, until the client falls behind (a new one is attached once it catches up). */
  let sessionStream: { detach(): void } | undefined;
  /** While the session of the latest `initialize` is being made: legacy requests after it wait for it. */
  let sessionReady: Promise<void> | undefined;
  const listens = new Map<string | number, { close(): void }>();
  const inflight = new Map<string | number, AbortController>();

  /** Ends a listen stream from the broker's side: its request gets its answer (a result, or `error`), and it is closed. */
  const endListen = (id: string | number, error?: unknown): void => {
    const handle = listens.get(id);
    if (handle === undefined) return;
    listens.delete(id);
    send(error === undefined ? broker.dispatcher.listenResult(id) : broker.dispatcher.errorResponse(id, error, "modern"));
    handle.close();
  };

  /** The legacy session's notifications go to stdout through this, until the client falls behind. */
  const attachSession = (attached: LegacySession): void => {
    let onClose: (() => void) | undefined;
    let detached = false;
    sessionStream = {
      detach: () => {
        detached = true;
        onClose?.();
      },
    };
    void attached.attachStream(
      {
        get closed() {
          return stdoutClosed || detached;
        },
        write: (notification) => writeLine(notification.jsonLine()),
        onClose: (listener) => (onClose = listener),
        close: () => undefined,
      },
      undefined, // what it missed since what was written last
    );
  };

  /**
   * The client stopped reading its stdout: the legacy session's stream is detached (what comes
   * meanwhile waits in its history, or in the cluster), and every listen stream ends with its
   * result (its client reopens it with its cursor and is told what it missed). Once stdout
   * drains, the session gets a stream again, with what it missed.
   */
  const fallBehind = (): void => {
    fallenBehind = true;
    broker.logger.warn({ queuedBytes: io.output.writableLength }, "stdio: the client does not read its stdout; notifications wait until it does");
    sessionStream?.detach();
    sessionStream = undefined;
    for (const id of [...listens.keys()]) endListen(id);
    io.output.once("drain", () => {
      fallenBehind = false;
      if (session !== undefined && !stdoutClosed) attachSession(session);
    });
  };

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
    let rejected = false;
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
          else if (fallenBehind) endListen(message.id); // opened while the client does not read: it reopens with its cursor
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
        end: () => endListen(message.id),
        fail: (error) => endListen(message.id, error),
      }),
      (outcome) => {
        if (outcome.type === "listen.rejected") {
          rejected = true;
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
    // A rejection can come at once (the session limit), before this: it leaves nothing open.
    if (!rejected) listens.set(message.id, handle);
  };

  const handleMessage = (message: unknown): void => {
    if (typeof message !== "object" || message === null || Array.isArray(message)) {
      send(rpcError(null, -32600, "Invalid Request: expected one JSON-RPC message per line."));
      return;
    }
    const msg = message as Json;
    const id = typeof msg.id === "string" || typeof msg.id === "number" ? msg.id : null;
    // A response: the client's answer to a backend's request the broker passed on to it (see ClientRequests).
    if (!Object.hasOwn(msg, "method")) {
      if (id !== null && (Object.hasOwn(msg, "result") || Object.hasOwn(msg, "error"))) session?.clientAnswered(msg);
      else send(rpcError(id, -32600, "Invalid Request: a message needs a method (a request or notification), or an id and a result or error (a response)."));
      return;
    }
    if (typeof msg.method !== "string") {
      send(rpcError(id, -32600, "Invalid Request: method must be a string."));
      return;
    }
    if (Object.hasOwn(msg, "id") && id === null) {
      send(rpcError(null, -32600, "Invalid Request: id must be a string or a number."));
      return;
    }
    if (id !== null && (inflight.has(id) || listens.has(id))) {
      send(rpcError(id, -32600, `Invalid Request: id ${JSON.stringify(id)} is in use by a request still open.`));
      return;
    }
    const route = classifyInboundRequest({ httpMethod: "POST", body: message });
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
      const params = isJsonObject(request.params) ? request.params : {};
      try {
        // Bad params get their error, and the session (if any) stays as it was.
        validateParams("initialize", params);
      } catch (error) {
        send(broker.dispatcher.errorResponse(id, error, "legacy"));
        return;
      }
      session?.close("re-initialized");
      session = undefined;
      sessionStream = undefined;
      const ready = broker.sessions
        .createLegacySession(STDIO_PRINCIPAL, { protocolVersion: broker.dispatcher.negotiatedVersion(params), clientInfo: params.clientInfo, capabilities: params.capabilities })
        .then(
          (created) => {
            session = created;
            // Fallen behind meanwhile: the stream is attached once stdout drains.
            if (!fallenBehind) attachSession(created);
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

  /** Whether `text` is over `server.maxBodyBytes` in UTF-8 (counted only when its length leaves any doubt). */
  const overLimit = (text: string): boolean => text.length > maxLine || (text.length * 3 > maxLine && Buffer.byteLength(text, "utf8") > maxLine);

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
        if (overLimit(line)) {
          send(oversized(topLevelId(line)));
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
      if (overLimit(pending)) {
        if (!skipping) send(oversized(topLevelId(pending)));
        pending = "";
        skipping = true;
      }
    });
    let ended = false;
    const end = (why: string) => {
      if (ended) return;
      ended = true;
      stdoutClosed = true;
      for (const listenHandle of listens.values()) listenHandle.close();
      listens.clear();
      session?.close(why);
      resolve();
    };
    io.input.once("end", () => end("stdin closed"));
    io.input.once("close", () => end("stdin closed"));
    // The client closed its end of stdout (EPIPE on the next write): it is gone, as if stdin had ended.
    io.output.on("error", (error: Error) => {
      broker.logger.info({ err: error.message }, "stdio: stdout failed; the client is gone");
      end("stdout closed");
    });
  });
}

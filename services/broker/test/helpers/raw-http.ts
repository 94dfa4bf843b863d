import { request } from "node:http";

export interface RawResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/**
 * A raw HTTP exchange, so tests can send what well-behaved clients never would (Host, sizes, junk).
 * A header given as undefined is not sent.
 */
export function raw(url: string, options: { method?: string; headers?: Record<string, string | undefined>; body?: string | Buffer }): Promise<RawResponse> {
  const headers = Object.entries({ "content-type": "application/json", accept: "application/json, text/event-stream", ...options.headers }).filter(
    (entry): entry is [string, string] => entry[1] !== undefined,
  );
  return new Promise((resolve, reject) => {
    const req = request(url, { method: options.method ?? "POST", headers: Object.fromEntries(headers) }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString("utf8") }));
      if ((res.headers["content-type"] ?? "").includes("text/event-stream")) {
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: "" });
        res.destroy();
      }
    });
    req.on("error", reject);
    if (options.body !== undefined) req.write(options.body);
    req.end();
  });
}

/** A raw SSE reader: parsed events as they arrive, and when the server ends the stream. `body`: POST it (a listen) instead of a GET. */
export async function openSse(
  url: string,
  headers: Record<string, string>,
  body?: unknown,
): Promise<{ events: { id?: string; data: unknown }[]; ended: Promise<void>; close(): void; status: number; retry?: number; primedId?: string }> {
  return new Promise((resolve, reject) => {
    const events: { id?: string; data: unknown }[] = [];
    const method = body === undefined ? "GET" : "POST";
    const allHeaders = body === undefined ? headers : { "content-type": "application/json", accept: "application/json, text/event-stream", ...headers };
    const req = request(url, { method, headers: allHeaders }, (res) => {
      if (res.statusCode !== 200) reject(new Error(`${method} answered ${res.statusCode}`));
      let buffer = "";
      const ended = new Promise<void>((done) => res.on("close", () => done()));
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => {
        buffer += chunk;
        let end: number;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const fields = Object.fromEntries(block.split("\n").filter((l) => !l.startsWith(":")).map((l) => [l.slice(0, l.indexOf(":")), l.slice(l.indexOf(":") + 1).trim()]));
          if (fields.retry !== undefined) stream.retry = Number(fields.retry);
          // An event with empty data primes the client's Last-Event-ID and is not dispatched (SSE; SEP-1699).
          if (fields.data === "") stream.primedId = fields.id;
          else if (fields.data !== undefined) events.push({ ...(fields.id !== undefined && { id: fields.id }), data: JSON.parse(fields.data) });
        }
      });
      const stream: { events: typeof events; ended: Promise<void>; close(): void; status: number; retry?: number; primedId?: string } = { events, ended, close: () => req.destroy(), status: res.statusCode ?? 0 };
      resolve(stream);
    });
    req.on("error", reject);
    if (body !== undefined) req.write(JSON.stringify(body));
    req.end();
  });
}

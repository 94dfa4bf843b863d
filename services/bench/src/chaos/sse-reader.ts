/**
 * A Server-Sent Events reader for the chaos clients, which need more of a stream than the bench's
 * load generators: each event's `id` (a legacy session resumes with the last one), and the `retry`
 * field (the broker's reconnect hint when it hands sessions off), as an SDK client reads them.
 * Lines end with LF (what the broker writes); comments (keep-alives) are skipped.
 */
export interface SseHandlers {
  /** One event: its data (lines joined with LF) and its id field, if it had one. */
  event(data: string, id: string | undefined): void;
  /** A `retry:` field: reconnect after this many ms. */
  retry(ms: number): void;
}

export class SseReader {
  private pending = "";
  private data: string[] = [];
  private id: string | undefined;

  constructor(private readonly handlers: SseHandlers) {}

  push(chunk: string): void {
    const text = this.pending + chunk;
    let start = 0;
    for (let end = text.indexOf("\n", start); end >= 0; end = text.indexOf("\n", start)) {
      this.line(text.slice(start, end));
      start = end + 1;
    }
    this.pending = text.slice(start);
  }

  private line(line: string): void {
    if (line === "") {
      if (this.data.length > 0) this.handlers.event(this.data.join("\n"), this.id);
      this.data = [];
      this.id = undefined;
      return;
    }
    if (line.startsWith(":")) return;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(line.charCodeAt(colon + 1) === 32 ? colon + 2 : colon + 1);
    switch (field) {
      case "data":
        this.data.push(value);
        break;
      case "id":
        this.id = value;
        break;
      case "retry":
        if (/^\d+$/.test(value)) this.handlers.retry(Number(value));
        break;
      default:
      // event names and unknown fields change nothing here
    }
  }
}

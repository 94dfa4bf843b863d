/**
 * A minimal Server-Sent Events parser for the load generators: it hands over the `data: ` line of
 * each event (and, to `onId` when given, its `id: ` line) and ignores comments and event names. Enough for the broker's and the baseline's
 * frames (single-line JSON data, LF line ends); cheap enough for 10k streams in one process.
 */
export class SseParser {
  private pending = "";

  constructor(
    private readonly onData: (data: string) => void,
    private readonly onId?: (id: string) => void,
  ) {}

  push(chunk: string): void {
    const text = this.pending.length === 0 ? chunk : this.pending + chunk;
    let start = 0;
    for (;;) {
      const end = text.indexOf("\n\n", start);
      if (end < 0) break;
      if (this.onId !== undefined) {
        const id = text.indexOf("id: ", start);
        if (id >= 0 && id < end && (id === start || text[id - 1] === "\n")) this.onId(text.slice(id + 4, text.indexOf("\n", id)));
      }
      const data = text.indexOf("data: ", start);
      if (data >= 0 && data < end) {
        const lineEnd = text.indexOf("\n", data);
        this.onData(text.slice(data + 6, lineEnd));
      }
      start = end + 2;
    }
    this.pending = start === 0 ? text : text.slice(start);
  }
}

/** How deeply a client's message may nest objects and arrays (a hostile one would overflow the stack downstream). */
export const MAX_MESSAGE_DEPTH = 100;

export const TOO_DEEP_MESSAGE = `Invalid Request: the message nests objects or arrays deeper than ${MAX_MESSAGE_DEPTH} levels.`;

/**
 * A message as it arrived: UTF-8 bytes (HTTP) or a decoded line (stdio). Every character JSON's
 * structure is made of is ASCII, and no byte of a multi-byte UTF-8 character is, so both read alike.
 */
export type RawMessage = Buffer | string;

/** The longest id, as written, that a refusal echoes; a longer one is answered with id null. */
const MAX_ID_TEXT = 256;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COLON = 0x3a;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;

/**
 * Whether the raw message nests objects or arrays deeper than MAX_MESSAGE_DEPTH, read before it is
 * parsed: parsing deep nesting is what is slow (about half a microsecond a byte, so a body within
 * the size limit could block the event loop for seconds). One pass, no allocation; brackets inside
 * strings do not count. On valid JSON the count is the parser's nesting; on invalid JSON it is
 * exact up to where the parser would stop, so a message passed here never nests deeper in the parser.
 */
export function nestsTooDeep(message: RawMessage): boolean {
  const text = typeof message === "string" ? message : undefined;
  let depth = 0;
  let inString = false;
  for (let i = 0; i < message.length; i++) {
    const c = text !== undefined ? text.charCodeAt(i) : (message as Buffer)[i];
    if (inString) {
      if (c === BACKSLASH) i++; // the escaped character, `"` and `\` included, cannot end the string
      else if (c === QUOTE) inString = false;
    } else if (c === QUOTE) inString = true;
    else if (c === OPEN_ARRAY || c === OPEN_OBJECT) {
      if (++depth > MAX_MESSAGE_DEPTH) return true;
    } else if (c === CLOSE_ARRAY || c === CLOSE_OBJECT) depth--;
  }
  return false;
}

/**
 * The top-level `id` of a raw message that is refused unparsed (too deep), so the refusal can
 * name the request: the string or number of the last top-level `"id"` member (what a parser
 * would keep), or null when there is none, it is something else, or longer than MAX_ID_TEXT.
 * One pass like `nestsTooDeep`; only the id itself is decoded.
 */
export function topLevelId(message: RawMessage): string | number | null {
  let i = skipWhitespace(message, 0);
  if (codeAt(message, i) !== OPEN_OBJECT) return null;
  let id: string | number | null = null;
  let depth = 0;
  for (; i < message.length; i++) {
    const c = codeAt(message, i);
    if (c === QUOTE) {
      const end = stringEnd(message, i);
      if (end < 0) break;
      // A string at depth 1 followed by `:` is a member name (a value is followed by `,` or `}`).
      if (depth === 1 && end === i + 3 && codeAt(message, i + 1) === 0x69 /* i */ && codeAt(message, i + 2) === 0x64 /* d */) {
        const colon = skipWhitespace(message, end + 1);
        if (codeAt(message, colon) === COLON) id = scalarId(message, skipWhitespace(message, colon + 1));
      }
      i = end;
    } else if (c === OPEN_ARRAY || c === OPEN_OBJECT) depth++;
    else if (c === CLOSE_ARRAY || c === CLOSE_OBJECT) depth--;
  }
  return id;
}

/** The id value starting at `start`: a string or a number, else null. */
function scalarId(message: RawMessage, start: number): string | number | null {
  let end = start;
  const first = codeAt(message, start);
  if (first === QUOTE) end = stringEnd(message, start) + 1;
  else if (first === 0x2d || (first >= 0x30 && first <= 0x39)) {
    while (end < message.length && end - start <= MAX_ID_TEXT && isNumberChar(codeAt(message, end))) end++;
  }
  if (end <= start || end - start > MAX_ID_TEXT) return null;
  try {
    const value: unknown = JSON.parse(typeof message === "string" ? message.slice(start, end) : message.toString("utf8", start, end));
    return typeof value === "string" || (typeof value === "number" && Number.isFinite(value)) ? value : null;
  } catch {
    return null;
  }
}

/** The index of the quote that ends the string opening at `open`, or -1 when it never ends. */
function stringEnd(message: RawMessage, open: number): number {
  for (let i = open + 1; i < message.length; i++) {
    const c = codeAt(message, i);
    if (c === BACKSLASH) i++;
    else if (c === QUOTE) return i;
  }
  return -1;
}

function skipWhitespace(message: RawMessage, from: number): number {
  let i = from;
  for (let c = codeAt(message, i); c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d; c = codeAt(message, ++i));
  return i;
}

function isNumberChar(c: number): boolean {
  return (c >= 0x30 && c <= 0x39) || c === 0x2d || c === 0x2b || c === 0x2e || c === 0x65 || c === 0x45;
}

/** The character code at `i`, or -1 past the end. */
function codeAt(message: RawMessage, i: number): number {
  if (i >= message.length) return -1;
  return typeof message === "string" ? message.charCodeAt(i) : (message[i] ?? -1);
}

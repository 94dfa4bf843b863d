/** How deeply a client's message may nest objects and arrays (a hostile one would overflow the stack downstream). */
export const MAX_MESSAGE_DEPTH = 100;

export const TOO_DEEP_MESSAGE = `Invalid Request: the message nests objects or arrays deeper than ${MAX_MESSAGE_DEPTH} levels.`;

/** Whether `value` nests deeper than MAX_MESSAGE_DEPTH; iterative, so the check cannot overflow itself. */
export function nestsTooDeep(value: unknown): boolean {
  const pending: { value: unknown; depth: number }[] = [{ value, depth: 0 }];
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    if (typeof next.value !== "object" || next.value === null) continue;
    if (next.depth >= MAX_MESSAGE_DEPTH) return true;
    const children = Array.isArray(next.value) ? next.value : Object.values(next.value);
    for (const child of children) if (typeof child === "object" && child !== null) pending.push({ value: child, depth: next.depth + 1 });
  }
  return false;
}

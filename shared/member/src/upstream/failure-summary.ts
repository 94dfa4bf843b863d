/** Longest backend failure reason shown in `/readyz` and in errors about the backend. */
export const MAX_FAILURE_LENGTH = 300;

/**
 * A backend failure reason as `/readyz` and errors show it: one line of at most
 * `MAX_FAILURE_LENGTH` characters. The SDK's validation errors carry zod's issue list as
 * pretty-printed JSON, kilobytes of it for an answer that is not MCP at all (a union schema reports
 * every branch it tried); each such list becomes its first issue, which says what is wrong.
 */
export function summarizeFailure(reason: string): string {
  const line = withIssueListsSummarized(reason)
    .split("\n")
    .map((part) => part.trim())
    .find((part) => part !== "");
  if (line === undefined) return "unknown failure";
  return line.length <= MAX_FAILURE_LENGTH ? line : `${line.slice(0, MAX_FAILURE_LENGTH - 1)}…`;
}

interface Issue {
  readonly message: string;
  readonly path?: unknown;
  readonly code?: unknown;
  readonly errors?: unknown;
}

/** Replaces every JSON issue list in `text` (`[ { "code": ..., "message": ... }, ... ]`) by its first issue. */
function withIssueListsSummarized(text: string): string {
  let out = "";
  let from = 0;
  for (let start = text.indexOf("[", from); start >= 0; start = text.indexOf("[", from)) {
    const end = /^\[\s*\{/.test(text.slice(start, start + 64)) ? jsonEnd(text, start) : undefined;
    const issues = end === undefined ? undefined : parseIssues(text.slice(start, end));
    if (end === undefined || issues === undefined) {
      out += text.slice(from, start + 1);
      from = start + 1;
      continue;
    }
    const more = issues.length > 1 ? ` (and ${issues.length - 1} more)` : "";
    out += `${text.slice(from, start)}${describeIssue(issues[0] as Issue, [])}${more}`;
    from = end;
  }
  return out + text.slice(from);
}

/** Where the JSON array or object opening at `start` ends (exclusive), or undefined if it does not. */
function jsonEnd(text: string, start: number): number | undefined {
  let depth = 0;
  let inString = false;
  for (let i = start; i < text.length; i++) {
    const char = text[i];
    if (inString) {
      if (char === "\\") i++;
      else if (char === '"') inString = false;
    } else if (char === '"') inString = true;
    else if (char === "[" || char === "{") depth++;
    else if ((char === "]" || char === "}") && --depth === 0) return i + 1;
  }
  return undefined;
}

function parseIssues(json: string): Issue[] | undefined {
  let value: unknown;
  try {
    value = JSON.parse(json);
  } catch {
    return undefined;
  }
  return Array.isArray(value) && value.length > 0 && value.every(isIssue) ? value : undefined;
}

function isIssue(value: unknown): value is Issue {
  return typeof value === "object" && value !== null && typeof (value as { message?: unknown }).message === "string";
}

/** `path: message`; for a union that matched no branch, the first branch's first issue (for a JSON-RPC message: its `jsonrpc`). */
function describeIssue(issue: Issue, parentPath: readonly unknown[]): string {
  const path = [...parentPath, ...(Array.isArray(issue.path) ? (issue.path as unknown[]) : [])];
  if (issue.code === "invalid_union" && Array.isArray(issue.errors)) {
    const [firstBranch] = issue.errors as unknown[];
    const first: unknown = Array.isArray(firstBranch) ? firstBranch[0] : undefined;
    if (isIssue(first)) return describeIssue(first, path);
  }
  return path.length > 0 ? `${path.map(String).join(".")}: ${issue.message}` : issue.message;
}

/** `child` lies below `parent` in a path sense: `file:///a` → `file:///a/b`. */
export function isSubResource(child: string, parent: string): boolean {
  if (!child.startsWith(parent) || child.length === parent.length) return false;
  return parent.endsWith("/") || child[parent.length] === "/";
}

/**
 * Every `parent` with `isSubResource(uri, parent)`, nearest first: the URI cut before and after
 * each `/`. Lets a lookup walk a URI's few ancestors instead of scanning every known URI.
 * `lengthWanted` skips, without cutting them, the ancestors of lengths a lookup would not find.
 */
export function ancestorsOf(uri: string, lengthWanted: (length: number) => boolean = () => true): string[] {
  const out: string[] = [];
  for (let i = uri.lastIndexOf("/"); i >= 0; i = i === 0 ? -1 : uri.lastIndexOf("/", i - 1)) {
    if (i + 1 < uri.length && lengthWanted(i + 1)) out.push(uri.slice(0, i + 1));
    if (i > 0 && uri[i - 1] !== "/" && lengthWanted(i)) out.push(uri.slice(0, i));
  }
  return out;
}

const DOT_SEGMENT = /(?:^|\/)(?:\.|%2e){1,2}(?:[/?#]|$)/i;

/**
 * Whether `uri`'s path has a `.` or `..` segment (or one percent-encoded): resolved, such a URI
 * climbs out of where its prefix says it is (RFC 3986, 5.2.4), so `x://a/../b` is not below `x://a`.
 */
export function hasDotSegment(uri: string): boolean {
  const colon = uri.indexOf(":");
  return DOT_SEGMENT.test(colon < 0 ? uri : uri.slice(colon + 1));
}

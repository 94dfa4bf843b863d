/**
 * RFC 6570 URI Templates, levels 1–4: parsing, expansion, and the reverse — matching a concrete
 * URI against a template to route it and to recover the variable values.
 *
 * Parsing is strict about expressions (a malformed one throws `UriTemplateError`) and lenient
 * about literals: a literal character that may not appear in a URI is percent-encoded on
 * expansion, as RFC 6570 §3.1 says, instead of being rejected.
 *
 * Expansion follows RFC 6570 exactly (Appendix A), including its encoding rules: only unreserved
 * characters pass unencoded, except for `{+…}` and `{#…}`, which also pass reserved characters and
 * keep existing pct-encoded triplets.
 *
 * Matching rules. A template compiles to one anchored regular expression in which literals match
 * themselves exactly (no case folding, no normalisation; a literal with characters that need
 * encoding matches either form) and each expression matches what its expansion can produce:
 *
 * - `{x}`: one or more characters other than `/ ? # &`. Commas separate the values of `{x,y}`
 *   and the items of a list, so a raw `,` makes a value a list (RFC expansion would have encoded
 *   a comma inside a string as `%2C`).
 * - `{+x}`: one or more characters of any kind, as few as the rest of the template allows.
 *   `{#x}`: `#` then any characters, or nothing. Both split on `,` only when the expression has
 *   several variables or an exploded one; a single plain variable is one string, commas included.
 * - `{.x}`, `{/x}`: one unit per variable (`.value`, `/value`), each free of `/ ? # &` and of its
 *   own separator; an exploded variable takes every unit left over. Absent units are undefined.
 *   Label expansion never encodes `.`, so without an exploded variable the last variable also takes
 *   surplus units, as few as the rest of the template allows (`X{.x}` binds `a.b` from `X.a.b`).
 * - `{;x}`: `;name` or `;name=value` per variable, in any order.
 * - `{?x}` and the `{&y}` expressions that directly follow it form one query: `name=value` pairs
 *   in any order, each optional. A parameter named by no variable fails the match unless the run
 *   has an exploded variable, which then collects it.
 * - Bare expressions (`{x}`, `{+x}`) require at least one character, so `users://{id}/profile`
 *   does not match `users:///profile`. One followed by a literal ends before that literal's first
 *   occurrence (`{a}-{b}` reads `x-y-z` as `x`, `y-z`; `{+p}/here` never binds a `p` containing
 *   `/here`), which keeps `{a}.{b}.{c}` linear. Expressions with a leading character (`{/x}`,
 *   `{?x}`, …) match nothing when every variable is undefined.
 * - `{x:3}` matches at most three characters of the decoded value. A variable used more than once
 *   must agree; a prefix occurrence only has to be a prefix of the full value.
 * - Values come back percent-decoded (malformed percent-encoding stays as is). Exploded
 *   variables always come back as lists. An exploded associative array — recognised by names other
 *   than the variable's own in `;`/`?`/`&`, or by a first item `key=value` in `{x*}`, `{.x*}` and
 *   `{/x*}` (a later item without `=` continues the previous value) — comes back flattened as
 *   `[key1, value1, key2, value2, …]`, the list form RFC 6570 uses for non-exploded associative
 *   arrays.
 * - Where several readings exist, earlier variables take values first and earlier expressions take
 *   as much as they can (e.g. `?{undef,y}` → `?768` binds `undef`).
 *
 * Matching is a regular expression plus linear decoding. Templates with expressions that no literal
 * separates (`{a}{b}{c}`) backtrack polynomially in the URI's length, so `match` refuses URIs longer
 * than `MAX_MATCH_LENGTH`.
 */

/** A variable's value: a string, a list, or an associative array (record or ordered pairs). */
export type UriTemplateValue =
  | string
  | number
  | boolean
  | readonly string[]
  | Readonly<Record<string, string>>
  | readonly (readonly [string, string])[]
  | null
  | undefined;

export type UriTemplateVariables = Readonly<Record<string, UriTemplateValue>>;

/** Variable values recovered by `match`; undefined variables are absent. */
export type UriTemplateMatch = Record<string, string | string[]>;

/** The URI length above which `match` returns null without trying (bounds regex backtracking). */
export const MAX_MATCH_LENGTH = 16_384;

/** A malformed template, or a value the template cannot expand (a prefix of a list). */
export class UriTemplateError extends Error {
  override readonly name = "UriTemplateError";
  constructor(
    readonly template: string,
    reason: string,
    /** Where in the template the problem is, when it is a syntax error. */
    readonly offset?: number,
  ) {
    super(`Invalid URI template "${template}": ${reason}${offset === undefined ? "" : ` (at offset ${offset})`}`);
  }
}

type Operator = "" | "+" | "#" | "." | "/" | ";" | "?" | "&";

interface OperatorSpec {
  readonly first: string;
  readonly sep: string;
  readonly named: boolean;
  readonly ifEmpty: string;
  readonly allowReserved: boolean;
}

// RFC 6570 Appendix A.
const OPERATORS: Readonly<Record<Operator, OperatorSpec>> = {
  "": { first: "", sep: ",", named: false, ifEmpty: "", allowReserved: false },
  "+": { first: "", sep: ",", named: false, ifEmpty: "", allowReserved: true },
  "#": { first: "#", sep: ",", named: false, ifEmpty: "", allowReserved: true },
  ".": { first: ".", sep: ".", named: false, ifEmpty: "", allowReserved: false },
  "/": { first: "/", sep: "/", named: false, ifEmpty: "", allowReserved: false },
  ";": { first: ";", sep: ";", named: true, ifEmpty: "", allowReserved: false },
  "?": { first: "?", sep: "&", named: true, ifEmpty: "=", allowReserved: false },
  "&": { first: "&", sep: "&", named: true, ifEmpty: "=", allowReserved: false },
};

const RESERVED_OPERATORS = "=,!@|";

interface VarSpec {
  readonly name: string;
  readonly explode: boolean;
  readonly maxLength: number | undefined;
}

type Part =
  | { readonly kind: "literal"; readonly text: string; readonly encoded: string }
  | { readonly kind: "expression"; readonly operator: Operator; readonly vars: readonly VarSpec[] };

/** One capturing group of the compiled matcher: an expression, or a run of query expressions. */
interface MatchGroup {
  readonly operator: Operator;
  readonly vars: readonly VarSpec[];
}

interface Matcher {
  readonly regex: RegExp;
  readonly groups: readonly MatchGroup[];
}

export class UriTemplate {
  /** Every variable name, once, in order of first appearance. */
  readonly variableNames: string[];
  private readonly parts: readonly Part[];
  private compiled: Matcher | undefined;

  /** @throws UriTemplateError when the template is malformed. */
  constructor(private readonly template: string) {
    this.parts = parse(template);
    const names = new Set<string>();
    for (const part of this.parts) {
      if (part.kind === "expression") for (const spec of part.vars) names.add(spec.name);
    }
    this.variableNames = [...names];
  }

  /**
   * RFC 6570 expansion. Null, undefined, empty lists and empty associative arrays are undefined.
   * @throws UriTemplateError when a prefix modifier meets a list or associative array.
   */
  expand(variables: UriTemplateVariables): string {
    let out = "";
    for (const part of this.parts) {
      out += part.kind === "literal" ? part.encoded : this.expandExpression(part.operator, part.vars, variables);
    }
    return out;
  }

  /** The variable values with which this template expands to `uri`, or null (see the header). */
  match(uri: string): UriTemplateMatch | null {
    if (uri.length > MAX_MATCH_LENGTH) return null;
    this.compiled ??= compileMatcher(this.parts);
    const found = this.compiled.regex.exec(uri);
    if (found === null) return null;
    const bindings = new Bindings();
    for (const [index, group] of this.compiled.groups.entries()) {
      const text = found[index + 1] ?? "";
      const ok = OPERATORS[group.operator].named ? matchNamed(group, text, bindings) : matchPositional(group, text, bindings);
      if (!ok) return null;
    }
    return bindings.toRecord();
  }

  toString(): string {
    return this.template;
  }

  private expandExpression(operator: Operator, vars: readonly VarSpec[], variables: UriTemplateVariables): string {
    const op = OPERATORS[operator];
    let out = "";
    let first = true;
    for (const spec of vars) {
      const value = normalize(Object.hasOwn(variables, spec.name) ? variables[spec.name] : undefined);
      if (value === undefined) continue;
      out += first ? op.first : op.sep;
      first = false;
      out += this.expandValue(op, spec, value);
    }
    return out;
  }

  private expandValue(op: OperatorSpec, spec: VarSpec, value: NormalizedValue): string {
    const enc = (text: string): string => (op.allowReserved ? encodeReserved(text) : encodeUnreserved(text));
    const named = (name: string, encoded: string): string => name + (encoded === "" ? op.ifEmpty : `=${encoded}`);
    if (value.kind === "string") {
      const encoded = enc(spec.maxLength === undefined ? value.value : truncate(value.value, spec.maxLength));
      return op.named ? named(spec.name, encoded) : encoded;
    }
    if (spec.maxLength !== undefined) {
      throw new UriTemplateError(this.template, `the prefix modifier of "${spec.name}" cannot apply to a list or associative array`);
    }
    if (!spec.explode) {
      const items = value.kind === "list" ? value.items : value.pairs.flat();
      const joined = items.map(enc).join(",");
      return op.named ? named(spec.name, joined) : joined;
    }
    if (value.kind === "list") {
      return value.items.map((item) => (op.named ? named(spec.name, enc(item)) : enc(item))).join(op.sep);
    }
    return value.pairs.map(([key, item]) => (op.named ? named(enc(key), enc(item)) : `${enc(key)}=${enc(item)}`)).join(op.sep);
  }
}

// ---------------------------------------------------------------------------------------------
// Parsing

const VARSPEC = /^((?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2})(?:\.?(?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2}))*)(?::([1-9][0-9]{0,3})|(\*))?$/;

function parse(template: string): Part[] {
  const parts: Part[] = [];
  let literalStart = 0;
  const pushLiteral = (end: number): void => {
    if (end > literalStart) {
      const text = template.slice(literalStart, end);
      parts.push({ kind: "literal", text, encoded: encodeReserved(text) });
    }
  };
  for (let i = 0; i < template.length; i++) {
    const char = template[i];
    if (char === "}") throw new UriTemplateError(template, `"}" without a matching "{"`, i);
    if (char !== "{") continue;
    const close = template.indexOf("}", i + 1);
    if (close < 0) throw new UriTemplateError(template, "unclosed expression", i);
    pushLiteral(i);
    parts.push(parseExpression(template, i + 1, close));
    i = close;
    literalStart = close + 1;
  }
  pushLiteral(template.length);
  return parts;
}

function parseExpression(template: string, start: number, end: number): Part {
  let body = template.slice(start, end);
  if (body === "") throw new UriTemplateError(template, "empty expression", start - 1);
  const leading = body[0] ?? "";
  if (RESERVED_OPERATORS.includes(leading)) {
    throw new UriTemplateError(template, `operator "${leading}" is reserved for future extensions`, start);
  }
  let operator: Operator = "";
  if (isOperator(leading)) {
    operator = leading;
    body = body.slice(1);
  }
  let offset = start + operator.length;
  const vars: VarSpec[] = [];
  for (const varspec of body.split(",")) {
    const parsed = VARSPEC.exec(varspec);
    if (parsed === null) throw new UriTemplateError(template, `invalid variable specification "${varspec}"`, offset);
    const [, name = "", maxLength, explode] = parsed;
    vars.push({ name, explode: explode !== undefined, maxLength: maxLength === undefined ? undefined : Number(maxLength) });
    offset += varspec.length + 1;
  }
  return { kind: "expression", operator, vars };
}

function isOperator(char: string): char is Exclude<Operator, ""> {
  return char !== "" && "+#./;?&".includes(char);
}

// ---------------------------------------------------------------------------------------------
// Values and encoding

type NormalizedValue =
  | { readonly kind: "string"; readonly value: string }
  | { readonly kind: "list"; readonly items: readonly string[] }
  | { readonly kind: "assoc"; readonly pairs: readonly (readonly [string, string])[] };

/** Undefined for RFC 6570's "undefined": null, undefined, and empty lists or associative arrays. */
function normalize(value: UriTemplateValue): NormalizedValue | undefined {
  if (value === null || value === undefined) return undefined;
  if (typeof value === "string") return { kind: "string", value };
  if (typeof value === "number" || typeof value === "boolean") return { kind: "string", value: String(value) };
  if (isPairList(value)) return value.length === 0 ? undefined : { kind: "assoc", pairs: value };
  if (isStringList(value)) return value.length === 0 ? undefined : { kind: "list", items: value };
  const pairs = Object.entries(value);
  return pairs.length === 0 ? undefined : { kind: "assoc", pairs };
}

function isPairList(value: object): value is readonly (readonly [string, string])[] {
  return Array.isArray(value) && value.length > 0 && value.every((item) => Array.isArray(item));
}

function isStringList(value: object): value is readonly string[] {
  return Array.isArray(value);
}

const NOT_UNRESERVED = /[^A-Za-z0-9\-._~]+/gu;
// A pct-encoded triplet (kept), a run of characters outside unreserved ∪ reserved, or a stray `%`.
const NOT_RESERVED_OR_TRIPLET = /(%[0-9A-Fa-f]{2})|[^A-Za-z0-9\-._~:/?#[\]@!$&'()*+,;=%]+|%/gu;
const utf8 = new TextEncoder();

function pctEncode(text: string): string {
  let out = "";
  for (const byte of utf8.encode(text)) out += `%${byte.toString(16).toUpperCase().padStart(2, "0")}`;
  return out;
}

function encodeUnreserved(text: string): string {
  return text.replace(NOT_UNRESERVED, pctEncode);
}

function encodeReserved(text: string): string {
  return text.replace(NOT_RESERVED_OR_TRIPLET, (run: string, triplet: string | undefined) => triplet ?? pctEncode(run));
}

const PCT_RUN = /(?:%[0-9A-Fa-f]{2})+/g;

/** Percent-decodes; a run of triplets that is not valid UTF-8 stays encoded. */
function decode(text: string): string {
  if (!text.includes("%")) return text;
  return text.replace(PCT_RUN, (run) => {
    try {
      return decodeURIComponent(run);
    } catch {
      return run;
    }
  });
}

/** The first `max` code points of `text`. */
function truncate(text: string, max: number): string {
  let count = 0;
  for (let i = 0; i < text.length; count++) {
    if (count === max) return text.slice(0, i);
    i += (text.codePointAt(i) ?? 0) > 0xffff ? 2 : 1;
  }
  return text;
}

// ---------------------------------------------------------------------------------------------
// Matching

function compileMatcher(parts: readonly Part[]): Matcher {
  let source = "^";
  const groups: MatchGroup[] = [];
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i];
    if (part === undefined) continue;
    if (part.kind === "literal") {
      source += literalPattern(part);
      continue;
    }
    let vars = part.vars;
    if (part.operator === "?" || part.operator === "&") {
      // `{?a}{&b}` is one query: its parameters may come in any order.
      let next = parts[i + 1];
      while (next?.kind === "expression" && next.operator === "&") {
        vars = [...vars, ...next.vars];
        i++;
        next = parts[i + 1];
      }
    }
    groups.push({ operator: part.operator, vars });
    const following = parts[i + 1];
    source += `(${groupPattern(part.operator, vars, following?.kind === "literal" ? literalPattern(following) : undefined)})`;
  }
  return { regex: new RegExp(`${source}$`), groups };
}

/** A literal matches itself, or its encoded form when that differs. */
function literalPattern(literal: { readonly text: string; readonly encoded: string }): string {
  const raw = escapeRegex(literal.text);
  const encoded = escapeRegex(literal.encoded);
  return raw === encoded ? raw : `(?:${encoded}|${raw})`;
}

/**
 * The text one expression (or query run) can match. `until` is the literal that follows: bare
 * expressions end at its first occurrence, which makes splits unambiguous and keeps backtracking
 * linear for templates like `{a}.{b}.{c}`.
 */
function groupPattern(operator: Operator, vars: readonly VarSpec[], until: string | undefined): string {
  const tempered = (char: string): string => (until === undefined ? char : `(?:(?!${until})${char})`);
  const exploded = vars.some((spec) => spec.explode);
  // Without an exploded variable each variable yields at most one unit.
  const units = (unit: string): string => `(?:${unit})${exploded ? "*" : `{0,${vars.length}}`}`;
  const names = (any: string): string => (exploded ? any : `(?:${vars.map((spec) => escapeRegex(spec.name)).join("|")})`);
  switch (operator) {
    case "":
      return `${tempered("[^/?#&]")}+`;
    case "+":
      return `${tempered("[\\s\\S]")}+?`;
    case "#":
      return "(?:#[\\s\\S]*)?";
    case ".": {
      const label = "\\.[^/?#&.]*";
      // `.` is unreserved, so label expansion never encodes it: units beyond one per variable are
      // dots inside the last value, taken only as far as the rest of the template needs them.
      return exploded ? units(label) : `${units(label)}(?:${label})*?`;
    }
    case "/":
      return units("/[^/?#&]*");
    case ";":
      return units(`;${names("[^/?#&;=]+")}(?:=[^/?#&;]*)?`);
    case "?":
    case "&": {
      const param = `${names("[^#&=]+")}(?:=[^#&]*)?`;
      return operator === "?" ? `(?:\\?(?:${param}(?:&${param})*)?)?` : `(?:&${param})*`;
    }
  }
}

function escapeRegex(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
}

type MatchValue = string | string[];

/** Variable values found so far; a variable seen twice must agree (see `bind`). */
class Bindings {
  private readonly values = new Map<string, { value: MatchValue; maxLength: number | undefined }>();

  bind(spec: VarSpec, value: MatchValue): boolean {
    const { maxLength } = spec;
    if (maxLength !== undefined && (typeof value !== "string" || truncate(value, maxLength) !== value)) return false;
    const previous = this.values.get(spec.name);
    if (previous === undefined) {
      this.values.set(spec.name, { value, maxLength });
      return true;
    }
    // A prefix occurrence agrees with any value it is the prefix of; keep the fuller one.
    if (previous.maxLength !== undefined && typeof value === "string" && truncate(value, previous.maxLength) === previous.value) {
      this.values.set(spec.name, { value, maxLength });
      return true;
    }
    if (maxLength !== undefined && typeof previous.value === "string") return truncate(previous.value, maxLength) === value;
    return sameValue(previous.value, value);
  }

  toRecord(): UriTemplateMatch {
    // fromEntries defines own properties, so a variable named `__proto__` stays data.
    return Object.fromEntries([...this.values].map(([name, { value }]) => [name, value]));
  }
}

function sameValue(a: MatchValue, b: MatchValue): boolean {
  if (typeof a === "string" || typeof b === "string") return a === b;
  return a.length === b.length && a.every((item, i) => item === b[i]);
}

/** `{x}`, `{+x}`, `{#x}`, `{.x}`, `{/x}`: units in order, one per variable, surplus to the exploded (else last) one. */
function matchPositional(group: MatchGroup, text: string, bindings: Bindings): boolean {
  const { operator, vars } = group;
  const op = OPERATORS[operator];
  const units = op.first === "" ? text.split(",") : text === "" ? [] : text.slice(1).split(op.sep);
  const surplus = units.length - vars.length;
  const explodedIndex = vars.findIndex((spec) => spec.explode);
  const absorber = explodedIndex >= 0 ? explodedIndex : vars.length - 1;
  let next = 0;
  for (const [index, spec] of vars.entries()) {
    if (next >= units.length) break;
    const take = surplus > 0 && index === absorber ? surplus + 1 : 1;
    const own = units.slice(next, next + take);
    next += take;
    if (!bindings.bind(spec, positionalValue(op, spec, own))) return false;
  }
  return true;
}

function positionalValue(op: OperatorSpec, spec: VarSpec, units: readonly string[]): MatchValue {
  // Reserved expansion leaves `,` and `=` unencoded inside values, so they prove nothing there.
  if (spec.explode) return op.allowReserved ? units.map(decode) : explodedValue(units, op.sep);
  if (op.allowReserved) return decode(units.join(","));
  const items = units.join(op.sep).split(",");
  return items.length === 1 ? decode(items[0] ?? "") : items.map(decode);
}

/** An associative array (flattened) when the first unit is `key=value`, else a list. */
function explodedValue(units: readonly string[], sep: string): string[] {
  if (!units[0]?.includes("=")) return units.map(decode);
  // `=` is encoded in keys and values, so a unit without one is the rest of the previous value,
  // cut at a separator that was inside it (label expansion never encodes `.`).
  const pairs: string[] = [];
  for (const unit of units) pairs.push(unit.includes("=") ? unit : `${pairs.pop() ?? ""}${sep}${unit}`);
  return pairs.flatMap((unit) => {
    const eq = unit.indexOf("=");
    return [decode(unit.slice(0, eq)), decode(unit.slice(eq + 1))];
  });
}

/** `{;x}`, `{?x}`, `{&x}`: `name[=value]` parameters in any order. */
function matchNamed(group: MatchGroup, text: string, bindings: Bindings): boolean {
  if (text.length <= 1) return true; // nothing, or a bare `?`
  const sep = OPERATORS[group.operator].sep;
  const collector = group.vars.find((spec) => spec.explode);
  const exploded = new Map<VarSpec, [name: string, value: string][]>();
  for (const param of text.slice(1).split(sep)) {
    const eq = param.indexOf("=");
    const name = eq < 0 ? param : param.slice(0, eq);
    const raw = eq < 0 ? "" : param.slice(eq + 1);
    const spec = group.vars.find((candidate) => candidate.name === name) ?? collector;
    if (spec === undefined) return false;
    if (spec.explode) {
      const entries = exploded.get(spec) ?? [];
      entries.push([name, raw]);
      exploded.set(spec, entries);
      continue;
    }
    const items = raw.split(",");
    if (!bindings.bind(spec, items.length === 1 ? decode(raw) : items.map(decode))) return false;
  }
  for (const [spec, entries] of exploded) {
    const value = entries.every(([name]) => name === spec.name)
      ? entries.map(([, raw]) => decode(raw))
      : entries.flatMap(([name, raw]) => [decode(name), decode(raw)]);
    if (!bindings.bind(spec, value)) return false;
  }
  return true;
}

import { describe, expect, it } from "vitest";
import {
  MAX_MATCH_LENGTH,
  traceMatch,
  UriTemplate,
  UriTemplateError,
  type UriTemplateMatch,
  type UriTemplateVariables,
} from "../../src/naming/uri-template.js";

/** RFC 6570 §3.2: the variables of every example in the RFC. */
const RFC_VARIABLES: UriTemplateVariables = {
  count: ["one", "two", "three"],
  dom: ["example", "com"],
  dub: "me/too",
  hello: "Hello World!",
  half: "50%",
  var: "value",
  who: "fred",
  base: "http://example.com/home/",
  path: "/foo/bar",
  list: ["red", "green", "blue"],
  keys: { semi: ";", dot: ".", comma: "," },
  v: "6",
  x: "1024",
  y: "768",
  empty: "",
  empty_keys: {},
  undef: null,
};

/**
 * The same variables as `match` gives them back: lists as arrays, associative arrays flattened to
 * `[key, value, …]`, undefined ones (`undef`, `empty_keys`) absent.
 */
const MATCHED: UriTemplateMatch = {
  count: ["one", "two", "three"],
  dom: ["example", "com"],
  dub: "me/too",
  hello: "Hello World!",
  half: "50%",
  var: "value",
  who: "fred",
  base: "http://example.com/home/",
  path: "/foo/bar",
  list: ["red", "green", "blue"],
  keys: ["semi", ";", "dot", ".", "comma", ","],
  v: "6",
  x: "1024",
  y: "768",
  empty: "",
};

/** `match` gives back exactly these RFC variables. */
function back(...names: string[]): UriTemplateMatch {
  return Object.fromEntries(names.map((name) => [name, MATCHED[name]!]));
}

/**
 * [template, the RFC's expansion, what `match` gives back for that expansion]. Where the expansion
 * has a single reading the third column is `back(...)`, the variables themselves; anything else is
 * commented with why the URI is ambiguous and which reading `match` documents.
 */
type Example = readonly [template: string, expansion: string, matched: UriTemplateMatch | null];

/** RFC 6570 §1.2, the examples of each level. */
const LEVELS: Readonly<Record<string, readonly Example[]>> = {
  "§1.2 level 1": [
    ["{var}", "value", back("var")],
    ["{hello}", "Hello%20World%21", back("hello")],
  ],
  "§1.2 level 2": [
    ["{+var}", "value", back("var")],
    ["{+hello}", "Hello%20World!", back("hello")],
    ["{+path}/here", "/foo/bar/here", back("path")],
    ["here?ref={+path}", "here?ref=/foo/bar", back("path")],
    ["X{#var}", "X#value", back("var")],
    ["X{#hello}", "X#Hello%20World!", back("hello")],
  ],
  "§1.2 level 3": [
    ["map?{x,y}", "map?1024,768", back("x", "y")],
    ["{x,hello,y}", "1024,Hello%20World%21,768", back("x", "hello", "y")],
    ["{+x,hello,y}", "1024,Hello%20World!,768", back("x", "hello", "y")],
    ["{+path,x}/here", "/foo/bar,1024/here", back("path", "x")],
    ["{#x,hello,y}", "#1024,Hello%20World!,768", back("x", "hello", "y")],
    ["{#path,x}/here", "#/foo/bar,1024/here", back("path", "x")],
    ["X{.var}", "X.value", back("var")],
    ["X{.x,y}", "X.1024.768", back("x", "y")],
    ["{/var}", "/value", back("var")],
    ["{/var,x}/here", "/value/1024/here", back("var", "x")],
    ["{;x,y}", ";x=1024;y=768", back("x", "y")],
    ["{;x,y,empty}", ";x=1024;y=768;empty", back("x", "y", "empty")],
    ["{?x,y}", "?x=1024&y=768", back("x", "y")],
    ["{?x,y,empty}", "?x=1024&y=768&empty=", back("x", "y", "empty")],
    ["?fixed=yes{&x}", "?fixed=yes&x=1024", back("x")],
    ["{&x,y,empty}", "&x=1024&y=768&empty=", back("x", "y", "empty")],
  ],
  "§1.2 level 4": [
    // A prefix shows only the first characters of the value: that prefix is what comes back.
    ["{var:3}", "val", { var: "val" }],
    ["{var:30}", "value", back("var")],
    ["{list}", "red,green,blue", back("list")],
    ["{list*}", "red,green,blue", back("list")],
    ["{keys}", "semi,%3B,dot,.,comma,%2C", back("keys")],
    ["{keys*}", "semi=%3B,dot=.,comma=%2C", back("keys")],
    ["{+path:6}/here", "/foo/b/here", { path: "/foo/b" }],
    // Reserved expansion leaves `,` raw, so one plain variable reads as one string, commas included
    // (the string "red,green,blue" expands to the same URI).
    ["{+list}", "red,green,blue", { list: "red,green,blue" }],
    ["{+list*}", "red,green,blue", back("list")],
    ["{+keys}", "semi,;,dot,.,comma,,", { keys: "semi,;,dot,.,comma,," }],
    // The value "," is raw too, so the items cannot be cut apart from the separators: `match`
    // reads a list of raw items, which expands to the same URI.
    ["{+keys*}", "semi=;,dot=.,comma=,", { keys: ["semi=;", "dot=.", "comma=", ""] }],
    ["{#path:6}/here", "#/foo/b/here", { path: "/foo/b" }],
    ["{#list}", "#red,green,blue", { list: "red,green,blue" }],
    ["{#list*}", "#red,green,blue", back("list")],
    ["{#keys}", "#semi,;,dot,.,comma,,", { keys: "semi,;,dot,.,comma,," }],
    ["{#keys*}", "#semi=;,dot=.,comma=,", { keys: ["semi=;", "dot=.", "comma=", ""] }],
    ["X{.var:3}", "X.val", { var: "val" }],
    ["X{.list}", "X.red,green,blue", back("list")],
    ["X{.list*}", "X.red.green.blue", back("list")],
    ["X{.keys}", "X.semi,%3B,dot,.,comma,%2C", back("keys")],
    ["X{.keys*}", "X.semi=%3B.dot=..comma=%2C", back("keys")],
    ["{/var:1,var}", "/v/value", back("var")],
    ["{/list}", "/red,green,blue", back("list")],
    ["{/list*}", "/red/green/blue", back("list")],
    ["{/list*,path:4}", "/red/green/blue/%2Ffoo", { list: MATCHED.list!, path: "/foo" }],
    ["{/keys}", "/semi,%3B,dot,.,comma,%2C", back("keys")],
    ["{/keys*}", "/semi=%3B/dot=./comma=%2C", back("keys")],
    ["{;hello:5}", ";hello=Hello", { hello: "Hello" }],
    ["{;list}", ";list=red,green,blue", back("list")],
    ["{;list*}", ";list=red;list=green;list=blue", back("list")],
    ["{;keys}", ";keys=semi,%3B,dot,.,comma,%2C", back("keys")],
    ["{;keys*}", ";semi=%3B;dot=.;comma=%2C", back("keys")],
    ["{?var:3}", "?var=val", { var: "val" }],
    ["{?list}", "?list=red,green,blue", back("list")],
    ["{?list*}", "?list=red&list=green&list=blue", back("list")],
    ["{?keys}", "?keys=semi,%3B,dot,.,comma,%2C", back("keys")],
    ["{?keys*}", "?semi=%3B&dot=.&comma=%2C", back("keys")],
    ["{&var:3}", "&var=val", { var: "val" }],
    ["{&list}", "&list=red,green,blue", back("list")],
    ["{&list*}", "&list=red&list=green&list=blue", back("list")],
    ["{&keys}", "&keys=semi,%3B,dot,.,comma,%2C", back("keys")],
    ["{&keys*}", "&semi=%3B&dot=.&comma=%2C", back("keys")],
  ],
};

/** RFC 6570 §3.2.1–§3.2.9, the examples of each operator. */
const OPERATORS: Readonly<Record<string, readonly Example[]>> = {
  "§3.2.1 variable expansion": [
    ["{count}", "one,two,three", back("count")],
    ["{count*}", "one,two,three", back("count")],
    ["{/count}", "/one,two,three", back("count")],
    ["{/count*}", "/one/two/three", back("count")],
    ["{;count}", ";count=one,two,three", back("count")],
    ["{;count*}", ";count=one;count=two;count=three", back("count")],
    ["{?count}", "?count=one,two,three", back("count")],
    ["{?count*}", "?count=one&count=two&count=three", back("count")],
    ["{&count*}", "&count=one&count=two&count=three", back("count")],
  ],
  "§3.2.2 simple string expansion": [
    ["{var}", "value", back("var")],
    ["{hello}", "Hello%20World%21", back("hello")],
    ["{half}", "50%25", back("half")],
    // `OX` cannot tell an empty value from an undefined one, and bare expressions match at least
    // one character (so `users://{id}/profile` rejects `users:///profile`): no match.
    ["O{empty}X", "OX", null],
    ["O{undef}X", "OX", null],
    ["{x,y}", "1024,768", back("x", "y")],
    ["{x,hello,y}", "1024,Hello%20World%21,768", back("x", "hello", "y")],
    ["?{x,empty}", "?1024,", back("x", "empty")],
    ["?{x,undef}", "?1024", back("x")],
    // `?768` reads as either variable alone; earlier variables take values first.
    ["?{undef,y}", "?768", { undef: "768" }],
    ["{var:3}", "val", { var: "val" }],
    ["{var:30}", "value", back("var")],
    ["{list}", "red,green,blue", back("list")],
    ["{list*}", "red,green,blue", back("list")],
    ["{keys}", "semi,%3B,dot,.,comma,%2C", back("keys")],
    ["{keys*}", "semi=%3B,dot=.,comma=%2C", back("keys")],
  ],
  "§3.2.3 reserved expansion": [
    ["{+var}", "value", back("var")],
    ["{+hello}", "Hello%20World!", back("hello")],
    ["{+half}", "50%25", back("half")],
    ["{base}index", "http%3A%2F%2Fexample.com%2Fhome%2Findex", back("base")],
    ["{+base}index", "http://example.com/home/index", back("base")],
    ["O{+empty}X", "OX", null], // as O{empty}X
    ["O{+undef}X", "OX", null],
    ["{+path}/here", "/foo/bar/here", back("path")],
    ["here?ref={+path}", "here?ref=/foo/bar", back("path")],
    // Nothing separates the two values and `{+path}` takes as few characters as the rest allows:
    // `{var}` cannot hold `/`, so `path` ends at the last `/`.
    ["up{+path}{var}/here", "up/foo/barvalue/here", { path: "/foo/", var: "barvalue" }],
    ["{+x,hello,y}", "1024,Hello%20World!,768", back("x", "hello", "y")],
    ["{+path,x}/here", "/foo/bar,1024/here", back("path", "x")],
    ["{+path:6}/here", "/foo/b/here", { path: "/foo/b" }],
    ["{+list}", "red,green,blue", { list: "red,green,blue" }], // see §1.2 level 4
    ["{+list*}", "red,green,blue", back("list")],
    ["{+keys}", "semi,;,dot,.,comma,,", { keys: "semi,;,dot,.,comma,," }],
    ["{+keys*}", "semi=;,dot=.,comma=,", { keys: ["semi=;", "dot=.", "comma=", ""] }],
  ],
  "§3.2.4 fragment expansion": [
    ["{#var}", "#value", back("var")],
    ["{#hello}", "#Hello%20World!", back("hello")],
    ["{#half}", "#50%25", back("half")],
    ["foo{#empty}", "foo#", back("empty")],
    ["foo{#undef}", "foo", {}],
    ["{#x,hello,y}", "#1024,Hello%20World!,768", back("x", "hello", "y")],
    ["{#path,x}/here", "#/foo/bar,1024/here", back("path", "x")],
    ["{#path:6}/here", "#/foo/b/here", { path: "/foo/b" }],
    ["{#list}", "#red,green,blue", { list: "red,green,blue" }], // see §1.2 level 4
    ["{#list*}", "#red,green,blue", back("list")],
    ["{#keys}", "#semi,;,dot,.,comma,,", { keys: "semi,;,dot,.,comma,," }],
    ["{#keys*}", "#semi=;,dot=.,comma=,", { keys: ["semi=;", "dot=.", "comma=", ""] }],
  ],
  "§3.2.5 label expansion with dot-prefix": [
    ["{.who}", ".fred", back("who")],
    ["{.who,who}", ".fred.fred", back("who")],
    ["{.half,who}", ".50%25.fred", back("half", "who")],
    ["www{.dom*}", "www.example.com", back("dom")],
    ["X{.var}", "X.value", back("var")],
    ["X{.empty}", "X.", back("empty")],
    ["X{.undef}", "X", {}],
    ["X{.var:3}", "X.val", { var: "val" }],
    ["X{.list}", "X.red,green,blue", back("list")],
    ["X{.list*}", "X.red.green.blue", back("list")],
    ["X{.keys}", "X.semi,%3B,dot,.,comma,%2C", back("keys")],
    ["X{.keys*}", "X.semi=%3B.dot=..comma=%2C", back("keys")],
    ["X{.empty_keys}", "X", {}],
    ["X{.empty_keys*}", "X", {}],
  ],
  "§3.2.6 path segment expansion": [
    ["{/who}", "/fred", back("who")],
    ["{/who,who}", "/fred/fred", back("who")],
    ["{/half,who}", "/50%25/fred", back("half", "who")],
    ["{/who,dub}", "/fred/me%2Ftoo", back("who", "dub")],
    ["{/var}", "/value", back("var")],
    ["{/var,empty}", "/value/", back("var", "empty")],
    ["{/var,undef}", "/value", back("var")],
    ["{/var,x}/here", "/value/1024/here", back("var", "x")],
    ["{/var:1,var}", "/v/value", back("var")],
    ["{/list}", "/red,green,blue", back("list")],
    ["{/list*}", "/red/green/blue", back("list")],
    ["{/list*,path:4}", "/red/green/blue/%2Ffoo", { list: MATCHED.list!, path: "/foo" }],
    ["{/keys}", "/semi,%3B,dot,.,comma,%2C", back("keys")],
    ["{/keys*}", "/semi=%3B/dot=./comma=%2C", back("keys")],
  ],
  "§3.2.7 path-style parameter expansion": [
    ["{;who}", ";who=fred", back("who")],
    ["{;half}", ";half=50%25", back("half")],
    ["{;empty}", ";empty", back("empty")],
    ["{;v,empty,who}", ";v=6;empty;who=fred", back("v", "empty", "who")],
    ["{;v,bar,who}", ";v=6;who=fred", back("v", "who")],
    ["{;x,y}", ";x=1024;y=768", back("x", "y")],
    ["{;x,y,empty}", ";x=1024;y=768;empty", back("x", "y", "empty")],
    ["{;x,y,undef}", ";x=1024;y=768", back("x", "y")],
    ["{;hello:5}", ";hello=Hello", { hello: "Hello" }],
    ["{;list}", ";list=red,green,blue", back("list")],
    ["{;list*}", ";list=red;list=green;list=blue", back("list")],
    ["{;keys}", ";keys=semi,%3B,dot,.,comma,%2C", back("keys")],
    ["{;keys*}", ";semi=%3B;dot=.;comma=%2C", back("keys")],
  ],
  "§3.2.8 form-style query expansion": [
    ["{?who}", "?who=fred", back("who")],
    ["{?half}", "?half=50%25", back("half")],
    ["{?x,y}", "?x=1024&y=768", back("x", "y")],
    ["{?x,y,empty}", "?x=1024&y=768&empty=", back("x", "y", "empty")],
    ["{?x,y,undef}", "?x=1024&y=768", back("x", "y")],
    ["{?var:3}", "?var=val", { var: "val" }],
    ["{?list}", "?list=red,green,blue", back("list")],
    ["{?list*}", "?list=red&list=green&list=blue", back("list")],
    ["{?keys}", "?keys=semi,%3B,dot,.,comma,%2C", back("keys")],
    ["{?keys*}", "?semi=%3B&dot=.&comma=%2C", back("keys")],
  ],
  "§3.2.9 form-style query continuation": [
    ["{&who}", "&who=fred", back("who")],
    ["{&half}", "&half=50%25", back("half")],
    ["?fixed=yes{&x}", "?fixed=yes&x=1024", back("x")],
    ["{&x,y,empty}", "&x=1024&y=768&empty=", back("x", "y", "empty")],
    ["{&var:3}", "&var=val", { var: "val" }],
    ["{&list}", "&list=red,green,blue", back("list")],
    ["{&list*}", "&list=red&list=green&list=blue", back("list")],
    ["{&keys}", "&keys=semi,%3B,dot,.,comma,%2C", back("keys")],
    ["{&keys*}", "&semi=%3B&dot=.&comma=%2C", back("keys")],
  ],
};

const RFC_EXAMPLES = { ...LEVELS, ...OPERATORS };

function matchOf(template: string, uri: string): UriTemplateMatch | null {
  return new UriTemplate(template).match(uri);
}

describe.each(Object.entries(RFC_EXAMPLES))("RFC 6570 %s", (_section, examples) => {
  it.each(examples)("expands %s to %s", (template, expansion) => {
    expect(new UriTemplate(template).expand(RFC_VARIABLES)).toBe(expansion);
  });

  it.each(examples)("matches %s against %s", (template, expansion, matched) => {
    expect(matchOf(template, expansion)).toEqual(matched);
  });

  // Exploded associative arrays come back flattened, which expands as a list: left out here.
  const expandable = examples.filter(([template, , matched]) => matched !== null && !template.includes("keys*"));
  it.each(expandable)("reads %s from %s as values that expand to it again", (template, expansion) => {
    const parsed = new UriTemplate(template);
    expect(parsed.expand(parsed.match(expansion)!)).toBe(expansion);
  });
});

describe("RFC 6570 examples, reserved expansion of exploded associative arrays", () => {
  it("reads {+keys*} as a list of raw items that expands to the same URI", () => {
    const template = new UriTemplate("{+keys*}");
    expect(template.expand(template.match("semi=;,dot=.,comma=,")!)).toBe("semi=;,dot=.,comma=,");
  });
});

describe("UriTemplate expansion", () => {
  it("encodes everything but unreserved characters in simple expansion", () => {
    const value = "a b/c?d#e&f=g,h;i+j%k'l(m)n*o!p[q]r@s$t:u~v-w.x_y";
    expect(new UriTemplate("{v}").expand({ v: value })).toBe(
      "a%20b%2Fc%3Fd%23e%26f%3Dg%2Ch%3Bi%2Bj%25k%27l%28m%29n%2Ao%21p%5Bq%5Dr%40s%24t%3Au~v-w.x_y",
    );
  });

  it("passes reserved characters and existing pct-triplets in {+v} and {#v}, and encodes the rest", () => {
    const value = "a b/c?d#e&f=g,h;i+j%k'l(m)n*o!p[q]r@s$t:u~v-w.x_y%41%zz\"<>";
    const reserved = "a%20b/c?d#e&f=g,h;i+j%25k'l(m)n*o!p[q]r@s$t:u~v-w.x_y%41%25zz%22%3C%3E";
    expect(new UriTemplate("{+v}").expand({ v: value })).toBe(reserved);
    expect(new UriTemplate("{#v}").expand({ v: value })).toBe(`#${reserved}`);
    expect(new UriTemplate("{v}").expand({ v: "%41" })).toBe("%2541");
  });

  it("encodes non-ASCII characters as UTF-8 in every operator", () => {
    const vars = { v: "é😀" };
    expect(new UriTemplate("{v}").expand(vars)).toBe("%C3%A9%F0%9F%98%80");
    expect(new UriTemplate("{+v}").expand(vars)).toBe("%C3%A9%F0%9F%98%80");
    expect(new UriTemplate("{?v}").expand(vars)).toBe("?v=%C3%A9%F0%9F%98%80");
  });

  it("encodes literal characters that may not appear in a URI and keeps reserved ones and triplets", () => {
    expect(new UriTemplate("a b/é|{x}?k=v&%20").expand({ x: "1" })).toBe("a%20b/%C3%A9%7C1?k=v&%20");
  });

  it("cuts a prefix modifier by characters, before encoding", () => {
    expect(new UriTemplate("{v:3}").expand({ v: "😀é🎉xyz" })).toBe("%F0%9F%98%80%C3%A9%F0%9F%8E%89");
    expect(new UriTemplate("{half:3}").expand({ half: "50%" })).toBe("50%25");
    expect(new UriTemplate("{half:2}").expand({ half: "50%" })).toBe("50");
    expect(new UriTemplate("{+path:6}").expand({ path: "/foo/bar" })).toBe("/foo/b");
    expect(new UriTemplate("{v:9999}").expand({ v: "short" })).toBe("short");
  });

  it("refuses a prefix modifier on a list or associative array", () => {
    expect(() => new UriTemplate("{list:3}").expand({ list: ["red"] })).toThrow(UriTemplateError);
    expect(() => new UriTemplate("{?keys:1}").expand({ keys: { a: "b" } })).toThrow(UriTemplateError);
    expect(new UriTemplate("{list:3}").expand({ list: "redgreen" })).toBe("red");
  });

  it("explodes lists and associative arrays per operator", () => {
    const vars = { list: ["a", "b c"], keys: { k1: "v 1", k2: "" } };
    expect(new UriTemplate("{list*}/{keys*}").expand(vars)).toBe("a,b%20c/k1=v%201,k2=");
    expect(new UriTemplate("{;list*}{;keys*}").expand(vars)).toBe(";list=a;list=b%20c;k1=v%201;k2");
    expect(new UriTemplate("{?list*}{&keys*}").expand(vars)).toBe("?list=a&list=b%20c&k1=v%201&k2=");
    expect(new UriTemplate("{/list*}{.keys*}").expand(vars)).toBe("/a/b%20c.k1=v%201.k2=");
  });

  it("takes associative arrays as ordered pairs too, in their order", () => {
    expect(
      new UriTemplate("{?keys*}").expand({
        keys: [
          ["z", "1"],
          ["a", "2"],
        ],
      }),
    ).toBe("?z=1&a=2");
  });

  it("treats null, undefined, empty lists and empty associative arrays as undefined, but not \"\"", () => {
    const template = new UriTemplate("{?a,b,c,d,e}");
    expect(template.expand({ a: null, b: undefined, c: [], d: {} })).toBe("");
    expect(template.expand({ e: "" })).toBe("?e=");
  });

  it("expands numbers and booleans as strings", () => {
    expect(new UriTemplate("{/n,f}{?t}").expand({ n: 0, f: false, t: true })).toBe("/0/false?t=true");
  });

  it("reads only the variables' own properties", () => {
    expect(new UriTemplate("{toString}{constructor}").expand({})).toBe("");
    const own = JSON.parse('{"__proto__":"p"}') as UriTemplateVariables;
    expect(new UriTemplate("{__proto__}").expand(own)).toBe("p");
  });

  it("expands a template without expressions to its literal", () => {
    expect(new UriTemplate("file:///etc/hosts").expand({})).toBe("file:///etc/hosts");
    expect(new UriTemplate("").expand({})).toBe("");
  });

  it("lists variable names once, in order of first appearance, and prints the template", () => {
    const template = new UriTemplate("{x,y}{/x:1}{?z*}{&y}");
    expect(template.variableNames).toEqual(["x", "y", "z"]);
    expect(template.toString()).toBe("{x,y}{/x:1}{?z*}{&y}");
  });
});

describe("UriTemplate matching", () => {
  it("returns null for URIs the template cannot produce", () => {
    const cases: readonly (readonly [string, string])[] = [
      ["{var}", ""],
      ["{var}", "a/b"],
      ["{var}", "a?b"],
      ["{var}", "a#b"],
      ["{var}", "a&b"],
      ["x{var}", "y1"],
      ["{var}/here", "1/there"],
      ["{var:3}", "valu"],
      ["{var:3}", "a,b"], // a prefix is never a list
      ["{/var:1,var}", "/x/value"], // the prefix disagrees with the full value
      ["{.who,who}", ".fred.barney"], // one variable, two values
      ["{/who}", "/a/b"],
      ["{;x}", ";y=1"],
      ["{;x}", "x=1"],
      ["{?x,y}", "?z=1"],
      ["{?x,y}", "?x=1&x=2"],
      ["{?x}", "?x=1#f"],
      ["{?x}", "x=1"],
      ["{&x}", "?x=1"],
      ["?fixed=yes{&x}", "?fixed=no&x=1"],
      ["{#x}", "x"],
      ["users://{id}/profile", "users:///profile"],
    ];
    for (const [template, uri] of cases) {
      expect({ template, uri, matched: matchOf(template, uri) }).toEqual({ template, uri, matched: null });
    }
  });

  it("matches literals exactly, with no case folding or normalisation", () => {
    expect(matchOf("test://items/{id}", "TEST://items/1")).toBeNull();
    expect(matchOf("test://items/{id}", "test://items/1")).toEqual({ id: "1" });
    expect(matchOf("test://it%65ms/{id}", "test://items/1")).toBeNull();
  });

  it("matches a literal that needs encoding in either form", () => {
    const template = new UriTemplate("a b/{x}");
    expect(template.match("a%20b/1")).toEqual({ x: "1" });
    expect(template.match("a b/1")).toEqual({ x: "1" });
    expect(template.match("a+b/1")).toBeNull();
  });

  it("reads prefix modifiers: at most that many decoded characters", () => {
    expect(matchOf("{var:3}", "va")).toEqual({ var: "va" });
    expect(matchOf("{var:3}", "%F0%9F%98%80%C3%A9%F0%9F%8E%89")).toEqual({ var: "😀é🎉" });
    expect(matchOf("{var:3}", "%F0%9F%98%80%C3%A9%F0%9F%8E%89x")).toBeNull();
    expect(matchOf("{?q:2}", "?q=ab")).toEqual({ q: "ab" });
    expect(matchOf("{?q:2}", "?q=abc")).toBeNull();
    // Each occurrence agrees with the others: a prefix with the full value, in either order.
    expect(matchOf("{var:2}/{var}", "va/value")).toEqual({ var: "value" });
    expect(matchOf("{var}/{var:2}", "value/va")).toEqual({ var: "value" });
    expect(matchOf("{var:2}/{var}", "xx/value")).toBeNull();
  });

  it("reads exploded lists and associative arrays", () => {
    expect(matchOf("{/list*}", "/a/b%20c/d")).toEqual({ list: ["a", "b c", "d"] });
    expect(matchOf("{/list*}", "/only")).toEqual({ list: ["only"] });
    expect(matchOf("{list*}", "a,b")).toEqual({ list: ["a", "b"] });
    expect(matchOf("{?list*}", "?list=a&list=b")).toEqual({ list: ["a", "b"] });
    expect(matchOf("{keys*}", "k1=v%201,k2=")).toEqual({ keys: ["k1", "v 1", "k2", ""] });
    expect(matchOf("{?keys*}", "?b=2&a%20b=1")).toEqual({ keys: ["b", "2", "a b", "1"] });
    expect(matchOf("{;keys*}", ";k1=v1;k2")).toEqual({ keys: ["k1", "v1", "k2", ""] });
    // A named variable keeps its parameter; the exploded one collects the others.
    expect(matchOf("{?x,rest*}", "?a=1&x=2&b=3")).toEqual({ x: "2", rest: ["a", "1", "b", "3"] });
  });

  it("reads {;x,y} parameters in any order, with or without values", () => {
    expect(matchOf("{;x,y}", ";y=768;x=1024")).toEqual({ x: "1024", y: "768" });
    expect(matchOf("{;x,y}", ";x")).toEqual({ x: "" });
    expect(matchOf("{;x,y}", ";x=a%3Bb,c")).toEqual({ x: ["a;b", "c"] });
    expect(matchOf("matrix{;x,y}/end", "matrix;x=1/end")).toEqual({ x: "1" });
    expect(matchOf("matrix{;x,y}/end", "matrix/end")).toEqual({});
  });

  it("reads query parameters in any order across {?…}{&…}", () => {
    const template = new UriTemplate("search{?q,lang}{&page}");
    expect(template.match("search?page=2&lang=en&q=a%26b")).toEqual({ q: "a&b", lang: "en", page: "2" });
    expect(template.match("search")).toEqual({});
    expect(template.match("search?q=x")).toEqual({ q: "x" });
    expect(template.match("search?q=x&other=1")).toBeNull();
  });

  it("reads {+path} with reserved characters and decodes triplets", () => {
    expect(matchOf("{+path}", "/a/b?c=d#e")).toEqual({ path: "/a/b?c=d#e" });
    expect(matchOf("{+path}/here", "/a%20b/c/here")).toEqual({ path: "/a b/c" });
    // Reserved expansion keeps existing triplets, so "%20" and " " expand alike: `match` decodes.
    expect(matchOf("{+path}", "a%20b")).toEqual({ path: "a b" });
    expect(matchOf("here?ref={+path}", "here?ref=http://x/y?z")).toEqual({ path: "http://x/y?z" });
  });

  it("ends a bare expression at the first occurrence of the literal after it", () => {
    expect(matchOf("{a}-{b}", "x-y-z")).toEqual({ a: "x", b: "y-z" });
    // `/foo/here/x/here` has one reading, but `{+path}` may not contain the literal `/here`.
    expect(matchOf("{+path}/here", "/foo/here/x/here")).toBeNull();
  });

  it("reads {#var}", () => {
    expect(matchOf("page{#section}", "page#a/b?c#d")).toEqual({ section: "a/b?c#d" });
    expect(matchOf("page{#section}", "page#a%20b")).toEqual({ section: "a b" });
    expect(matchOf("page{#section}", "page#")).toEqual({ section: "" });
    expect(matchOf("page{#section}", "page")).toEqual({});
    expect(matchOf("page{#section}", "page#a,b")).toEqual({ section: "a,b" });
    expect(matchOf("page{#a,b}", "page#x,y")).toEqual({ a: "x", b: "y" });
  });

  it("reads reserved characters only from their encoded form in simple expansion", () => {
    const template = new UriTemplate("x/{v}");
    const value = "a b/c?d#e&f=g,h;i+j%k";
    const uri = template.expand({ v: value });
    expect(uri).toBe("x/a%20b%2Fc%3Fd%23e%26f%3Dg%2Ch%3Bi%2Bj%25k");
    expect(template.match(uri)).toEqual({ v: value });
    expect(template.match("x/a+b")).toEqual({ v: "a+b" }); // `+` is not a space in URI templates
  });

  it("reads multi-variable expressions {x,y}", () => {
    const template = new UriTemplate("{x,y}");
    expect(template.match("1024,768")).toEqual({ x: "1024", y: "768" });
    expect(template.match("1024")).toEqual({ x: "1024" });
    expect(template.match("a%2Cb,c")).toEqual({ x: "a,b", y: "c" });
    // More items than variables: the surplus goes to the last variable, as a list.
    expect(template.match("1,2,3")).toEqual({ x: "1", y: ["2", "3"] });
  });

  it("reads label values that contain dots, which label expansion never encodes", () => {
    expect(matchOf("X{.var}", "X.a.b")).toEqual({ var: "a.b" });
    expect(matchOf("api{.dom}/v1", "api.example.com/v1")).toEqual({ dom: "example.com" });
    expect(matchOf("X{.var}.json", "X.a.b.json")).toEqual({ var: "a.b" });
    // Several variables: one unit each, the surplus to the last one.
    expect(matchOf("X{.a,b}", "X.1.2.3")).toEqual({ a: "1", b: "2.3" });
    expect(matchOf("X{.a}{.b}", "X.1.2")).toEqual({ a: "1", b: "2" });
    // An earlier bare expression takes as much as it can.
    expect(matchOf("{name}{.ext}", "a.tar.gz")).toEqual({ name: "a.tar.gz" });
  });

  it("percent-decodes values and leaves malformed or non-UTF-8 percent-encoding as is", () => {
    expect(matchOf("{v}", "%C3%A9%F0%9F%98%80")).toEqual({ v: "é😀" });
    expect(matchOf("{v}", "%c3%a9")).toEqual({ v: "é" });
    expect(matchOf("{v}", "50%")).toEqual({ v: "50%" });
    expect(matchOf("{v}", "%ZZ")).toEqual({ v: "%ZZ" });
    expect(matchOf("{v}", "%C3")).toEqual({ v: "%C3" });
    expect(matchOf("{v}", "%FFa%20b")).toEqual({ v: "%FFa b" });
  });

  it("accepts raw non-ASCII characters (IRIs)", () => {
    expect(matchOf("test://items/{id}", "test://items/日本")).toEqual({ id: "日本" });
  });

  it("binds a variable named __proto__ as an own property", () => {
    const matched = matchOf("{__proto__}/{constructor}", "x/y")!;
    expect(Object.getPrototypeOf(matched)).toBe(Object.prototype);
    expect(Object.keys(matched)).toEqual(["__proto__", "constructor"]);
    expect(Object.getOwnPropertyDescriptor(matched, "__proto__")?.value).toBe("x");
  });

  it("matches the empty template against the empty URI only", () => {
    expect(matchOf("", "")).toEqual({});
    expect(matchOf("", "x")).toBeNull();
  });
});

describe("UriTemplate match length guard", () => {
  it("matches URIs up to MAX_MATCH_LENGTH characters and refuses longer ones", () => {
    const template = new UriTemplate("x:{+rest}");
    const longest = `x:${"a".repeat(MAX_MATCH_LENGTH - 2)}`;
    expect(longest).toHaveLength(MAX_MATCH_LENGTH);
    expect(template.match(longest)).toEqual({ rest: "a".repeat(MAX_MATCH_LENGTH - 2) });
    expect(template.match(`${longest}a`)).toBeNull();
  });

  it("refuses a long URI even for a literal template it would equal", () => {
    const literal = "a".repeat(MAX_MATCH_LENGTH + 1);
    expect(new UriTemplate(literal).match(literal)).toBeNull();
  });

  it("fails quickly on a URI of the maximum length that nearly matches {a}.{b}.{c}", () => {
    const template = new UriTemplate("{a}.{b}.{c}");
    expect(template.match(`${"a.".repeat(MAX_MATCH_LENGTH / 2 - 1)}a/`)).toBeNull();
    expect(template.match(`${".".repeat(MAX_MATCH_LENGTH - 1)}/`)).toBeNull();
  });
});

/**
 * The anchored regular expression the header describes, built the way the matcher once compiled
 * templates: what a backtracking engine finds with it is the reading `match` must find.
 */
function referencePattern(template: string): RegExp {
  const escape = (text: string): string => text.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
  const literal = (text: string): string => {
    const [raw, encoded] = [escape(text), escape(new UriTemplate(text).expand({}))];
    return raw === encoded ? raw : `(?:${encoded}|${raw})`;
  };
  const parts = template.split(/(\{[^}]*\})/).filter((part) => part !== "");
  let source = "^";
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i]!;
    if (!part.startsWith("{")) {
      source += literal(part);
      continue;
    }
    const operator = "+#./;?&".includes(part[1]!) ? part[1]! : "";
    const specs = part.slice(1 + operator.length, -1).split(",");
    if (operator === "?" || operator === "&") while (parts[i + 1]?.startsWith("{&")) specs.push(...parts[++i]!.slice(2, -1).split(","));
    const following = parts[i + 1];
    const tempered = (char: string): string => (following === undefined || following.startsWith("{") ? char : `(?:(?!${literal(following)})${char})`);
    const exploded = specs.some((spec) => spec.endsWith("*"));
    const units = (unit: string): string => `(?:${unit})${exploded ? "*" : `{0,${specs.length}}`}`;
    const name = (any: string): string => (exploded ? any : `(?:${specs.map((spec) => escape(spec.replace(/:\d+$/, ""))).join("|")})`);
    const label = "\\.[^/?#&.]*";
    const param = `${name("[^#&=]+")}(?:=[^#&]*)?`;
    const patterns: Record<string, string> = {
      "": `${tempered("[^/?#&]")}+`,
      "+": `${tempered("[\\s\\S]")}+?`,
      "#": "(?:#[\\s\\S]*)?",
      ".": exploded ? units(label) : `${units(label)}(?:${label})*?`,
      "/": units("/[^/?#&]*"),
      ";": units(`;${name("[^/?#&;=]+")}(?:=[^/?#&;]*)?`),
      "?": `(?:\\?(?:${param}(?:&${param})*)?)?`,
      "&": `(?:&${param})*`,
    };
    source += `(${patterns[operator]})`;
  }
  return new RegExp(`${source}$`);
}

describe("UriTemplate matching where several readings exist", () => {
  // [template, URI, what `match` reads]: earlier expressions take as much as they can, lazy ones
  // (`{+x}`, surplus labels) as little, and names are tried in the order of the variables.
  const readings: readonly (readonly [template: string, uri: string, matched: UriTemplateMatch | null])[] = [
    ["{x}{y}{z}", "abcd", { x: "ab", y: "c", z: "d" }],
    ["{x}{y}{z}", "x".repeat(12), { x: "x".repeat(10), y: "x", z: "x" }],
    ["{a}{b}{c}{d}", "abcdef", { a: "abc", b: "d", c: "e", d: "f" }],
    ["{+a}{+b}{+c}", "a/b/c", { a: "a", b: "/", c: "b/c" }],
    ["{a}{+b}", "a/b", { a: "a", b: "/b" }],
    ["{+a}{b}", "a/bc", { a: "a/", b: "bc" }],
    ["{x}{y}", "a,b,c", { x: ["a", "b", ""], y: "c" }],
    ["{#a}{#b}", "#x#y", { a: "x#y" }],
    ["{a}{#b}", "x#y#z", { a: "x", b: "y#z" }],
    ["{.a}{.b}", ".x.y.z", { a: "x", b: "y.z" }],
    ["{.a,b}{.c}", ".1.2.3.4", { a: "1", b: "2", c: "3.4" }],
    ["X{.a}{b}", "X.1.2z", { a: "1", b: ".2z" }],
    ["{.a}{/b}", ".x.y/z", { a: "x.y", b: "z" }],
    ["{.a}{.b*}", ".1.2.3", { a: "1", b: ["2", "3"] }],
    ["{.a*}{.b}", ".1.2.3", { a: ["1", "2", "3"] }],
    ["{/a*}{/b}", "/1/2/3", { a: ["1", "2", "3"] }],
    ["{/a}{/b}", "/x/y/z", null], // two segments at most
    ["{/a}{b}", "/xy", { a: "x", b: "y" }],
    ["{;a,ab}{b}", ";ab=1", { a: "", b: "b=1" }],
    ["{;ab,a}{b}", ";ab=1", { ab: "", b: "1" }],
    ["{;a}{;b}", ";a=1;b=2", { a: "1", b: "2" }],
    ["{;a*}{;b}", ";a=1;b=2", { a: ["a", "1", "b", "2"] }],
    ["{;a,b}{;a}", ";a=1;b=2;a=1", { a: "1", b: "2" }],
    ["{?a,ab}{b}", "?ab=1", { a: "", b: "b=1" }],
    ["{?a}{?b}", "?a=1?b=2", { a: "1?b=2" }],
    ["{?a}{&b}{c}", "?b=2&a=1x", { a: "1", b: "2", c: "x" }],
    ["{&a*}{&b}", "&a=1&b=2", { a: ["1"], b: "2" }],
    ["{?a}{#b}", "?a=1#x", { a: "1", b: "x" }],
    // A stray `%` in a literal matches `%25` (its encoded form, tried first) or itself.
    ["%{a}", "%25x", { a: "x" }],
    ["{+a}%{b}", "x%25y%25z", { a: "x", b: "y%z" }],
  ];

  it.each(readings)("reads %s from %s", (template, uri, matched) => {
    expect(matchOf(template, uri)).toEqual(matched);
  });

  it("reads every short URI as the backtracking regular expression of the header does", () => {
    const templates = [
      "{a}{b}{x}", "{+a}{+b}{+x}", "{+a}{b}", "{a}{+b}", "{#a}{#b}", "{a}{#b}", "{a}a{b}", "{+a}a{+b}", "{a}ab{+b}", "{a} {b}", "{+a}%{b}",
      "{.a}", "{.a,b}", "{.a}{.b}", "X{.a}{b}", "{.a,b}{.b}", "{.a}a", "{.a}{+b}", "{a}{.b}", "{.a*}{.b}", "{.a}{/b}",
      "{/a}{/b}", "{/a,b}{/x}", "{/a*}{/b}", "{/a,b}{a}", "{/a}{.b,x}",
      "{;a,ab}", "{;a,ab}{b}", "{;a,ab}{;b}", "{;ab,a}{b}", "{;a*}{;b}", "{;a,ab}{+b}", "{;a,a}{b}",
      "{?a,ab}{b}", "{?ab,a}{+b}", "{?a*}{?b}", "{?a}{&ab}{b}", "{&a,ab}{b}", "{&a*}{&b}", "{?a,ab}{#b}", "{?a}{?b}{?ab}",
    ];
    const alphabet = ["a", "b", ".", "/", ";", "=", "?", "&", "#", " ", "%20", "%25"];
    const uris = [""];
    for (let length = 1, shorter = [""]; length <= 3; length++) {
      shorter = shorter.flatMap((uri) => alphabet.map((char) => uri + char));
      uris.push(...shorter);
    }
    for (const template of templates) {
      const pattern = referencePattern(template);
      for (const uri of uris) {
        const texts = pattern.exec(uri)?.slice(1) ?? null;
        const traced = traceMatch(template, uri).texts;
        const same = texts === null ? traced === null : traced?.length === texts.length && traced.every((text, i) => text === texts[i]);
        if (!same) expect({ template, uri, texts: traced }).toEqual({ template, uri, texts });
      }
    }
  });

  it("reads long URIs as the backtracking regular expression does", () => {
    // Long enough that the matcher keeps only where each segment can start, and scans it again.
    const cases: readonly (readonly [template: string, uri: string])[] = [
      ["{x}{y}{z}", "x".repeat(12_000)],
      ["{.a}{.b,c}{+d}", `${".x".repeat(6_000)}/y`],
      ["{/a,b}{/c*}{.d}", `${"/x".repeat(6_000)}.y`],
      ["{;a,ab}{;b*}{b}", `${";ab=1".repeat(2_400)}z`],
      ["{?a,ab}{&b}{#c}", `?ab=1${"&b=2".repeat(3_000)}#z`],
      ["{+a}{b}{#c}", `${"a/b".repeat(4_000)}#c`],
      ["{a}{+b}x{c}", `${"ax".repeat(6_000)}c`],
    ];
    for (const [template, uri] of cases) {
      expect(traceMatch(template, uri).texts).toEqual(referencePattern(template).exec(uri)?.slice(1));
    }
  });
});

describe("UriTemplate matching work", () => {
  /** `head`, then `unit` repeated, then `tail`: `length` characters. */
  function uriOf(length: number, unit: string, tail = "", head = ""): string {
    return head + unit.repeat(Math.ceil(length / unit.length)).slice(0, length - head.length - tail.length) + tail;
  }

  // Templates whose expressions can each end in many places, with URIs that nearly match: a
  // backtracking matcher tries every split of the URI among them (cubic or worse in its length,
  // minutes at MAX_MATCH_LENGTH). This one looks at each position a few times per template part.
  const adversarial: readonly (readonly [template: string, uri: (length: number) => string])[] = [
    ["{x}{y}{z}", (length) => uriOf(length, "x", "/")],
    ["{a}{b}{c}{d}", (length) => uriOf(length, "x", "!/")],
    ["{+a}{+b}{+c}!", (length) => uriOf(length, "x")],
    ["{#a}x{#b}x{#c}y", (length) => uriOf(length, "#x")],
    ["{/a*}x{/b*}x{/c*}", (length) => uriOf(length, "/x", "?")],
    ["{/a,b}{/c,d}{/e,f}", (length) => uriOf(length, "/x", "?")],
    ["{.a}{.b}{.c}", (length) => uriOf(length, ".x", "/")],
    ["{.a*}{.b*}{.c*}", (length) => uriOf(length, ".x", "/")],
    ["{;a*}{;b*}{;c*}", (length) => uriOf(length, ";x", "/")],
    ["{;a,b}{;a,b}{;a,b}", (length) => uriOf(length, ";a=", "/")],
    ["{?a*}{?b*}{?c*}", (length) => uriOf(length, "?", "#", "?a=")],
    ["{?a,b}{?a,b}{?a,b}", (length) => uriOf(length, "?a=", "#")],
    ["{&a*}{&b*}{&c*}", (length) => uriOf(length, "&x=", "#")],
  ];

  it.each(adversarial)("looks at each position of a URI a few times per part of %s", (template, uriFor) => {
    const parts = template.split(/(\{[^}]*\})/).filter((part) => part !== "").length;
    for (const length of [1000, MAX_MATCH_LENGTH]) {
      const uri = uriFor(length);
      expect(uri).toHaveLength(length);
      expect(matchOf(template, uri)).toBeNull();
      const { texts, steps } = traceMatch(template, uri);
      expect(texts).toBeNull();
      expect(steps).toBeLessThanOrEqual(8 * parts * (length + 1));
    }
  });

  it("stays linear when the long URI matches", () => {
    const uri = "x".repeat(MAX_MATCH_LENGTH);
    expect(matchOf("{x}{y}{z}", uri)).toEqual({ x: "x".repeat(MAX_MATCH_LENGTH - 2), y: "x", z: "x" });
    expect(traceMatch("{x}{y}{z}", uri).steps).toBeLessThanOrEqual(8 * 3 * (MAX_MATCH_LENGTH + 1));
    const mixed = "{x}{+y}{#z}{/w}{.v}{;u}{?t}";
    expect(traceMatch(mixed, uri).texts).toEqual(["x".repeat(MAX_MATCH_LENGTH - 1), "x", "", "", "", "", ""]);
    expect(traceMatch(mixed, uri).steps).toBeLessThanOrEqual(8 * 7 * (MAX_MATCH_LENGTH + 1));
  });
});

describe("UriTemplate syntax errors", () => {
  const invalid: readonly (readonly [template: string, offset: number | undefined])[] = [
    ["{", 0],
    ["{var", 0],
    ["file:///{path", 8],
    ["}", 0],
    ["{var}}", 5],
    ["{}", 0],
    ["{ var}", 1],
    ["{var }", 1],
    ["{x,}", 3],
    ["{,x}", 1],
    ["{x,,y}", 3],
    ["{=var}", 1],
    ["{!var}", 1],
    ["{@var}", 1],
    ["{|var}", 1],
    ["{$var}", 1],
    ["{+}", 2],
    ["{var:0}", 1],
    ["{var:10000}", 1],
    ["{var:-1}", 1],
    ["{var:3*}", 1],
    ["{var*:3}", 1],
    ["{var**}", 1],
    ["{var.}", 1],
    ["{.var.}", 2],
    ["{a..b}", 1],
    ["{a-b}", 1],
    ["{a%2}", 1],
    ["{a{b}", 1],
    ["{x,y z}", 3],
  ];

  it.each(invalid)("rejects %s (offset %s)", (template, offset) => {
    let caught: unknown;
    try {
      new UriTemplate(template);
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(UriTemplateError);
    const error = caught as UriTemplateError;
    expect(error.name).toBe("UriTemplateError");
    expect(error.template).toBe(template);
    expect(error.offset).toBe(offset);
    expect(error.message).toContain(`Invalid URI template "${template}"`);
  });

  it("accepts the edges of the grammar", () => {
    const template = new UriTemplate("{a.b,c_d,%41x,v:1,w:9999,list*}");
    expect(template.variableNames).toEqual(["a.b", "c_d", "%41x", "v", "w", "list"]);
    expect(template.expand({ "a.b": "1", "%41x": "2" })).toBe("1,2");
    expect(new UriTemplate("{?a.b}").expand({ "a.b": "1" })).toBe("?a.b=1");
    expect(new UriTemplate("{?a.b}").match("?a.b=1")).toEqual({ "a.b": "1" });
  });
});

describe("templates that MCP servers use", () => {
  it("file:///{path} names one segment; a nested path is encoded, as RFC 6570 says", () => {
    const template = new UriTemplate("file:///{path}");
    expect(template.expand({ path: "notes.txt" })).toBe("file:///notes.txt");
    expect(template.expand({ path: "dir/my notes.txt" })).toBe("file:///dir%2Fmy%20notes.txt");
    expect(template.match("file:///notes.txt")).toEqual({ path: "notes.txt" });
    expect(template.match("file:///dir%2Fmy%20notes.txt")).toEqual({ path: "dir/my notes.txt" });
    expect(template.match("file:///dir/notes.txt")).toBeNull();
    expect(template.match("file:///")).toBeNull();
    expect(template.match("file://host/notes.txt")).toBeNull();
    // Servers that serve nested paths write {+path}.
    expect(matchOf("file:///{+path}", "file:///dir/sub/notes.txt")).toEqual({ path: "dir/sub/notes.txt" });
  });

  it("demo://files/{name}", () => {
    const template = new UriTemplate("demo://files/{name}");
    expect(template.expand({ name: "read me.md" })).toBe("demo://files/read%20me.md");
    expect(template.match("demo://files/read%20me.md")).toEqual({ name: "read me.md" });
    expect(template.match("demo://files/readme.md")).toEqual({ name: "readme.md" });
    expect(template.match("demo://files/")).toBeNull();
    expect(template.match("demo://files/a/b")).toBeNull();
    expect(template.match("demo://filesx/a")).toBeNull();
    expect(template.match("other://files/a")).toBeNull();
  });

  it("test://items/{id}", () => {
    const template = new UriTemplate("test://items/{id}");
    expect(template.expand({ id: 42 })).toBe("test://items/42");
    expect(template.match("test://items/42")).toEqual({ id: "42" });
    expect(template.match("test://items/42/extra")).toBeNull();
    expect(template.match("test://items/42?x=1")).toBeNull();
    expect(template.match("test://items/42#top")).toBeNull();
    expect(template.match("xtest://items/42")).toBeNull();
  });

  it("ui://widget/{id}{?theme}", () => {
    const template = new UriTemplate("ui://widget/{id}{?theme}");
    expect(template.expand({ id: "chart" })).toBe("ui://widget/chart");
    expect(template.expand({ id: "chart 1", theme: "dark mode" })).toBe("ui://widget/chart%201?theme=dark%20mode");
    expect(template.match("ui://widget/chart")).toEqual({ id: "chart" });
    expect(template.match("ui://widget/chart%201?theme=dark%20mode")).toEqual({ id: "chart 1", theme: "dark mode" });
    expect(template.match("ui://widget/chart?theme=")).toEqual({ id: "chart", theme: "" });
    expect(template.match("ui://widget/chart?theme=dark&size=2")).toBeNull();
    expect(template.match("ui://widget/?theme=dark")).toBeNull();
    expect(template.match("ui://widget/a/b")).toBeNull();
  });
});

describe("UriTemplate.matches", () => {
  /** A small deterministic generator (mulberry32), so a failure names a seed that reproduces it. */
  const random = (seed: number) => () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const ALPHABET = ["a", "b", "7", "/", "?", "#", "&", ",", "=", "%", "%2F", "%zz", ".", ";", "-", "~", ":", "é", " ", "{", "+"];

  it("answers as match does, for the literal-then-one-variable shape it answers itself and for every other", () => {
    const templates = [
      "bench://r/{id}",
      "file:///{+path}",
      "x:{v}",
      "ui://w/{+rest}",
      "a/b{x}",
      // Not the shape: answered by the matcher.
      "bench://r/{id}/x",
      "bench://r/{id:3}",
      "bench://r/{id*}",
      "bench://r/{a,b}",
      "bench://r/{#f}",
      "bench://r/{/p}",
      "bench://r/{?q}",
      "{id}",
      "ü://{x}",
    ];
    const next = random(20261127);
    for (const text of templates) {
      const template = new UriTemplate(text);
      const literal = text.slice(0, text.indexOf("{"));
      for (let i = 0; i < 3_000; i++) {
        let tail = "";
        const length = Math.floor(next() * 6);
        for (let j = 0; j < length; j++) tail += ALPHABET[Math.floor(next() * ALPHABET.length)] ?? "";
        const uri = (next() < 0.9 ? literal : literal.slice(0, -1)) + tail;
        expect({ text, uri, matches: template.matches(uri) }).toEqual({ text, uri, matches: template.match(uri) !== null });
      }
      const long = `${literal}${"a".repeat(MAX_MATCH_LENGTH + 1)}`;
      expect(template.matches(long)).toBe(false);
    }
  });
});

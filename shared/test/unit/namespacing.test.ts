import { describe, expect, it } from "vitest";
import { BrokerError } from "../../src/errors.js";
import {
  NAME_SEPARATOR,
  URI_SEPARATOR,
  prefixName,
  prefixUri,
  prefixUriTemplate,
  rewriteUris,
  splitPrefixedName,
  splitPrefixedUri,
  splitPrefixedUriTemplate,
} from "../../src/naming/namespacing.js";
import { UriTemplate, type UriTemplateMatch, type UriTemplateVariables } from "../../src/naming/uri-template.js";

const BACKEND_IDS = ["a", "files", "my-backend-2", "z".repeat(63)];

/** URIs that backends really publish, and some that only a fuzzer would. */
const ODD_URIS = [
  "https://example.com/search?q=a+b&lang=en",
  "https://example.com/search?q=a%2Bb&empty=&=x&&",
  "https://example.com/page#section-2",
  "https://example.com/a?b=c#d?e=f#g",
  "https://user:p%40ss@example.com:8443/",
  "ui://widget/chart",
  "ui://widget/chart?theme=dark#top",
  "ui://",
  "file:///home/user/My%20Documents/report%2B2024.pdf",
  "file:///a%2Fb/c%2fd",
  "file:///C:/Program%20Files/x.txt",
  "file:///tmp/with space/and+plus",
  "data:text/plain;base64,SGVsbG8sIFdvcmxkIQ==",
  "data:application/octet-stream;base64,+/+/AA==",
  "data:text/plain,a+b,c,,d",
  "data:image/svg+xml;charset=utf-8,%3Csvg%20xmlns%3D%22http%3A%2F%2Fwww.w3.org%2F2000%2Fsvg%22%2F%3E",
  "data:,",
  "svn+ssh://svn.example.com/repo/trunk",
  "git+https://github.com/org/repo.git#v1.2.3",
  "a+b+c://x",
  "urn:isbn:0451450523",
  "urn:uuid:6e8bc430-9c3a-11d9-9669-0800200c9a66",
  "urn:example:a:b?+r?=q#f",
  "mailto:someone@example.com?subject=hi%20there",
  "file://",
  "x:",
  "about:blank",
  "",
  "+",
  "++",
  "__",
  "/relative/path",
  "file:///tmp/日本語/ファイル.txt",
  "https://example.com/%F0%9F%98%80?emoji=😀",
  "memo://notes/a__b+c",
  "weird:%",
  "weird:%zz%2",
  " leading and trailing spaces ",
  "line\nbreak\ttab",
];

describe("tool and prompt names", () => {
  const names = [
    "get_weather",
    "create__issue",
    "__dunder__",
    "_private",
    "trailing_",
    "a+b",
    "",
    "名前",
    "tool.name/with:chars",
    "x".repeat(200),
  ];

  it("prefixes with <backend>__ and splits back byte for byte", () => {
    expect(NAME_SEPARATOR).toBe("__");
    for (const backendId of BACKEND_IDS) {
      for (const name of names) {
        const exposed = prefixName(backendId, name);
        expect(exposed).toBe(`${backendId}__${name}`);
        expect(splitPrefixedName(exposed)).toEqual({ backendId, name });
        expect(splitPrefixedName(exposed)?.name).toBe(name);
      }
    }
  });

  it("splits at the first __, whatever the name holds", () => {
    expect(splitPrefixedName("gh__create__issue")).toEqual({ backendId: "gh", name: "create__issue" });
    expect(splitPrefixedName("gh___private")).toEqual({ backendId: "gh", name: "_private" });
    expect(splitPrefixedName("gh____")).toEqual({ backendId: "gh", name: "__" });
  });

  it("rejects names without a valid backend prefix", () => {
    const invalid = [
      "plain",
      "single_underscore",
      "__tool",
      "Gh__tool",
      "GH__tool",
      "1gh__tool",
      "-gh__tool",
      "my_backend__tool", // `_` is not in backend ids: the first `__` leaves "my_backend"
      "my.backend__tool",
      "my backend__tool",
      "ünï__tool",
      `${"a".repeat(64)}__tool`,
      "",
    ];
    for (const exposed of invalid) expect({ exposed, split: splitPrefixedName(exposed) }).toEqual({ exposed, split: null });
    expect(splitPrefixedName(`${"a".repeat(63)}__tool`)).toEqual({ backendId: "a".repeat(63), name: "tool" });
  });

  it("refuses to prefix with an invalid backend id", () => {
    for (const backendId of ["", "Gh", "1gh", "my_backend", "a+b", "a".repeat(64)]) {
      expect(() => prefixName(backendId, "tool")).toThrow(BrokerError);
      try {
        prefixName(backendId, "tool");
      } catch (error) {
        expect((error as BrokerError).code).toBe("INTERNAL");
        expect((error as BrokerError).data).toEqual({ backend: backendId });
      }
    }
  });
});

describe("resource URIs", () => {
  it("prefixes with <backend>+ and splits back byte for byte", () => {
    expect(URI_SEPARATOR).toBe("+");
    for (const backendId of BACKEND_IDS) {
      for (const uri of ODD_URIS) {
        const exposed = prefixUri(backendId, uri);
        expect(exposed).toBe(`${backendId}+${uri}`);
        const split = splitPrefixedUri(exposed);
        expect(split).toEqual({ backendId, uri });
        expect(split?.uri).toBe(uri);
        expect(split?.uri.length).toBe(uri.length);
      }
    }
  });

  it("splits at the first +, so schemes and data with + survive", () => {
    expect(splitPrefixedUri("a+svn+ssh://x")).toEqual({ backendId: "a", uri: "svn+ssh://x" });
    expect(splitPrefixedUri("files+data:text/plain,1+1=2")).toEqual({ backendId: "files", uri: "data:text/plain,1+1=2" });
  });

  it("splits only syntactically: an unprefixed URI whose scheme has + looks prefixed", () => {
    // The caller must check that the id names a backend whose URIs are prefixed (the catalog does).
    expect(splitPrefixedUri("svn+ssh://host/repo")).toEqual({ backendId: "svn", uri: "ssh://host/repo" });
  });

  it("rejects URIs without a valid backend prefix", () => {
    const invalid = [
      "file:///x",
      "https://example.com/?q=a+b", // the first `+` follows "https://example.com/?q=a"
      "+file:///x",
      "Files+file:///x",
      "1files+file:///x",
      "-files+file:///x",
      "my_files+file:///x",
      "my.files+file:///x",
      "my files+file:///x",
      "fïles+file:///x",
      `${"a".repeat(64)}+x`,
      "",
    ];
    for (const exposed of invalid) expect({ exposed, split: splitPrefixedUri(exposed) }).toEqual({ exposed, split: null });
  });

  it("refuses to prefix with an invalid backend id", () => {
    expect(() => prefixUri("Files", "file:///x")).toThrow(BrokerError);
    expect(() => prefixUri("my_files", "file:///x")).toThrow(BrokerError);
    expect(() => prefixUri("a+b", "file:///x")).toThrow(BrokerError);
  });
});

describe("resource templates", () => {
  const cases: readonly {
    template: string;
    variables: UriTemplateVariables;
    expanded: string;
    matched: UriTemplateMatch;
  }[] = [
    { template: "file:///{path}", variables: { path: "a b" }, expanded: "file:///a%20b", matched: { path: "a b" } },
    { template: "file:///{+path}", variables: { path: "dir/a+b" }, expanded: "file:///dir/a+b", matched: { path: "dir/a+b" } },
    { template: "demo://files/{name}", variables: { name: "x.md" }, expanded: "demo://files/x.md", matched: { name: "x.md" } },
    { template: "test://items/{id}", variables: { id: "42" }, expanded: "test://items/42", matched: { id: "42" } },
    {
      template: "ui://widget/{id}{?theme}",
      variables: { id: "w", theme: "dark" },
      expanded: "ui://widget/w?theme=dark",
      matched: { id: "w", theme: "dark" },
    },
    {
      template: "repo://{owner}/{repo}/contents{/path*}{?ref}",
      variables: { owner: "o", repo: "r", path: ["src", "a b.ts"], ref: "v1.0" },
      expanded: "repo://o/r/contents/src/a%20b.ts?ref=v1.0",
      matched: { owner: "o", repo: "r", path: ["src", "a b.ts"], ref: "v1.0" },
    },
    {
      template: "data:text/plain;base64,{payload}",
      variables: { payload: "SGk+/w==" },
      expanded: "data:text/plain;base64,SGk%2B%2Fw%3D%3D",
      matched: { payload: "SGk+/w==" },
    },
    {
      template: "svn+ssh://{host}{/path*}",
      variables: { host: "h", path: ["a", "b"] },
      expanded: "svn+ssh://h/a/b",
      matched: { host: "h", path: ["a", "b"] },
    },
    { template: "{+uri}", variables: { uri: "https://x/y?z#f" }, expanded: "https://x/y?z#f", matched: { uri: "https://x/y?z#f" } },
    { template: "urn:isbn:{isbn}", variables: { isbn: "0451450523" }, expanded: "urn:isbn:0451450523", matched: { isbn: "0451450523" } },
    {
      template: "mem://{ns}/{key}#{frag}",
      variables: { ns: "n", key: "k", frag: "f" },
      expanded: "mem://n/k#f",
      matched: { ns: "n", key: "k", frag: "f" },
    },
  ];

  it.each(cases)("$template prefixed is still RFC 6570 and matches the prefixed expansion", (example) => {
    const { template, variables, expanded, matched } = example;
    const original = new UriTemplate(template);
    expect(original.expand(variables)).toBe(expanded);
    expect(original.match(expanded)).toEqual(matched);

    const exposed = prefixUriTemplate("files", template);
    expect(exposed).toBe(`files+${template}`);
    expect(splitPrefixedUriTemplate(exposed)).toEqual({ backendId: "files", uriTemplate: template });

    const prefixed = new UriTemplate(exposed);
    expect(prefixed.variableNames).toEqual(original.variableNames);
    expect(prefixed.expand(variables)).toBe(prefixUri("files", expanded));
    expect(prefixed.match(prefixUri("files", expanded))).toEqual(matched);
    expect(prefixed.match(expanded)).toBeNull();
    expect(prefixed.match(prefixUri("other", expanded))).toBeNull();
  });

  it("splits templates byte for byte, and rejects invalid backend ids", () => {
    for (const uriTemplate of ["file:///{path}", "a+b://{x}", "{+uri}", "data:,{x}+{y}", ""]) {
      expect(splitPrefixedUriTemplate(prefixUriTemplate("my-backend", uriTemplate))).toEqual({ backendId: "my-backend", uriTemplate });
    }
    expect(splitPrefixedUriTemplate("Files+file:///{path}")).toBeNull();
    expect(splitPrefixedUriTemplate("file:///{path}")).toBeNull();
    expect(splitPrefixedUriTemplate("{+a}+{b}")).toBeNull();
    expect(() => prefixUriTemplate("1files", "file:///{path}")).toThrow(BrokerError);
  });
});

describe("rewriteUris", () => {
  const map = (uri: string): string => prefixUri("b", uri);
  const mapTemplate = (template: string): string => `T[${template}]`;

  /** Freezes `value` and everything in it, so that a write throws (modules are strict). */
  function deepFreeze<T>(value: T): T {
    if (typeof value === "object" && value !== null) {
      for (const key of Reflect.ownKeys(value)) deepFreeze((value as Record<PropertyKey, unknown>)[key]);
      Object.freeze(value);
    }
    return value;
  }

  /** Runs rewriteUris on a frozen copy of `value`, recording every string handed to a mapping. */
  function run(value: unknown): { out: unknown; mapped: string[] } {
    const mapped: string[] = [];
    const input = deepFreeze(structuredClone(value));
    const out = rewriteUris(
      input,
      (uri) => {
        mapped.push(uri);
        return map(uri);
      },
      (template) => {
        mapped.push(template);
        return mapTemplate(template);
      },
    );
    expect(input).toEqual(value);
    return { out, mapped };
  }

  it("rewrites resources[].uri of resources/list and nothing else there", () => {
    const result = {
      resources: [
        {
          uri: "file:///a b?x=1#y",
          name: "file:///a b?x=1#y",
          title: "uri",
          mimeType: "text/plain",
          annotations: { audience: ["user"], uri: "file:///annotation" },
          icons: [{ src: "https://example.com/i.png", uri: "https://example.com/i.png" }],
          _meta: { uri: "file:///meta", resources: [{ uri: "file:///meta-list" }] },
        },
        { uri: "data:text/plain;base64,SGk=", name: "d" },
        { uri: 42, name: "not a string" },
      ],
      nextCursor: "file:///cursor",
      _meta: { uri: "file:///top-meta" },
    };
    const { out, mapped } = run(result);
    expect(mapped).toEqual(["file:///a b?x=1#y", "data:text/plain;base64,SGk="]);
    expect(out).toEqual({
      ...result,
      resources: [
        { ...result.resources[0], uri: "b+file:///a b?x=1#y" },
        { uri: "b+data:text/plain;base64,SGk=", name: "d" },
        { uri: 42, name: "not a string" },
      ],
    });
  });

  it("rewrites contents[].uri of resources/read", () => {
    const result = {
      contents: [
        { uri: "ui://widget/chart?theme=dark", mimeType: "text/html;profile=mcp-app", text: "<html uri='ui://x'>" },
        { uri: "file:///blob%20name", blob: "AAEC", _meta: { uri: "file:///m" } },
      ],
    };
    const { out, mapped } = run(result);
    expect(mapped).toEqual(["ui://widget/chart?theme=dark", "file:///blob%20name"]);
    expect(out).toEqual({
      contents: [
        { uri: "b+ui://widget/chart?theme=dark", mimeType: "text/html;profile=mcp-app", text: "<html uri='ui://x'>" },
        { uri: "b+file:///blob%20name", blob: "AAEC", _meta: { uri: "file:///m" } },
      ],
    });
  });

  it("rewrites resourceTemplates[].uriTemplate with the template mapping, and defaults it to the URI mapping", () => {
    const result = {
      resourceTemplates: [
        { uriTemplate: "file:///{path}", uri: "file:///not-a-template", name: "files" },
        { uriTemplate: "ui://widget/{id}{?theme}", name: "widgets" },
      ],
    };
    const { out, mapped } = run(result);
    expect(mapped).toEqual(["file:///{path}", "ui://widget/{id}{?theme}"]);
    expect(out).toEqual({
      resourceTemplates: [
        { uriTemplate: "T[file:///{path}]", uri: "file:///not-a-template", name: "files" },
        { uriTemplate: "T[ui://widget/{id}{?theme}]", name: "widgets" },
      ],
    });
    expect(rewriteUris(result, map)).toEqual({
      resourceTemplates: [
        { uriTemplate: "b+file:///{path}", uri: "file:///not-a-template", name: "files" },
        { uriTemplate: "b+ui://widget/{id}{?theme}", name: "widgets" },
      ],
    });
  });

  it("rewrites resource links and embedded resources in a tool result's content, and not its structuredContent or _meta", () => {
    const link = { type: "resource_link", uri: "file:///report.pdf", name: "report", mimeType: "application/pdf" };
    const result = {
      content: [
        { type: "text", text: "see file:///report.pdf", uri: "file:///text-lookalike" },
        link,
        { type: "resource", resource: { uri: "data:text/plain,a+b", text: "a+b" }, uri: "file:///wrong-level" },
        { type: "resource", resource: { uri: "file:///bin", blob: "AA==", _meta: { uri: "file:///m" } } },
        { type: "image", data: "AA==", mimeType: "image/png", uri: "file:///image-lookalike" },
        { type: "audio", data: "AA==", mimeType: "audio/wav" },
      ],
      structuredContent: {
        uri: "file:///s",
        resources: [{ uri: "file:///s1" }],
        contents: [{ uri: "file:///s2" }],
        content: [{ ...link }, { type: "resource", resource: { uri: "file:///s3" } }],
      },
      isError: false,
      _meta: { link: { ...link }, "io.example/uri": "file:///meta" },
    };
    const { out, mapped } = run(result);
    expect(mapped).toEqual(["file:///report.pdf", "data:text/plain,a+b", "file:///bin"]);
    expect(out).toEqual({
      ...result,
      content: [
        result.content[0],
        { ...link, uri: "b+file:///report.pdf" },
        { type: "resource", resource: { uri: "b+data:text/plain,a+b", text: "a+b" }, uri: "file:///wrong-level" },
        { type: "resource", resource: { uri: "b+file:///bin", blob: "AA==", _meta: { uri: "file:///m" } } },
        result.content[4],
        result.content[5],
      ],
    });
  });

  it("rewrites content blocks wherever they are: prompt messages and nested results", () => {
    const result = {
      description: "file:///description",
      messages: [
        { role: "user", content: { type: "resource", resource: { uri: "ui://widget/a", text: "x" } } },
        { role: "assistant", content: { type: "resource_link", uri: "urn:isbn:0451450523", name: "book" } },
        { role: "user", content: { type: "text", text: "file:///t" } },
      ],
      nested: { result: { content: [{ type: "resource_link", uri: "svn+ssh://h/r", name: "r" }] } },
    };
    const { out, mapped } = run(result);
    expect(mapped).toEqual(["ui://widget/a", "urn:isbn:0451450523", "svn+ssh://h/r"]);
    expect(out).toEqual({
      ...result,
      messages: [
        { role: "user", content: { type: "resource", resource: { uri: "b+ui://widget/a", text: "x" } } },
        { role: "assistant", content: { type: "resource_link", uri: "b+urn:isbn:0451450523", name: "book" } },
        result.messages[2],
      ],
      nested: { result: { content: [{ type: "resource_link", uri: "b+svn+ssh://h/r", name: "r" }] } },
    });
  });

  it("leaves look-alikes alone: schemas, stray uri fields, lists that are not a result's own", () => {
    const result = {
      uri: "file:///top",
      resource: { uri: "file:///untyped-resource" },
      items: [{ uri: "file:///item" }],
      tools: [
        {
          name: "fetch",
          inputSchema: {
            type: "object",
            properties: { uri: { type: "string", default: "file:///default" }, resources: { type: "array" } },
            examples: [{ type: "resource_link", uri: "file:///example" }],
          },
          outputSchema: { type: "object", properties: { contents: { const: [{ uri: "file:///const" }] } } },
          annotations: { title: "t" },
        },
      ],
      requestedSchema: { properties: { resource: { type: "resource", uri: "file:///x" } } },
      content: [
        { type: "text", text: "x", resources: [{ uri: "file:///nested-resources" }] },
        { type: "text", text: "y", contents: [{ uri: "file:///nested-contents" }] },
        { type: "text", text: "z", resourceTemplates: [{ uriTemplate: "file:///{nested}" }] },
      ],
      resources: "not a list",
      contents: { uri: "file:///not-a-list" },
      resourceTemplates: [{ uri: "file:///not-a-template" }],
    };
    const { out, mapped } = run(result);
    expect(mapped).toEqual([]);
    expect(out).toEqual(result);
  });

  it("keeps __proto__ keys as own data, at every depth", () => {
    const json =
      '{"__proto__":{"polluted":1},"resources":[{"uri":"file:///x","__proto__":{"uri":"file:///p"}}],' +
      '"_meta":{"__proto__":{"polluted":2}},"content":[{"type":"resource_link","uri":"u","__proto__":{"type":"resource"}}]}';
    const input = JSON.parse(json) as unknown;
    const out = rewriteUris(input, map) as Record<string, unknown>;
    expect(Object.getPrototypeOf(out)).toBe(Object.prototype);
    expect(Object.hasOwn(out, "__proto__")).toBe(true);
    expect(out.polluted).toBeUndefined();
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    const resource = (out.resources as Record<string, unknown>[])[0]!;
    expect(Object.getPrototypeOf(resource)).toBe(Object.prototype);
    expect(Object.getOwnPropertyDescriptor(resource, "__proto__")?.value).toEqual({ uri: "file:///p" });
    expect(JSON.stringify(out)).toBe(json.replace('"uri":"file:///x"', '"uri":"b+file:///x"').replace('"uri":"u"', '"uri":"b+u"'));
  });

  it("does not mutate its input and shares no object with it", () => {
    const result = {
      resources: [{ uri: "file:///a", annotations: { audience: ["user"] } }],
      structuredContent: { deep: { list: [1, 2] } },
      _meta: { k: { v: 1 } },
    };
    const snapshot = structuredClone(result);
    const out = rewriteUris(result, map) as typeof result;
    expect(result).toEqual(snapshot);
    expect(out.resources).not.toBe(result.resources);
    expect(out.resources[0]!.annotations).not.toBe(result.resources[0]!.annotations);
    expect(out.resources[0]!.annotations.audience).not.toBe(result.resources[0]!.annotations.audience);
    expect(out.structuredContent).not.toBe(result.structuredContent);
    expect(out.structuredContent.deep.list).not.toBe(result.structuredContent.deep.list);
    expect(out._meta.k).not.toBe(result._meta.k);
    out.structuredContent.deep.list.push(3);
    expect(result.structuredContent.deep.list).toEqual([1, 2]);
  });

  it("passes primitives through and rewrites a top-level list of content blocks", () => {
    expect(rewriteUris("file:///x", map)).toBe("file:///x");
    expect(rewriteUris(null, map)).toBeNull();
    expect(rewriteUris(7, map)).toBe(7);
    expect(rewriteUris([{ type: "resource_link", uri: "x:" }, "x:"], map)).toEqual([{ type: "resource_link", uri: "b+x:" }, "x:"]);
  });

  it("round-trips every odd URI through rewrite and split", () => {
    const result = { contents: ODD_URIS.map((uri) => ({ uri, text: uri })) };
    const out = rewriteUris(result, (uri) => prefixUri("files", uri)) as typeof result;
    expect(out.contents.map((item) => splitPrefixedUri(item.uri))).toEqual(ODD_URIS.map((uri) => ({ backendId: "files", uri })));
    expect(out.contents.map((item) => item.text)).toEqual(ODD_URIS);
  });
});

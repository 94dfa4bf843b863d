export * from "./uri-template.js";
export * from "./namespacing.js";

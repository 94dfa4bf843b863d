export { UriTemplate, UriTemplateError, type UriTemplateMatch, type UriTemplateValue, type UriTemplateVariables } from "./uri-template.js";
export * from "./namespacing.js";
export { MAX_URI_BYTES, MAX_URI_SLASHES } from "./uri-limits.js";
export * from "./sub-resources.js";

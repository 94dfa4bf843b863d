/**
 * The largest URI a client may name, documented in the README ("Names"). Looking a URI up costs
 * time in proportion to its length (matching it against each template) and to its length times
 * its `/` (the walk over its ancestors that finds sub-resources: a 2 MB URI of `a/` took a second),
 * so the broker refuses a client URI over either limit before any lookup (BAD_PARAMS).
 */
export const MAX_URI_BYTES = 16_384;

/** The most `/` a client URI may contain (see MAX_URI_BYTES). */
export const MAX_URI_SLASHES = 128;

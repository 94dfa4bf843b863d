/** A cluster member of mcp-broker: what the broker and the worker share (see `createMember`). */
export { createMember, describeRedis, redactUrl, type BackendStatus, type Member, type MemberDeps, type MemberHooks } from "./member.js";
export { createLogger, type Logger } from "./logger.js";
export { startBackendsOrClose, stopOnSignals } from "./lifecycle.js";
export { BROKER_VERSION } from "./version.js";
export { createMemberMetrics, scrapedCounter, scrapedGauge, type MemberMetrics, type MemberMetricsSources } from "./metrics.js";
export { canonicalHash, canonicalJson } from "./catalog/canonical-hash.js";
export { gateTools, isGated, type HeldTool, type ToolGateState } from "./catalog/tool-gate.js";
export { heldNames, KINDS_OF_LIST, LIST_KINDS, ListReloader, MalformedListError, type ListedBackend, type ListKind } from "./catalog/list-reloader.js";
export { ListChanges } from "./catalog/list-changes.js";
export { clusterJobSchema, jobKey, type ClusterJob } from "./jobs/cluster-jobs.js";
export { SubscriptionJobs } from "./jobs/subscription-jobs.js";
export { InstancePresence } from "./cluster/instance-presence.js";
export { BackendConnection, type BackendEra, type BackendListener, type BackendRequestOptions, type BackendState } from "./upstream/backend-connection.js";
export { INTERACTION_METHODS, interactionSupport, type ClientInteraction, type InteractionMethod, type InteractionSupport } from "./upstream/client-interaction.js";
export { BackendPool } from "./upstream/backend-pool.js";
export { BackendWatchers } from "./upstream/backend-watchers.js";
export { UpstreamSubscriptions, type UpstreamPort } from "./upstream/upstream-subscriptions.js";
export { createOperationsServer, HostCheck, sendJson, serveOperations, type OperationsDeps, type ReadinessReport } from "./operations.js";

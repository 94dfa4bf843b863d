/**
 * Every Redis key and channel name of the Redis engine, in one place. All carry the configured
 * prefix (clusters sharing one Redis use different prefixes); keys that hold client state carry the
 * principal.
 */
export class RedisKeys {
  /**
   * `sharded` (a Redis Cluster): the prefix is a hash tag, `{<keyPrefix>}`, so that every key and
   * channel is in one slot (each script touches one; the limits stay exact), and the bus uses
   * sharded pub/sub (`SPUBLISH`/`SSUBSCRIBE`), which stays on the shard that serves that slot
   * (classic `PUBLISH` crosses the cluster bus to every node: about 10 ms per hop measured locally).
   */
  constructor(
    readonly prefix: string,
    readonly sharded = false,
  ) {}

  /**
   * A Lua script that publishes or counts a channel's subscribers, with `PUBLISH` made `SPUBLISH`
   * and `PUBSUB NUMSUB` made `PUBSUB SHARDNUMSUB` when sharded (the bus's channels are shard
   * channels there: `NUMSUB` counts none of their subscribers).
   */
  script(lua: string): string {
    return this.sharded ? lua.replaceAll("redis.call('PUBLISH',", "redis.call('SPUBLISH',").replaceAll("redis.call('PUBSUB', 'NUMSUB',", "redis.call('PUBSUB', 'SHARDNUMSUB',") : lua;
  }

  /** A bus channel (see `CHANNEL`). */
  channel(name: string): string {
    return `${this.prefix}ch:${name}`;
  }

  /** The bus channel name back from a Redis channel, or undefined when it is not ours. */
  channelName(redisChannel: string): string | undefined {
    const head = `${this.prefix}ch:`;
    return redisChannel.startsWith(head) ? redisChannel.slice(head.length) : undefined;
  }

  /** Sorted set of `backendId NUL uri` one session holds, scored by when each was added (µs). */
  session(principal: string, sessionId: string): string {
    return `${this.prefix}sub:${encodeURIComponent(principal)}:${encodeURIComponent(sessionId)}`;
  }

  /** A SCAN pattern matching every session's holdings (and nothing else). */
  sessionPattern(): string {
    return `${this.prefix.replace(/[*?[\]\\]/g, "\\$&")}sub:*`;
  }

  /** The principal and session of a `session()` key, or undefined when it is not one. */
  parseSession(key: string): { principal: string; sessionId: string } | undefined {
    const head = `${this.prefix}sub:`;
    if (!key.startsWith(head)) return undefined;
    const [principal, sessionId, extra] = key.slice(head.length).split(":");
    if (principal === undefined || sessionId === undefined || extra !== undefined) return undefined;
    try {
      return { principal: decodeURIComponent(principal), sessionId: decodeURIComponent(sessionId) };
    } catch {
      return undefined;
    }
  }

  /** Set of the `session()` keys of one principal's sessions that hold something (the audit recounts from it). */
  principalSessions(principal: string): string {
    return `${this.prefix}sub-sessions:${encodeURIComponent(principal)}`;
  }

  /** Set of the principals that hold something. */
  principals(): string {
    return `${this.prefix}sub-principals`;
  }

  /** Hash principal → subscriptions held. */
  principalCounts(): string {
    return `${this.prefix}sub-count:principal`;
  }

  /** Subscriptions held cluster-wide. */
  total(): string {
    return `${this.prefix}sub-count:total`;
  }

  /** Hash uri → subscriber count, one per backend: the desired upstream set. */
  refcounts(backendId: string): string {
    return `${this.prefix}refs:${backendId}`;
  }

  /**
   * Hash of one backend's watch marks: uri → 1 while its watcher watches it upstream (set by the
   * watcher; removed by the first subscriber's add, and by the release check that finds nobody
   * subscribed, in one step with it). A subscribe that is not the first and finds the mark skips
   * asking the watcher.
   */
  watchMarks(backendId: string): string {
    return `${this.prefix}watching:${backendId}`;
  }

  /** Hash of one legacy session's record (see `SessionStore`), under its principal. */
  sessionRecord(principal: string, sessionId: string): string {
    return `${this.prefix}session:${encodeURIComponent(principal)}:${encodeURIComponent(sessionId)}`;
  }

  /** Set of the sessions (records) one member holds, as JSON `[principal, sessionId, …]`. */
  instanceRecords(instanceId: string): string {
    return `${this.prefix}instance-records:${instanceId}`;
  }

  /** Sorted set of the sessions no member holds, by when their records expire (ms). */
  orphans(): string {
    return `${this.prefix}orphans`;
  }

  /** Set of instance ids that have heartbeaten (dead ones until they are reaped). */
  instances(): string {
    return `${this.prefix}instances`;
  }

  /** An instance's heartbeat: it exists while the instance is alive. */
  instance(instanceId: string): string {
    return `${this.prefix}instance:${instanceId}`;
  }

  /**
   * An instance the cluster claimed as dead (see `RedisRegistry.claimInstance`): its next heartbeat
   * tells it so. Kept `REAPED_MARK_MS`.
   */
  instanceReaped(instanceId: string): string {
    return `${this.prefix}instance-reaped:${instanceId}`;
  }

  /** The sequence number of an instance's last heartbeat: one it does not find as it wrote it says Redis lost writes. */
  instanceSequence(instanceId: string): string {
    return `${this.prefix}instance-sequence:${instanceId}`;
  }

  /** Hash of the instances seen without a heartbeat: instance id → when first seen so (Redis time, ms). */
  suspects(): string {
    return `${this.prefix}suspects`;
  }

  /** Set of JSON `[principal, sessionId]` of an instance's sessions that hold subscriptions. */
  instanceSessions(instanceId: string): string {
    return `${this.prefix}instance-sessions:${instanceId}`;
  }

  lease(name: string): string {
    return `${this.prefix}lease:${name}`;
  }

  /** Lease `name`'s last holder, which keeps the first claim on it for a while after it lapsed (see `RedisLeases`). */
  leaseLastHolder(name: string): string {
    return `${this.prefix}lease-last:${name}`;
  }

  /** Sorted set of the preferred members (workers) competing for lease `name`, by until when their registration holds (ms). */
  preferredHolders(name: string): string {
    return `${this.prefix}lease-preferred:${name}`;
  }

  /** Hash of one backend's stored list of one kind: version, position, body. */
  catalogList(backendId: string, kind: string): string {
    return `${this.prefix}catalog:${backendId}:${kind}`;
  }

  /** Hash of one backend's update stamps: `u<key>` its last update's position, `t<key>` its time, `s<key>` its watch's start. */
  stamps(backendId: string): string {
    return `${this.prefix}stamps:${backendId}`;
  }

  /** The cluster's event position counter (resource updates and catalog changes). */
  positions(): string {
    return `${this.prefix}position`;
  }

  /** The highest position the counter was raised to after Redis lost it: positions up to it may have been handed out twice. */
  positionsLost(): string {
    return `${this.prefix}position-lost`;
  }

  /** This cluster's id (set by the first member that starts): resume cursors name the cluster they come from. */
  cluster(): string {
    return `${this.prefix}cluster`;
  }

  /** A secret the cluster's members share (drawn by the first member that starts): it seals what clients hand back to any member. */
  sharedSecret(): string {
    return `${this.prefix}shared-secret`;
  }

  /**
   * A name for this incarnation of the cluster's state: set by the first member, again after Redis
   * lost its data. A member that finds another than it knew writes back what it holds.
   */
  generation(): string {
    return `${this.prefix}generation`;
  }

  /** BullMQ's own prefix: it lays out its keys below it, as `<jobs()>:<queue>:...`. */
  jobs(): string {
    return `${this.prefix}bull`;
  }
}

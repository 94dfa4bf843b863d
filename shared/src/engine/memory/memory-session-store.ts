import type { Clock } from "../../clock.js";
import { MAX_NOTICES, type NewSession, type SessionKey, type SessionRecord, type SessionStore } from "../session-store.js";

const keyOf = (key: SessionKey): string => `${key.principal}\u0000${key.sessionId}`;

/** The session store of one process (there is no other member to adopt a session, but the rules are the same). */
export class MemorySessionStore implements SessionStore {
  private readonly records = new Map<string, SessionRecord>();
  /** Notices for the next holder of a session nobody holds, by key. */
  private readonly notices = new Map<string, string[]>();
  /** Sessions let go, by key: when their record expires. */
  private readonly letGoUntil = new Map<string, number>();
  /** Expired sessions whose holdings are not known to be released yet, and when to return each again. */
  private readonly unreleased = new Map<string, { key: SessionKey; due: number }>();

  constructor(private readonly clock: Clock) {}

  async create(session: NewSession, owner: string, now: number, epoch = 1): Promise<void> {
    this.records.set(keyOf(session), { ...structuredClone(session), owner, epoch, lastSeen: now });
  }

  /** A copy of the record (its client info and capabilities are shared: they never change after create, which cloned them). */
  async get(key: SessionKey): Promise<SessionRecord | undefined> {
    const record = this.live(key);
    return record === undefined ? undefined : { ...record };
  }

  async adopt(key: SessionKey, owner: string, now: number): Promise<{ record: SessionRecord; previous: string | undefined; notices: string[] } | undefined> {
    const record = this.live(key);
    if (record === undefined) return undefined;
    const previous = record.owner === "" || record.owner === owner ? undefined : record.owner;
    record.owner = owner;
    record.epoch++;
    record.lastSeen = now;
    this.letGoUntil.delete(keyOf(key));
    const notices = this.notices.get(keyOf(key)) ?? [];
    this.notices.delete(keyOf(key));
    return { record: structuredClone(record), previous, notices };
  }

  async remind(key: SessionKey, notice: string): Promise<boolean> {
    const record = this.live(key);
    if (record === undefined || record.owner !== "") return false;
    const kept = [...(this.notices.get(keyOf(key)) ?? []), notice].slice(-MAX_NOTICES);
    this.notices.set(keyOf(key), kept);
    return true;
  }

  async touch(key: SessionKey, now: number): Promise<void> {
    const record = this.live(key);
    if (record !== undefined) record.lastSeen = now;
  }

  async setLogLevel(key: SessionKey, level: string): Promise<void> {
    const record = this.live(key);
    if (record !== undefined) record.logLevel = level;
  }

  async delete(key: SessionKey): Promise<void> {
    this.records.delete(keyOf(key));
    this.notices.delete(keyOf(key));
    this.letGoUntil.delete(keyOf(key));
  }

  async letGo(key: SessionKey, owner: string, epoch: number, idleMs: number): Promise<void> {
    const record = this.live(key);
    if (record === undefined || record.owner !== owner || record.epoch !== epoch) return;
    record.owner = "";
    this.letGoUntil.set(keyOf(key), this.clock.now() + idleMs);
  }

  async orphan(owner: string, idleMs: number): Promise<SessionKey[]> {
    const orphaned: SessionKey[] = [];
    for (const record of this.records.values()) {
      if (record.owner !== owner) continue;
      record.owner = "";
      this.letGoUntil.set(keyOf(record), this.clock.now() + idleMs);
      orphaned.push({ principal: record.principal, sessionId: record.sessionId });
    }
    return orphaned;
  }

  async expired(now: number, retryMs: number): Promise<SessionKey[]> {
    for (const [key, until] of this.letGoUntil) {
      if (until > now) continue;
      const record = this.records.get(key);
      this.records.delete(key);
      this.letGoUntil.delete(key);
      if (record !== undefined) this.unreleased.set(key, { key: { principal: record.principal, sessionId: record.sessionId }, due: now });
    }
    const gone: SessionKey[] = [];
    for (const entry of this.unreleased.values()) {
      if (entry.due > now) continue;
      entry.due = now + retryMs;
      gone.push(entry.key);
    }
    return gone;
  }

  async released(key: SessionKey): Promise<void> {
    this.unreleased.delete(keyOf(key));
  }

  async close(): Promise<void> {}

  /** The record unless it expired (let go, and not adopted in time). */
  private live(key: SessionKey): SessionRecord | undefined {
    const until = this.letGoUntil.get(keyOf(key));
    if (until !== undefined && until <= this.clock.now()) return undefined;
    return this.records.get(keyOf(key));
  }
}

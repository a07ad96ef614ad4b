/**
 * `EventSequencer`: per-worker ordering and gap detection for KV events.
 *
 * Each worker numbers its events 0, 1, 2, … without gaps. The sequencer releases events to
 * the index strictly in that order and decides, as data, what to ask the worker for:
 *
 *   first sight of a worker ─▶ request_dump; buffer live events until the dump arrives
 *   id == next               ─▶ ready (and drain any buffered successors)
 *   id <  next               ─▶ duplicate, dropped
 *   id >  next               ─▶ buffered; request_replay of exactly [next, lowest buffered − 1]
 *   replay answered too_old  ─▶ request_dump
 *   buffer over its bound    ─▶ request_dump (drop the oldest buffered events)
 *   request unanswered       ─▶ tick(nowMs) re-asks after retryAfterMs; replays escalate to a dump
 *
 * A dump carries `nextEventId`: it reflects events [0, nextEventId), so buffered events from
 * nextEventId on are applied right after it.
 */
import type { InstanceId, KvEvent } from '../proto/wire.js';
import type { RecoveryAction } from './recovery-protocol.js';

export interface EventSequencerOptions {
  /** Out-of-order events held per worker before giving up on replay and asking for a dump. */
  maxBufferedEvents: number;
  /** Re-issue an unanswered replay/dump request after this long. */
  retryAfterMs: number;
  /** Replay attempts for one gap before escalating to a dump. */
  maxReplayAttempts: number;
}

export const DEFAULT_SEQUENCER_OPTIONS: EventSequencerOptions = {
  maxBufferedEvents: 4096,
  retryAfterMs: 2_000,
  maxReplayAttempts: 2,
};

/** Events to apply now, in order, and requests to send. */
export interface SequencerStep {
  ready: KvEvent[];
  actions: RecoveryAction[];
}

export interface DumpVerdict extends SequencerStep {
  /** False when the dump is older than what was already applied: ignore it. */
  accepted: boolean;
}

export interface SequencerStats {
  gapsDetected: number;
  gapsRecovered: number;
  dumpsRequested: number;
  duplicatesDropped: number;
  bufferedEvents: number;
}

type Pending =
  | { kind: 'replay'; from: number; to: number; sentAtMs: number; attempts: number }
  | { kind: 'dump'; sentAtMs: number };

interface WorkerTrack {
  phase: 'awaiting_dump' | 'live';
  /** Next event id to apply; meaningful while live. */
  next: number;
  buffer: Map<number, KvEvent>;
  pending: Pending | undefined;
}

export class EventSequencer {
  private readonly tracks = new Map<InstanceId, WorkerTrack>();
  private readonly counters = { gapsDetected: 0, gapsRecovered: 0, dumpsRequested: 0, duplicatesDropped: 0 };
  private readonly options: EventSequencerOptions;

  constructor(options: Partial<EventSequencerOptions> = {}) {
    this.options = { ...DEFAULT_SEQUENCER_OPTIONS, ...options };
  }

  /** A worker appeared (discovery): ask for its full state unless already tracked. */
  discover(workerId: InstanceId, nowMs: number): RecoveryAction[] {
    if (this.tracks.has(workerId)) return [];
    return [this.startDump(this.newTrack(workerId), workerId, nowMs)];
  }

  /** One event from the event plane (live or replayed). */
  accept(event: KvEvent, nowMs: number): SequencerStep {
    const step: SequencerStep = { ready: [], actions: [] };
    let track = this.tracks.get(event.workerId);
    if (track === undefined) {
      track = this.newTrack(event.workerId);
      step.actions.push(this.startDump(track, event.workerId, nowMs));
    }
    if (track.phase === 'awaiting_dump') {
      this.buffer(track, event);
      return step;
    }
    if (event.eventId < track.next) {
      this.counters.duplicatesDropped++;
      return step;
    }
    if (event.eventId === track.next) {
      step.ready.push(event);
      track.next++;
      this.drain(track, step.ready);
    } else if (!track.buffer.has(event.eventId)) {
      this.buffer(track, event);
      if (track.buffer.size > this.options.maxBufferedEvents) {
        step.actions.push(this.startDump(track, event.workerId, nowMs));
        return step;
      }
    }
    this.followGap(track, event.workerId, nowMs, step.actions);
    return step;
  }

  /** A dump arrived. When accepted, load it into the index first, then apply `ready`. */
  acceptDump(workerId: InstanceId, nextEventId: number, nowMs: number): DumpVerdict {
    const verdict: DumpVerdict = { accepted: false, ready: [], actions: [] };
    let track = this.tracks.get(workerId);
    if (track === undefined) track = this.newTrack(workerId);
    else if (track.phase === 'live' && nextEventId < track.next) return verdict;
    verdict.accepted = true;
    track.phase = 'live';
    track.next = nextEventId;
    track.pending = undefined;
    for (const id of track.buffer.keys()) if (id < nextEventId) track.buffer.delete(id);
    this.drain(track, verdict.ready);
    this.followGap(track, workerId, nowMs, verdict.actions);
    return verdict;
  }

  /** The worker no longer has the range we asked for. */
  replayTooOld(workerId: InstanceId, nowMs: number): RecoveryAction[] {
    const track = this.tracks.get(workerId) ?? this.newTrack(workerId);
    return [this.startDump(track, workerId, nowMs)];
  }

  /** Re-ask for requests that went unanswered; replays that keep failing become dumps. */
  tick(nowMs: number): RecoveryAction[] {
    const actions: RecoveryAction[] = [];
    for (const [workerId, track] of this.tracks) {
      const p = track.pending;
      if (p === undefined || nowMs - p.sentAtMs < this.options.retryAfterMs) continue;
      if (p.kind === 'dump') {
        p.sentAtMs = nowMs;
        this.counters.dumpsRequested++;
        actions.push({ type: 'request_dump', workerId });
      } else if (p.attempts >= this.options.maxReplayAttempts) {
        actions.push(this.startDump(track, workerId, nowMs));
      } else {
        p.attempts++;
        p.sentAtMs = nowMs;
        actions.push({ type: 'request_replay', workerId, fromEventId: p.from, toEventId: p.to });
      }
    }
    return actions;
  }

  forget(workerId: InstanceId): void {
    this.tracks.delete(workerId);
  }

  /** Next event id expected from `workerId`; undefined until its dump is in. */
  nextEventId(workerId: InstanceId): number | undefined {
    const t = this.tracks.get(workerId);
    return t !== undefined && t.phase === 'live' ? t.next : undefined;
  }

  stats(): SequencerStats {
    let buffered = 0;
    for (const t of this.tracks.values()) buffered += t.buffer.size;
    return { ...this.counters, bufferedEvents: buffered };
  }

  private newTrack(workerId: InstanceId): WorkerTrack {
    const track: WorkerTrack = { phase: 'awaiting_dump', next: 0, buffer: new Map(), pending: undefined };
    this.tracks.set(workerId, track);
    return track;
  }

  private startDump(track: WorkerTrack, workerId: InstanceId, nowMs: number): RecoveryAction {
    track.phase = 'awaiting_dump';
    track.pending = { kind: 'dump', sentAtMs: nowMs };
    this.counters.dumpsRequested++;
    return { type: 'request_dump', workerId };
  }

  private buffer(track: WorkerTrack, event: KvEvent): void {
    track.buffer.set(event.eventId, event);
    if (track.phase === 'awaiting_dump' && track.buffer.size > this.options.maxBufferedEvents) {
      // Keep the newest: a dump will cover everything older.
      track.buffer.delete(minKey(track.buffer));
    }
  }

  private drain(track: WorkerTrack, ready: KvEvent[]): void {
    for (;;) {
      const e = track.buffer.get(track.next);
      if (e === undefined) return;
      track.buffer.delete(track.next);
      ready.push(e);
      track.next++;
    }
  }

  /** After progress: close a satisfied replay, and ask for the next missing range if any. */
  private followGap(track: WorkerTrack, workerId: InstanceId, nowMs: number, actions: RecoveryAction[]): void {
    const p = track.pending;
    if (p !== undefined && p.kind === 'replay' && track.next > p.to) {
      track.pending = undefined;
      this.counters.gapsRecovered++;
    }
    if (track.pending !== undefined || track.buffer.size === 0) return;
    const to = minKey(track.buffer) - 1;
    track.pending = { kind: 'replay', from: track.next, to, sentAtMs: nowMs, attempts: 1 };
    this.counters.gapsDetected++;
    actions.push({ type: 'request_replay', workerId, fromEventId: track.next, toEventId: to });
  }
}

function minKey(map: Map<number, unknown>): number {
  let min = Infinity;
  for (const k of map.keys()) if (k < min) min = k;
  return min;
}

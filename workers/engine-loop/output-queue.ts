/**
 * Per-request output mailbox between the step loop (producer) and the request's stream
 * (consumer). It holds at most one pending delta: tokens that arrive while the consumer is busy
 * merge into it, so a slow consumer gets fewer, larger deltas and memory stays bounded by the
 * request's own output length.
 */
import type { FinishReason, TokenDelta, TokenLogprob } from '../../proto/wire.js';
import type { Usage } from '../scheduler/types.js';

export class OutputQueue {
  private tokenIds: number[] = [];
  private logprobs: TokenLogprob[] | undefined;
  private finishReason: FinishReason | undefined;
  private usage: Usage | undefined;
  private error: Error | undefined;
  private promptUsage: Usage | undefined;
  private promptUsageSent = false;
  private waiter: (() => void) | undefined;
  /** Set once the final delta (or the error) has been handed to the consumer. */
  private closed = false;
  /** Deltas handed out; with coalescing this is at most the number of tokens + 1. */
  numDeltas = 0;

  get isTerminal(): boolean {
    return this.finishReason !== undefined || this.error !== undefined;
  }
  get isClosed(): boolean {
    return this.closed;
  }

  push(tokenId: number, logprob?: TokenLogprob): void {
    if (this.isTerminal) return;
    this.tokenIds.push(tokenId);
    if (logprob !== undefined) (this.logprobs ??= []).push(logprob);
    this.wake();
  }

  get hasPromptUsage(): boolean {
    return this.promptUsage !== undefined;
  }

  /** Usage known once the prompt is scheduled; it rides on the first delta handed out. */
  setPromptUsage(usage: Usage): void {
    this.promptUsage = usage;
  }

  finish(reason: FinishReason, usage: Usage): void {
    if (this.isTerminal) return;
    this.finishReason = reason;
    this.usage = usage;
    this.wake();
  }

  fail(error: Error): void {
    if (this.isTerminal) return;
    this.error = error;
    this.wake();
  }

  /** Waits for pending tokens or the end, then takes everything pending as one delta. */
  async next(): Promise<TokenDelta> {
    while (this.tokenIds.length === 0 && !this.isTerminal) {
      await new Promise<void>((resolve) => (this.waiter = resolve));
    }
    if (this.error !== undefined && this.tokenIds.length === 0) {
      this.closed = true;
      throw this.error;
    }
    const delta: TokenDelta = { tokenIds: this.tokenIds };
    this.tokenIds = [];
    if (this.logprobs !== undefined) {
      delta.logprobs = this.logprobs;
      this.logprobs = undefined;
    }
    if (!this.promptUsageSent && this.promptUsage !== undefined) {
      delta.usage = this.promptUsage;
      this.promptUsageSent = true;
    }
    if (this.finishReason !== undefined && this.error === undefined) {
      delta.finishReason = this.finishReason;
      delta.usage = this.usage!;
      this.closed = true;
    }
    this.numDeltas++;
    return delta;
  }

  private wake(): void {
    const w = this.waiter;
    this.waiter = undefined;
    w?.();
  }
}

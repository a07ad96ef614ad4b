/**
 * The peer's view of our RST_STREAMs on one HTTP/2 connection, mirrored on our side.
 *
 * Since CVE-2023-44487 ("rapid reset") nghttp2, and so every Node HTTP/2 server including
 * grpc-js's, counts the RST_STREAM frames a client sends on a session in a token bucket: a
 * burst of 1000, refilled at 33 per whole second. The frame that finds the bucket empty makes
 * the server send GOAWAY(INTERNAL_ERROR), and every stream on the connection fails ("Received
 * RST_STREAM with code 2 … Session closed with error code 2"). Node 20 cannot change those
 * numbers (`streamResetBurst`/`streamResetRate` arrived later, and grpc-js passes neither).
 *
 * A cancel is still how a caller frees a worker's sequence, so the client keeps the same
 * bucket per connection: it spends a token per cancel, moves new calls off a connection whose
 * bucket runs low (channel-pool.ts), and never sends the frame that would close it.
 *
 * Pure: the caller passes the time. Worked example with the defaults: 967 cancels at t=0 leave
 * 33 tokens, the reserve, so the 968th is refused; at t=2.5 s the bucket holds 33 + 2 × 33 = 99
 * (nghttp2 refills per whole elapsed second) and 66 more may go.
 */

export interface ResetBudgetLimits {
  /** Bucket size: cancels allowed in one burst (nghttp2: 1000). */
  burst: number;
  /** Tokens added per whole second (nghttp2: 33). */
  ratePerSecond: number;
}

export const NGHTTP2_RESET_LIMITS: ResetBudgetLimits = { burst: 1000, ratePerSecond: 33 };

export class ResetBudget {
  private tokens: number;
  private lastSecond: number;

  constructor(
    readonly limits: ResetBudgetLimits = NGHTTP2_RESET_LIMITS,
    nowMs = 0,
  ) {
    this.tokens = limits.burst;
    this.lastSecond = Math.floor(nowMs / 1000);
  }

  /** Tokens left now. */
  available(nowMs: number): number {
    this.refill(nowMs);
    return this.tokens;
  }

  /**
   * Spend one token for a RST_STREAM; false (nothing spent) when the peer might close the
   * connection. One second's refill stays in reserve: our second boundaries are not the
   * peer's, so we may credit a refill up to a second before it does.
   */
  take(nowMs: number): boolean {
    this.refill(nowMs);
    if (this.tokens <= this.limits.ratePerSecond) return false;
    this.tokens -= 1;
    return true;
  }

  private refill(nowMs: number): void {
    const second = Math.floor(nowMs / 1000);
    if (second <= this.lastSecond) return;
    this.tokens = Math.min(this.limits.burst, this.tokens + (second - this.lastSecond) * this.limits.ratePerSecond);
    this.lastSecond = second;
  }
}

/**
 * Bounds the number of generation requests in flight in this frontend. Admission is a check
 * and a book in one call, so there is one mutation path; every admitted request releases once.
 */
export class AdmissionGate {
  private count = 0;

  constructor(readonly maxInflight: number) {}

  get inflight(): number {
    return this.count;
  }

  /** Book a slot if one is free. False means "answer 503 with Retry-After". */
  tryAdmit(): boolean {
    if (this.count >= this.maxInflight) return false;
    this.count += 1;
    return true;
  }

  release(): void {
    if (this.count > 0) this.count -= 1;
  }
}

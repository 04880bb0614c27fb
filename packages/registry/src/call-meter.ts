/**
 * What a call used that only its tool sees as it runs — the bytes a network-enabled sandbox
 * sends and receives through the egress proxy — kept per call by the worker and read once, as
 * the call ends, for its budget charge (docs/budgets.md).
 */
export class CallMeter {
  private egress = 0;
  private taken = false;

  /** Payload bytes relayed for this call, either way. Ignored once the call's use was taken. */
  addEgress(bytes: number): void {
    if (!this.taken && Number.isFinite(bytes) && bytes > 0) this.egress += bytes;
  }

  /**
   * The call's use, once: later calls get zeros, so a call is never charged twice, and bytes a
   * cancelled call's sandbox relays after its end are not added to anything.
   */
  take(): { egressBytes: number } {
    if (this.taken) return { egressBytes: 0 };
    this.taken = true;
    return { egressBytes: this.egress };
  }
}

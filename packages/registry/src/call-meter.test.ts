import { describe, expect, it } from 'vitest';
import { CallMeter } from './call-meter.js';

describe('CallMeter', () => {
  it('gives a call its egress bytes once; what comes after the take is charged to nothing', () => {
    const meter = new CallMeter();
    meter.addEgress(1000);
    meter.addEgress(24);
    meter.addEgress(-5);
    meter.addEgress(Number.NaN);
    expect(meter.take()).toEqual({ egressBytes: 1024 });
    // A cancelled call's sandbox still relaying, or a second take: never charged twice.
    meter.addEgress(500);
    expect(meter.take()).toEqual({ egressBytes: 0 });
  });
});

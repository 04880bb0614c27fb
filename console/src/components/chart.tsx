/**
 * A uPlot time-series chart. uPlot styles its elements through the CSSOM (`el.style.x = …`),
 * which the console's CSP (style-src 'self', no inline styles) allows.
 */
import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';

const COLORS = ['#2563eb', '#dc2626', '#16a34a', '#d97706', '#7c3aed', '#0891b2', '#db2777'];

export interface Line {
  label: string;
  values: (number | null)[];
}

export function Chart(props: {
  title: string;
  /** Unix seconds, one per point. */
  x: number[];
  lines: Line[];
  unit: string;
  /** Said to screen readers instead of the picture. */
  summary: string;
}) {
  const box = useRef<HTMLDivElement>(null);
  useEffect(() => {
    const el = box.current;
    if (!el) return undefined;
    const width = () => Math.max(240, el.clientWidth);
    const plot = new uPlot(
      {
        width: width(),
        height: 200,
        legend: { show: true },
        scales: {
          x: { time: true },
          // From 0, with headroom; an empty chart still gets an axis.
          y: { range: (_u, _min, max) => [0, max > 0 ? max * 1.15 : 1] },
        },
        axes: [{}, { label: props.unit, size: 60 }],
        series: [
          {},
          ...props.lines.map((l, i) => ({
            label: l.label,
            stroke: COLORS[i % COLORS.length],
            width: 2,
            // A minute with no call is a gap; a lone minute still shows as a dot.
            spanGaps: false,
            points: { show: true, size: 5 },
          })),
        ],
      },
      [props.x, ...props.lines.map((l) => l.values)] as uPlot.AlignedData,
      el,
    );
    const resize = new ResizeObserver(() => plot.setSize({ width: width(), height: 200 }));
    resize.observe(el);
    return () => {
      resize.disconnect();
      plot.destroy();
    };
  }, [props.x, props.lines, props.unit]);

  return (
    <figure class="chart">
      <figcaption>{props.title}</figcaption>
      <div ref={box} role="img" aria-label={`${props.title}: ${props.summary}`} />
    </figure>
  );
}

// A thin ECharts wrapper: one instance per element, option replaced on change, resized with its
// box, disposed on unmount. Only the chart types the UI uses are bundled.
import { BarChart, LineChart, PieChart } from "echarts/charts";
import {
  DataZoomComponent,
  GridComponent,
  LegendComponent,
  MarkAreaComponent,
  MarkLineComponent,
  TooltipComponent,
} from "echarts/components";
import * as echarts from "echarts/core";
import { SVGRenderer } from "echarts/renderers";
import { useEffect, useRef } from "react";

import type { EChartsCoreOption } from "echarts/core";

echarts.use([
  BarChart,
  LineChart,
  PieChart,
  GridComponent,
  TooltipComponent,
  LegendComponent,
  DataZoomComponent,
  MarkLineComponent,
  MarkAreaComponent,
  SVGRenderer,
]);

export type ChartOption = EChartsCoreOption;

interface Props {
  option: ChartOption;
  height?: number;
  /** What the chart shows, for screen readers (the numbers are also in a table or the tooltip). */
  label: string;
  onClick?: (params: { dataIndex: number; seriesName?: string; name?: string }) => void;
  /** How many points along the x axis (kept on the element, for tests and assistive tech). */
  points?: number;
}

export function EChart({ option, height = 260, label, onClick, points }: Props) {
  const ref = useRef<HTMLDivElement>(null);
  const chart = useRef<echarts.ECharts | null>(null);
  const clickRef = useRef(onClick);
  clickRef.current = onClick;

  useEffect(() => {
    if (!ref.current) return;
    const instance = echarts.init(ref.current, undefined, { renderer: "svg" });
    chart.current = instance;
    instance.on("click", (p) => clickRef.current?.(p as never));
    const observer = new ResizeObserver(() => instance.resize());
    observer.observe(ref.current);
    return () => {
      observer.disconnect();
      instance.dispose();
      chart.current = null;
    };
  }, []);

  useEffect(() => {
    chart.current?.setOption(option, { notMerge: true, lazyUpdate: true });
  }, [option]);

  return <div ref={ref} className={`chart${onClick ? " chart-clickable" : ""}`} style={{ height }} role="img" aria-label={label} data-points={points} />;
}

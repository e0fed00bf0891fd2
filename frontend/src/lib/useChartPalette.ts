import { chartPalette, useTheme, type ChartPalette } from "./theme";

export function useChartPalette(): ChartPalette {
  return chartPalette(useTheme().theme);
}

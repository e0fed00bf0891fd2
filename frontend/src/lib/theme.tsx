import { createContext, useCallback, useContext, useEffect, useMemo, useState, type ReactNode } from "react";

export type Theme = "light" | "dark";
const STORAGE_KEY = "phantomhub.theme";

function systemTheme(): Theme {
  return typeof window !== "undefined" && window.matchMedia?.("(prefers-color-scheme: dark)").matches ? "dark" : "light";
}

function savedTheme(): Theme | null {
  try {
    const v = localStorage.getItem(STORAGE_KEY);
    return v === "dark" || v === "light" ? v : null;
  } catch {
    return null;
  }
}

interface ThemeContextValue {
  theme: Theme;
  /** True when the theme follows the operating system (no explicit choice saved). */
  followsSystem: boolean;
  toggle: () => void;
}

const ThemeContext = createContext<ThemeContextValue>({ theme: "light", followsSystem: true, toggle: () => {} });

export function ThemeProvider({ children }: { children: ReactNode }) {
  const [saved, setSaved] = useState<Theme | null>(savedTheme);
  const [system, setSystem] = useState<Theme>(systemTheme);
  const theme = saved ?? system;

  useEffect(() => {
    const mq = window.matchMedia?.("(prefers-color-scheme: dark)");
    if (!mq) return;
    const onChange = () => setSystem(mq.matches ? "dark" : "light");
    mq.addEventListener("change", onChange);
    return () => mq.removeEventListener("change", onChange);
  }, []);

  useEffect(() => {
    document.documentElement.dataset.theme = theme;
  }, [theme]);

  const toggle = useCallback(() => {
    const next: Theme = theme === "dark" ? "light" : "dark";
    try {
      // Choosing the system's own theme again means "follow the system" from now on.
      if (next === systemTheme()) localStorage.removeItem(STORAGE_KEY);
      else localStorage.setItem(STORAGE_KEY, next);
    } catch {
      /* private mode: the choice lasts for this page only */
    }
    setSaved(next === systemTheme() ? null : next);
  }, [theme]);

  const value = useMemo(() => ({ theme, followsSystem: saved === null, toggle }), [theme, saved, toggle]);
  return <ThemeContext.Provider value={value}>{children}</ThemeContext.Provider>;
}

export function useTheme(): ThemeContextValue {
  return useContext(ThemeContext);
}

/** Colours charts need from the theme (ECharts draws on canvas/SVG and cannot read CSS variables). */
export interface ChartPalette {
  text: string;
  muted: string;
  grid: string;
  axis: string;
  tooltipBg: string;
  tooltipBorder: string;
  accent: string;
  accent2: string;
  danger: string;
}

export function chartPalette(theme: Theme): ChartPalette {
  return theme === "dark"
    ? {
        text: "#d7dbe3",
        muted: "#8b93a3",
        grid: "#262b36",
        axis: "#3a4150",
        tooltipBg: "#1b1f28",
        tooltipBorder: "#343b49",
        accent: "#8b8cf5",
        accent2: "#36b3a8",
        danger: "#ef6f6c",
      }
    : {
        text: "#1f2430",
        muted: "#6b7386",
        grid: "#eceef3",
        axis: "#d3d7e0",
        tooltipBg: "#ffffff",
        tooltipBorder: "#dfe2ea",
        accent: "#5b5bd6",
        accent2: "#14958a",
        danger: "#d9534f",
      };
}

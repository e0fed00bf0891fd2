import { BrowserRouter, Navigate, Outlet, Route, Routes, useLocation } from "react-router";

import { SessionProvider, useSession } from "./api/session";
import { Layout } from "./components/Layout";
import { Loading } from "./components/States";
import { ThemeProvider } from "./lib/theme";
import { AuditPage } from "./pages/Audit";
import { BudgetsPage } from "./pages/Budgets";
import { ComparePage } from "./pages/Compare";
import { FinancePage } from "./pages/Finance";
import { FleetPage } from "./pages/Fleet";
import { JobPage } from "./pages/Job";
import { JobsPage } from "./pages/Jobs";
import { LeaderboardsPage } from "./pages/Leaderboards";
import { NotFoundPage } from "./pages/NotFound";
import { OverviewPage } from "./pages/Overview";
import { ProjectPage } from "./pages/Project";
import { RunDetailPage } from "./pages/RunDetail";
import { RunsPage } from "./pages/Runs";
import { SettingsPage } from "./pages/Settings";
import { SignInPage } from "./pages/SignIn";
import { TeamPage } from "./pages/Team";

function RequireSession() {
  const { user } = useSession();
  const location = useLocation();
  if (user === undefined) {
    return (
      <div className="boot">
        <Loading label="Checking your session…" />
      </div>
    );
  }
  if (user === null) {
    const next = location.pathname + location.search;
    return <Navigate to={next === "/" ? "/login" : `/login?next=${encodeURIComponent(next)}`} replace />;
  }
  return <Outlet />;
}

export function AppRoutes() {
  return (
    <Routes>
      <Route path="/login" element={<SignInPage />} />
      <Route element={<RequireSession />}>
        <Route element={<Layout />}>
          <Route index element={<OverviewPage />} />
          <Route path="leaderboards" element={<LeaderboardsPage />} />
          <Route path="runs" element={<RunsPage />} />
          <Route path="runs/:id" element={<RunDetailPage />} />
          <Route path="compare" element={<ComparePage />} />
          <Route path="jobs" element={<JobsPage />} />
          <Route path="jobs/:id" element={<JobPage />} />
          <Route path="teams/:slug" element={<TeamPage />} />
          <Route path="projects/:slug" element={<ProjectPage />} />
          <Route path="finance" element={<FinancePage />} />
          <Route path="budgets" element={<BudgetsPage />} />
          <Route path="fleet" element={<FleetPage />} />
          <Route path="settings" element={<SettingsPage />} />
          <Route path="audit" element={<AuditPage />} />
          <Route path="*" element={<NotFoundPage />} />
        </Route>
      </Route>
      <Route path="*" element={<Navigate to="/" replace />} />
    </Routes>
  );
}

export function App() {
  return (
    <ThemeProvider>
      <SessionProvider>
        <BrowserRouter>
          <AppRoutes />
        </BrowserRouter>
      </SessionProvider>
    </ThemeProvider>
  );
}

import { NavLink, Outlet, useNavigate } from "react-router";

import { useSession } from "../api/session";
import { usePeriodLink } from "../lib/links";
import { useTheme } from "../lib/theme";
import { SavedViewsNav } from "./SavedViews";

const NAV = [
  { to: "/", label: "Overview", icon: "◴", end: true },
  { to: "/leaderboards", label: "Leaderboards", icon: "≡" },
  { to: "/runs", label: "Runs", icon: "▤" },
  { to: "/jobs", label: "Jobs", icon: "↻" },
  { to: "/fleet", label: "Fleet", icon: "▦" },
  { to: "/finance", label: "Finance", icon: "$" },
  { to: "/budgets", label: "Budgets", icon: "◫" },
  { to: "/settings", label: "Settings", icon: "⚙" },
];
// Shown to organization admins and finance people only: the people who may read the audit log.
const AUDIT_NAV = { to: "/audit", label: "Audit log", icon: "§" };

export function Logo() {
  return (
    <span className="logo">
      <svg viewBox="0 0 32 32" width="22" height="22" aria-hidden="true">
        <rect width="32" height="32" rx="7" fill="var(--accent)" />
        <path d="M10 24V8h7a5 5 0 0 1 0 10h-3.5" fill="none" stroke="#fff" strokeWidth="3" strokeLinecap="round" strokeLinejoin="round" />
        <circle cx="13.5" cy="22.5" r="1.8" fill="#fff" />
      </svg>
      <span>PhantomHub</span>
    </span>
  );
}

export function ThemeToggle() {
  const { theme, toggle } = useTheme();
  return (
    <button type="button" className="btn btn-ghost btn-icon" onClick={toggle} aria-label={theme === "dark" ? "Switch to light theme" : "Switch to dark theme"} title={theme === "dark" ? "Light theme" : "Dark theme"}>
      {theme === "dark" ? "☀" : "☾"}
    </button>
  );
}

/**
 * The sidebar carries the period being read onto every page it links to. On narrow screens it
 * folds into a rail of icons (names stay as accessible names and tooltips), leaving the width to
 * the tables.
 */
export function Layout() {
  const { user, signOut } = useSession();
  const navigate = useNavigate();
  const { link } = usePeriodLink();
  return (
    <div className="app">
      <a className="skip-link" href="#main">
        Skip to content
      </a>
      <aside className="sidebar">
        <div className="sidebar-inner">
        <div className="sidebar-top">
          <Logo />
        </div>
        <nav className="nav" aria-label="Main">
          {NAV.map((item) => (
            <NavLink key={item.to} to={link(item.to)} end={item.end} title={item.label} className={({ isActive }) => `nav-item${isActive ? " is-active" : ""}`}>
              <span className="nav-icon" aria-hidden="true">
                {item.icon}
              </span>
              <span className="nav-label">{item.label}</span>
            </NavLink>
          ))}
          {(user?.is_org_admin || user?.is_finance) && (
            <NavLink to={AUDIT_NAV.to} title={AUDIT_NAV.label} className={({ isActive }) => `nav-item${isActive ? " is-active" : ""}`}>
              <span className="nav-icon" aria-hidden="true">
                {AUDIT_NAV.icon}
              </span>
              <span className="nav-label">{AUDIT_NAV.label}</span>
            </NavLink>
          )}
        </nav>
        {user && user.teams.length > 0 && (
          <nav className="nav nav-secondary" aria-label="Your teams">
            <div className="nav-heading">Your teams</div>
            {user.teams.map((t) => (
              <NavLink key={t.slug} to={link(`/teams/${encodeURIComponent(t.slug)}`)} title={t.name} className={({ isActive }) => `nav-item${isActive ? " is-active" : ""}`}>
                <span className="nav-icon team-initial" aria-hidden="true">
                  {t.name.slice(0, 1).toUpperCase()}
                </span>
                <span className="nav-label">{t.name}</span>
              </NavLink>
            ))}
          </nav>
        )}
        {user && <SavedViewsNav />}
        <div className="sidebar-bottom">
          {user && (
            <div className="user-chip" title={user.username}>
              <span className="avatar" aria-hidden="true">
                {user.username.slice(0, 1).toUpperCase()}
              </span>
              <span className="user-meta">
                <span className="user-name">{user.username}</span>
                <span className="user-role">{user.is_org_admin ? "Admin" : user.is_finance ? "Finance" : "Member"}</span>
              </span>
            </div>
          )}
          <div className="sidebar-actions">
            <ThemeToggle />
            <button
              type="button"
              className="btn btn-ghost btn-small"
              title="Sign out"
              onClick={async () => {
                await signOut();
                navigate("/login");
              }}
            >
              <span className="nav-icon sign-out-icon" aria-hidden="true">
                ⇥
              </span>
              <span className="nav-label">Sign out</span>
            </button>
          </div>
        </div>
        </div>
      </aside>
      <main className="main" id="main" tabIndex={-1}>
        <Outlet />
      </main>
    </div>
  );
}

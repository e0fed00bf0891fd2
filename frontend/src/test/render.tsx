import { render } from "@testing-library/react";
import { MemoryRouter, Route, Routes, useLocation } from "react-router";

import { SessionProvider } from "../api/session";
import { ThemeProvider } from "../lib/theme";

/** The router's location, for tests that follow links and URL state. */
export function Where() {
  const location = useLocation();
  return <output data-testid="location">{location.pathname + location.search}</output>;
}

/** `element` on `path`, opened at `url`, with the session and theme the app gives it. */
export function renderAt(url: string, element: React.ReactNode, path: string) {
  return render(
    <ThemeProvider>
      <SessionProvider>
        <MemoryRouter initialEntries={[url]}>
          <Routes>
            <Route path={path} element={element} />
            <Route path="*" element={null} />
          </Routes>
          <Where />
        </MemoryRouter>
      </SessionProvider>
    </ThemeProvider>,
  );
}

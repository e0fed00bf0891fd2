import { useState } from "react";

import { apiFetch, ApiError } from "../api/client";
import { useApi } from "../api/hooks";
import { isAdmin, useSession } from "../api/session";
import type { OrgSettings } from "../api/types";
import { Async, FieldErrors } from "../components/States";
import { Card } from "../components/ui";

/**
 * Privacy: whether the "people" leaderboard exists (runs' spend summed per launcher). Off by
 * default; organization admins turn it on. Off or on, a run shows who launched it to those who
 * may see the run (docs/ui.md, "Privacy").
 */
export function PrivacyCard() {
  const { user } = useSession();
  const admin = isAdmin(user);
  const state = useApi<OrgSettings>("settings");
  const [error, setError] = useState<ApiError | null>(null);
  const [busy, setBusy] = useState(false);

  async function change(on: boolean) {
    setBusy(true);
    setError(null);
    try {
      await apiFetch("settings", { method: "PUT", body: { people_leaderboard: on } });
      state.reload();
    } catch (err) {
      setError(err instanceof ApiError ? err : new ApiError(0, "client", String(err)));
    } finally {
      setBusy(false);
    }
  }

  return (
    <Card title="Privacy" actions={!admin && <span className="muted small">read-only: organization admins change this</span>}>
      <Async state={state} loadingRows={2}>
        {(d) => (
          <div className="settings-form">
            <label className="checkbox" htmlFor="people-leaderboard">
              <input
                id="people-leaderboard"
                type="checkbox"
                checked={d.people_leaderboard === true}
                disabled={!admin || busy}
                onChange={(e) => void change(e.target.checked)}
                data-testid="people-leaderboard-toggle"
              />{" "}
              People leaderboard
            </label>
            <p className="muted small">
              {d.people_leaderboard
                ? "On: Leaderboards has a People tab ranking who launched runs by their spend. Each reader sees only the runs they may see."
                : "Off: no one is ranked by name. Runs still show who launched them to those who may see the runs."}
            </p>
            <FieldErrors error={error} />
          </div>
        )}
      </Async>
    </Card>
  );
}

import { useEffect, useState, type FormEvent } from "react";
import { useSearchParams } from "react-router";

import { apiFetch, ApiError } from "../api/client";
import { useApi } from "../api/hooks";
import { isAdmin, useSession } from "../api/session";
import type { GpuSpec, OrgSettings } from "../api/types";
import { DataTable } from "../components/DataTable";
import { Async, Empty, FieldErrors } from "../components/States";
import { Card, CategoryName, PageHeader, Segmented } from "../components/ui";
import { CATEGORIES, CATEGORY_LABEL, isCategory } from "../lib/categories";
import { formatBytes, formatPct, isNum } from "../lib/format";
import { AttributionCard } from "./SettingsAttribution";
import { AlertsSettings } from "./SettingsAlerts";
import { IdentitySettings } from "./SettingsIdentity";
import { PricesCard } from "./SettingsPrices";
import { PrivacyCard } from "./SettingsPrivacy";
import { ReportsSettings } from "./SettingsReports";
import { TokensCard } from "./SettingsTokens";

const TABS = ["organization", "names", "tokens", "prices", "gpus", "attribution", "alerts", "reports", "people"] as const;
type Tab = (typeof TABS)[number];

export function SettingsPage() {
  const [params, setParams] = useSearchParams();
  const t = params.get("tab") ?? "";
  const tab: Tab = (TABS as readonly string[]).includes(t) ? (t as Tab) : "organization";
  return (
    <div className="page">
      <PageHeader
        title="Settings"
        subtitle="How waste is judged and priced, and who can send telemetry"
        actions={
          <Segmented
            label="Settings section"
            value={tab}
            onChange={(v) => setParams(v === "organization" ? {} : { tab: v })}
            options={[
              { value: "organization", label: "Waste model" },
              { value: "names", label: "Names" },
              { value: "tokens", label: "API tokens" },
              { value: "prices", label: "Price book" },
              { value: "gpus", label: "GPU catalog" },
              { value: "alerts", label: "Alerts" },
              { value: "reports", label: "Reports" },
              { value: "attribution", label: "Attribution" },
              { value: "people", label: "People & groups" },
            ]}
          />
        }
      />
      {tab === "organization" && <OrgSettingsCard />}
      {tab === "organization" && <PrivacyCard />}
      {tab === "names" && <NamesCard />}
      {tab === "tokens" && <TokensCard />}
      {tab === "prices" && <PricesCard />}
      {tab === "gpus" && <GpuCard />}
      {tab === "alerts" && <AlertsSettings />}
      {tab === "reports" && <ReportsSettings />}
      {tab === "attribution" && <AttributionCard />}
      {tab === "people" && <IdentitySettings />}
    </div>
  );
}

/** The API's field names (target_mfu, recoverability.data_stall) as the form labels them. */
export function settingName(field: string): string {
  if (field === "target_mfu") return "Target MFU";
  const cap = /^recoverability\.(.+)$/.exec(field);
  if (cap) return `Cap on ${isCategory(cap[1]) ? CATEGORY_LABEL[cap[1]].toLowerCase() : cap[1].replace(/_/g, " ")}`;
  return field.replace(/_/g, " ");
}

function OrgSettingsCard() {
  const { user } = useSession();
  const admin = isAdmin(user);
  const state = useApi<OrgSettings>("settings");
  const [target, setTarget] = useState("");
  const [rec, setRec] = useState<Record<string, string>>({});
  const [error, setError] = useState<ApiError | null>(null);
  const [saved, setSaved] = useState(false);
  const [busy, setBusy] = useState(false);

  useEffect(() => {
    if (!state.data) return;
    setTarget(String(state.data.target_mfu));
    setRec(Object.fromEntries(CATEGORIES.map((c) => [c, String(state.data!.recoverability[c] ?? "")])));
  }, [state.data]);

  async function save(e: FormEvent) {
    e.preventDefault();
    setBusy(true);
    setError(null);
    setSaved(false);
    try {
      await apiFetch("settings", {
        method: "PUT",
        body: { target_mfu: Number(target), recoverability: Object.fromEntries(CATEGORIES.map((c) => [c, Number(rec[c])])) },
      });
      setSaved(true);
      state.reload();
    } catch (err) {
      setError(err instanceof ApiError ? err : new ApiError(0, "client", String(err)));
    } finally {
      setBusy(false);
    }
  }

  return (
    <Card title="Waste model" actions={!admin && <span className="muted small">read-only: organization admins change these</span>}>
      <Async state={state}>
        {(d) => (
          <form className="settings-form" onSubmit={save}>
            <p className="muted">
              Useful compute is the time the target MFU would need for the FLOPs done. Recoverable spend is measured, not assumed: for each category, what the run spent beyond a level that has
              actually been achieved (the run's own best stretch, comparable runs of the project, or a target), and nothing where there is no such evidence. An organization may cap the share of
              a category that is called recoverable (default 100%); a cap only ever lowers the figure. Changes apply to analyses from now on.
            </p>
            <div className="field-row">
              <label className="field" htmlFor="target-mfu">
                <span>Target MFU</span>
                <input id="target-mfu" className="input input-num" type="number" min={0.01} max={1} step={0.01} value={target} disabled={!admin} onChange={(e) => setTarget(e.target.value)} />
              </label>
              <span className="muted small">
                {formatPct(Number(target), 0)} · default {formatPct(d.defaults.target_mfu, 0)}
              </span>
            </div>
            <table className="table table-dense">
              <caption className="visually-hidden">Cap on the recoverable share of each category</caption>
              <thead>
                <tr>
                  <th scope="col">Category</th>
                  <th scope="col">Cap on recoverable share (0–1)</th>
                  <th scope="col" className="align-right">
                    Default
                  </th>
                </tr>
              </thead>
              <tbody>
                {CATEGORIES.map((c) => (
                  <tr key={c}>
                    <td>
                      <CategoryName name={c} />
                    </td>
                    <td>
                      {c === "useful_compute" ? (
                        <span className="muted small">never recoverable: the work itself</span>
                      ) : (
                        <span className="nowrap">
                          <input
                            className={`input input-num${error?.fields[`recoverability.${c}`] ? " is-invalid" : ""}`}
                            aria-label={`Cap on the recoverable share of ${CATEGORY_LABEL[c].toLowerCase()}`}
                            type="number"
                            min={0}
                            max={1}
                            step={0.05}
                            value={rec[c] ?? ""}
                            disabled={!admin}
                            onChange={(e) => setRec((r) => ({ ...r, [c]: e.target.value }))}
                          />{" "}
                          <span className="muted small">{rec[c] !== undefined && rec[c] !== "" ? `at most ${formatPct(Number(rec[c]), 0)}` : ""}</span>
                        </span>
                      )}
                    </td>
                    <td className="align-right muted">{isNum(d.defaults.recoverability[c]) ? formatPct(d.defaults.recoverability[c], 0) : "–"}</td>
                  </tr>
                ))}
              </tbody>
            </table>
            <p className="muted small">A run silent for {Math.round(d.crash_after_s / 60)} minutes is marked crashed.</p>
            {error && Object.keys(error.fields).length > 0 ? (
              <div className="form-error" role="alert">
                {Object.entries(error.fields)
                  .map(([field, message]) => `${settingName(field)}: ${message}`)
                  .join(" ")}
              </div>
            ) : (
              <FieldErrors error={error} />
            )}
            {admin && (
              <div className="form-actions">
                <button className="btn btn-primary" type="submit" disabled={busy}>
                  {busy ? "Saving…" : "Save"}
                </button>
                <button
                  className="btn btn-ghost"
                  type="button"
                  onClick={() => {
                    setTarget(String(d.defaults.target_mfu));
                    setRec(Object.fromEntries(CATEGORIES.map((c) => [c, String(d.defaults.recoverability[c] ?? "")])));
                  }}
                >
                  Reset to defaults
                </button>
                {saved && <span className="muted small">Saved.</span>}
              </div>
            )}
          </form>
        )}
      </Async>
    </Card>
  );
}

interface TeamListing {
  slug: string;
  name: string;
  projects: { slug: string; name: string }[];
}

/** One display name: what people read for a team or project (blank shows the slug). */
function NameField({ kind, slug, name, editable, onSaved }: { kind: "team" | "project"; slug: string; name: string; editable: boolean; onSaved: () => void }) {
  const [value, setValue] = useState(name === slug ? "" : name);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);
  const [saved, setSaved] = useState(false);
  const id = `name-${kind}-${slug}`;
  const dirty = value.trim() !== (name === slug ? "" : name);
  async function save(e: FormEvent) {
    e.preventDefault();
    setBusy(true);
    setError(null);
    setSaved(false);
    try {
      await apiFetch(`${kind === "team" ? "teams" : "projects"}/${encodeURIComponent(slug)}`, { method: "PATCH", body: { display_name: value.trim() } });
      setSaved(true);
      onSaved();
    } catch (err) {
      setError(err instanceof ApiError ? err : new ApiError(0, "client", String(err)));
    } finally {
      setBusy(false);
    }
  }
  return (
    <form className="name-row" onSubmit={save}>
      <label htmlFor={id} className={kind === "team" ? "name-team" : "name-project"}>
        <code>{slug}</code>
      </label>
      <input id={id} className="input" maxLength={100} value={value} placeholder={slug} disabled={!editable || busy} aria-invalid={error ? true : undefined} onChange={(e) => setValue(e.target.value)} />
      {editable && (
        <button type="submit" className="btn btn-small" disabled={busy || !dirty}>
          Save
        </button>
      )}
      {saved && !dirty && <span className="muted small">saved</span>}
      <FieldErrors error={error} />
    </form>
  );
}

/** Display names of teams and projects: set by organization admins, and by a team's admins for theirs. */
function NamesCard() {
  const { user, refresh } = useSession();
  const state = useApi<TeamListing[]>("teams");
  const admin = isAdmin(user);
  const teamAdmin = (slug: string) => admin || !!user?.teams.some((t) => t.slug === slug && t.role === "admin");
  return (
    <Card title="Display names" actions={<span className="muted small">{admin ? "blank shows the slug" : "organization admins and a team's admins set these"}</span>}>
      <p className="muted">
        What every page calls a team or project. Slugs stay as they are in URLs, filters, tokens and the API; a blank name shows the slug.
      </p>
      <Async state={state} isEmpty={(d) => d.length === 0} empty={<Empty title="No teams you can see" />}>
        {(d) => (
          <div className="names" data-testid="names">
            {d.map((t) => (
              <fieldset key={t.slug} className="names-team">
                <legend className="visually-hidden">Team {t.slug} and its projects</legend>
                <NameField
                  kind="team"
                  slug={t.slug}
                  name={t.name}
                  editable={teamAdmin(t.slug)}
                  onSaved={() => {
                    state.reload();
                    void refresh();
                  }}
                />
                {t.projects.map((p) => (
                  <NameField key={p.slug} kind="project" slug={p.slug} name={p.name} editable={teamAdmin(t.slug)} onSaved={state.reload} />
                ))}
              </fieldset>
            ))}
          </div>
        )}
      </Async>
    </Card>
  );
}

/** "NVIDIA H200 SXM 141GB": the vendor once, even where the catalog's name already starts with it. */
export function gpuName(g: Pick<GpuSpec, "vendor" | "name">): string {
  const name = g.name.trim();
  return g.vendor && !name.toLowerCase().startsWith(g.vendor.toLowerCase()) ? `${g.vendor} ${name}` : name;
}

function GpuCard() {
  const state = useApi<GpuSpec[]>("/api/v1/pricing/gpus");
  const dtypes = Array.from(new Set((state.data ?? []).flatMap((g) => Object.keys(g.peak_tflops))));
  return (
    <Card title="GPU catalog" actions={<span className="muted small">dense peak TFLOP/s by data type, used for MFU · memory in GiB, as runs' memory is shown</span>}>
      <Async state={state} isEmpty={(d) => d.length === 0}>
        {(d) => (
          <DataTable
            caption="GPU catalog"
            dense
            rows={d}
            rowKey={(g) => g.key}
            columns={[
              { key: "key", header: "Key", render: (g) => <code>{g.key}</code> },
              { key: "name", header: "Name", render: (g) => gpuName(g) },
              { key: "mem", header: "Memory", title: "memory per GPU, in GiB", align: "right", render: (g) => formatBytes(g.memory_bytes) },
              ...dtypes.map((dt) => ({ key: dt, header: dt, align: "right" as const, render: (g: GpuSpec) => (g.peak_tflops[dt] !== undefined ? g.peak_tflops[dt].toLocaleString("en-US") : "–") })),
            ]}
          />
        )}
      </Async>
    </Card>
  );
}

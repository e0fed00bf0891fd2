import { useEffect, useState, type FormEvent } from "react";
import { useSearchParams } from "react-router";

import { apiFetch, ApiError } from "../api/client";
import { useApi } from "../api/hooks";
import { isAdmin, useSession } from "../api/session";
import type { ApiTokenRow, GpuSpec, OrgSettings, PriceEntry } from "../api/types";
import { DataTable } from "../components/DataTable";
import { Async, Empty } from "../components/States";
import { Card, CategoryName, PageHeader, Segmented } from "../components/ui";
import { CATEGORIES } from "../lib/categories";
import { formatBytes, formatDate, formatDateTime, formatPct, formatUsd } from "../lib/format";

const TABS = ["organization", "tokens", "prices", "gpus"] as const;
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
              { value: "tokens", label: "API tokens" },
              { value: "prices", label: "Price book" },
              { value: "gpus", label: "GPU catalog" },
            ]}
          />
        }
      />
      {tab === "organization" && <OrgSettingsCard />}
      {tab === "tokens" && <TokensCard />}
      {tab === "prices" && <PricesCard />}
      {tab === "gpus" && <GpuCard />}
    </div>
  );
}

function FieldErrors({ error }: { error: ApiError | null }) {
  if (!error) return null;
  return (
    <div className="form-error" role="alert">
      {error.message}
    </div>
  );
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
              Useful compute is the time the target MFU would need for the FLOPs done; recoverable spend is each category's dollars times its recoverability. Changes apply to analyses from now on.
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
              <caption className="visually-hidden">Recoverability by category</caption>
              <thead>
                <tr>
                  <th scope="col">Category</th>
                  <th scope="col">Recoverability (0–1)</th>
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
                      <input
                        className={`input input-num${error?.fields[`recoverability.${c}`] ? " is-invalid" : ""}`}
                        aria-label={`Recoverability of ${c}`}
                        type="number"
                        min={0}
                        max={1}
                        step={0.05}
                        value={rec[c] ?? ""}
                        disabled={!admin}
                        onChange={(e) => setRec((r) => ({ ...r, [c]: e.target.value }))}
                      />
                    </td>
                    <td className="align-right muted">{d.defaults.recoverability[c] ?? "–"}</td>
                  </tr>
                ))}
              </tbody>
            </table>
            <p className="muted small">A run silent for {Math.round(d.crash_after_s / 60)} minutes is marked crashed.</p>
            <FieldErrors error={error} />
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

function TokensCard() {
  const state = useApi<ApiTokenRow[]>("tokens");
  const [kind, setKind] = useState<"project" | "personal">("personal");
  const [project, setProject] = useState("");
  const [name, setName] = useState("");
  const [created, setCreated] = useState<ApiTokenRow | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  const [busy, setBusy] = useState(false);

  async function create(e: FormEvent) {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const body = kind === "personal" ? { kind, name } : { project, name };
      setCreated(await apiFetch<ApiTokenRow>("tokens", { method: "POST", body }));
      setName("");
      state.reload();
    } catch (err) {
      setError(err instanceof ApiError ? err : new ApiError(0, "client", String(err)));
    } finally {
      setBusy(false);
    }
  }

  async function revoke(id: number) {
    try {
      await apiFetch(`tokens/${id}`, { method: "DELETE" });
      state.reload();
    } catch (err) {
      setError(err instanceof ApiError ? err : new ApiError(0, "client", String(err)));
    }
  }

  return (
    <>
      <Card title="New token">
        <form className="inline-form" onSubmit={create}>
          <Segmented
            label="Token kind"
            value={kind}
            onChange={setKind}
            options={[
              { value: "personal", label: "Personal (read)" },
              { value: "project", label: "Project (ingest)" },
            ]}
          />
          {kind === "project" && (
            <label className="field" htmlFor="token-project">
              <span>Project slug</span>
              <input id="token-project" className="input" value={project} onChange={(e) => setProject(e.target.value)} required />
            </label>
          )}
          <label className="field" htmlFor="token-name">
            <span>Name</span>
            <input id="token-name" className="input" value={name} placeholder={kind === "personal" ? "grafana" : "training cluster"} onChange={(e) => setName(e.target.value)} />
          </label>
          <button className="btn btn-primary" type="submit" disabled={busy}>
            Create token
          </button>
        </form>
        <FieldErrors error={error} />
        {created?.token && (
          <div className="callout callout-ok" role="status">
            <div>
              <strong>Copy this token now</strong>: it is shown once.
            </div>
            <code className="token-value">{created.token}</code>
            <button type="button" className="btn btn-small" onClick={() => navigator.clipboard?.writeText(created.token!)}>
              Copy
            </button>
          </div>
        )}
      </Card>
      <Card title="Tokens">
        <Async state={state} isEmpty={(d) => d.length === 0} empty={<Empty title="No tokens yet" />}>
          {(d) => (
            <DataTable
              caption="API tokens"
              rows={d}
              rowKey={(t) => String(t.id)}
              columns={[
                { key: "prefix", header: "Token", render: (t) => <code>{t.prefix}…</code> },
                { key: "kind", header: "Kind", render: (t) => t.kind },
                { key: "project", header: "Project", render: (t) => t.project ?? <span className="muted">–</span> },
                { key: "name", header: "Name", render: (t) => t.name || <span className="muted">–</span> },
                { key: "created", header: "Created", render: (t) => formatDate(t.created_at) },
                { key: "used", header: "Last used", render: (t) => (t.last_used_at ? formatDateTime(t.last_used_at) : <span className="muted">never</span>) },
                {
                  key: "state",
                  header: "",
                  align: "right",
                  render: (t) =>
                    t.revoked_at ? (
                      <span className="badge">revoked {formatDate(t.revoked_at)}</span>
                    ) : (
                      <button type="button" className="btn btn-small btn-danger" onClick={() => revoke(t.id)}>
                        Revoke
                      </button>
                    ),
                },
              ]}
            />
          )}
        </Async>
      </Card>
    </>
  );
}

function PricesCard() {
  const { user } = useSession();
  const admin = isAdmin(user);
  const state = useApi<PriceEntry[]>("/api/v1/pricing/prices");
  const gpus = useApi<GpuSpec[]>("/api/v1/pricing/gpus");
  const [form, setForm] = useState({ gpu: "", usd_per_gpu_hour: "", provider: "", region: "", tier: "on_demand", effective_from: "", note: "" });
  const [error, setError] = useState<ApiError | null>(null);
  const [busy, setBusy] = useState(false);

  async function add(e: FormEvent) {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const body: Record<string, string> = { ...form };
      if (!body.effective_from) delete body.effective_from;
      else body.effective_from = new Date(`${body.effective_from}T00:00:00Z`).toISOString();
      await apiFetch("/api/v1/pricing/prices", { method: "POST", body });
      setForm((f) => ({ ...f, usd_per_gpu_hour: "", note: "" }));
      state.reload();
    } catch (err) {
      setError(err instanceof ApiError ? err : new ApiError(0, "client", String(err)));
    } finally {
      setBusy(false);
    }
  }

  return (
    <>
      {admin && (
        <Card title="Set a price">
          <form className="inline-form" onSubmit={add}>
            <label className="field" htmlFor="price-gpu">
              <span>GPU</span>
              <select id="price-gpu" className="select" value={form.gpu} required onChange={(e) => setForm({ ...form, gpu: e.target.value })}>
                <option value="">Choose…</option>
                {(gpus.data ?? []).map((g) => (
                  <option key={g.key} value={g.key}>
                    {g.key}
                  </option>
                ))}
              </select>
            </label>
            <label className="field" htmlFor="price-usd">
              <span>$ / GPU-hour</span>
              <input id="price-usd" className="input input-num" type="number" min={0} step={0.0001} required value={form.usd_per_gpu_hour} onChange={(e) => setForm({ ...form, usd_per_gpu_hour: e.target.value })} />
            </label>
            <label className="field" htmlFor="price-provider">
              <span>Provider</span>
              <input id="price-provider" className="input" placeholder="any" value={form.provider} onChange={(e) => setForm({ ...form, provider: e.target.value })} />
            </label>
            <label className="field" htmlFor="price-region">
              <span>Region</span>
              <input id="price-region" className="input" placeholder="any" value={form.region} onChange={(e) => setForm({ ...form, region: e.target.value })} />
            </label>
            <label className="field" htmlFor="price-tier">
              <span>Tier</span>
              <select id="price-tier" className="select" value={form.tier} onChange={(e) => setForm({ ...form, tier: e.target.value })}>
                <option value="on_demand">on demand</option>
                <option value="reserved">reserved</option>
                <option value="spot">spot</option>
              </select>
            </label>
            <label className="field" htmlFor="price-from">
              <span>Effective from</span>
              <input id="price-from" className="input" type="date" value={form.effective_from} onChange={(e) => setForm({ ...form, effective_from: e.target.value })} />
            </label>
            <button className="btn btn-primary" type="submit" disabled={busy}>
              Add price
            </button>
          </form>
          <FieldErrors error={error} />
        </Card>
      )}
      <Card title="Price book" actions={<a className="btn btn-small" href="/api/v1/pricing/prices.csv">Export CSV</a>}>
        <Async state={state} isEmpty={(d) => d.length === 0} empty={<Empty title="No prices yet">Runs on GPUs without a price are counted at $0.</Empty>}>
          {(d) => (
            <DataTable
              caption="Price book"
              dense
              rows={d}
              rowKey={(p) => String(p.id)}
              columns={[
                { key: "gpu", header: "GPU", render: (p) => p.gpu },
                { key: "provider", header: "Provider", render: (p) => p.provider || <span className="muted">any</span> },
                { key: "region", header: "Region", render: (p) => p.region || <span className="muted">any</span> },
                { key: "tier", header: "Tier", render: (p) => p.tier.replace("_", " ") },
                { key: "usd", header: "$/GPU-hour", align: "right", render: (p) => formatUsd(Number(p.usd_per_gpu_hour)) },
                { key: "from", header: "From", render: (p) => formatDate(p.effective_from) },
                { key: "to", header: "To", render: (p) => (p.effective_to ? formatDate(p.effective_to) : <span className="muted">open</span>) },
                { key: "note", header: "Note", render: (p) => (p.is_example ? <span className="badge badge-warn">example</span> : p.note || "") },
              ]}
            />
          )}
        </Async>
      </Card>
    </>
  );
}

function GpuCard() {
  const state = useApi<GpuSpec[]>("/api/v1/pricing/gpus");
  const dtypes = Array.from(new Set((state.data ?? []).flatMap((g) => Object.keys(g.peak_tflops))));
  return (
    <Card title="GPU catalog" actions={<span className="muted small">dense peak TFLOP/s by dtype, used for MFU</span>}>
      <Async state={state} isEmpty={(d) => d.length === 0}>
        {(d) => (
          <DataTable
            caption="GPU catalog"
            dense
            rows={d}
            rowKey={(g) => g.key}
            columns={[
              { key: "key", header: "Key", render: (g) => <code>{g.key}</code> },
              { key: "name", header: "Name", render: (g) => `${g.vendor} ${g.name}` },
              { key: "mem", header: "Memory", align: "right", render: (g) => formatBytes(g.memory_bytes) },
              ...dtypes.map((dt) => ({ key: dt, header: dt, align: "right" as const, render: (g: GpuSpec) => (g.peak_tflops[dt] !== undefined ? g.peak_tflops[dt].toLocaleString("en-US") : "–") })),
            ]}
          />
        )}
      </Async>
    </Card>
  );
}

import { type FormEvent, useId, useState } from "react";
import { Link, useLocation } from "react-router";

import { ApiError } from "../api/client";
import { useSession } from "../api/session";
import { deleteView, saveView, savedViewPage, suggestedName, updateView, useSavedViews, type SavedView } from "../lib/savedViews";
import { Dialog } from "./Dialog";
import { FieldErrors } from "./States";

/** "Save view" on the runs list, the leaderboards and finance: saves this page's URL under a name. */
export function SaveViewButton() {
  const [open, setOpen] = useState(false);
  const location = useLocation();
  const page = savedViewPage(location.pathname);
  if (!page) return null;
  return (
    <>
      <button type="button" className="btn" onClick={() => setOpen(true)} data-testid="save-view" title="Save these filters under a name, for you or a team">
        Save view
      </button>
      {open && <SaveViewDialog page={page} search={location.search} onClose={() => setOpen(false)} />}
    </>
  );
}

export function SaveViewDialog({ page, search, onClose }: { page: NonNullable<ReturnType<typeof savedViewPage>>; search: string; onClose: () => void }) {
  const { user } = useSession();
  const uid = useId();
  const [name, setName] = useState(() => suggestedName(page, search));
  const [team, setTeam] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);
  const [saved, setSaved] = useState<SavedView | null>(null);

  async function submit(e: FormEvent) {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      setSaved(await saveView({ name: name.trim(), page, query: search.replace(/^\?/, ""), team: team || null }));
    } catch (err) {
      setError(err instanceof ApiError ? err : new ApiError(0, "client", String(err)));
    }
    setBusy(false);
  }

  return (
    <Dialog title="Save view" onClose={onClose} busy={busy} describedBy={`${uid}-what`}>
      <p className="muted small dialog-text" id={`${uid}-what`}>
        Saves this page with its filters; it appears under “Saved views” in the sidebar.
      </p>
      {saved ? (
        <div className="dialog-form">
          <p role="status">
            Saved “{saved.name}”{saved.team_name ? `, shared with ${saved.team_name}` : ""}.
          </p>
          <div className="form-actions">
            <button type="button" className="btn btn-primary" data-autofocus onClick={onClose}>
              Done
            </button>
          </div>
        </div>
      ) : (
        <ViewForm
          uid={uid}
          name={name}
          onName={setName}
          team={team}
          onTeam={setTeam}
          teams={user?.teams ?? []}
          hint="A team's members see it in their sidebar; its leads may delete it."
          error={error}
          busy={busy}
          onSubmit={submit}
          onClose={onClose}
        />
      )}
    </Dialog>
  );
}

/** The sidebar's list: one's own views and those shared with one's teams; delete where allowed. */
export function SavedViewsNav() {
  const { views, error } = useSavedViews();
  const location = useLocation();
  const [deleting, setDeleting] = useState<SavedView | null>(null);
  const [editing, setEditing] = useState<SavedView | null>(null);
  if (error || views.length === 0) return null;
  const here = location.pathname + location.search;
  return (
    <nav className="nav nav-secondary" aria-label="Saved views">
      <div className="nav-heading">Saved views</div>
      {views.map((v) => (
        <div key={v.id} className="nav-row">
          <Link to={v.url} title={`${v.name}${v.team_name ? ` (shared with ${v.team_name} by ${v.owner})` : ""}`} className={`nav-item${here === v.url ? " is-active" : ""}`} aria-current={here === v.url ? "page" : undefined}>
            <span className="nav-icon" aria-hidden="true">
              {v.team ? "⚑" : "☆"}
            </span>
            <span className="nav-label">{v.name}</span>
          </Link>
          {v.mine && (
            <button type="button" className="btn btn-ghost btn-icon btn-small nav-row-action" aria-label={`Rename or share saved view ${v.name}`} title="Rename or share" onClick={() => setEditing(v)}>
              ✎
            </button>
          )}
          {v.can_delete && (
            <button type="button" className="btn btn-ghost btn-icon btn-small nav-row-action" aria-label={`Delete saved view ${v.name}`} title="Delete" onClick={() => setDeleting(v)}>
              ×
            </button>
          )}
        </div>
      ))}
      {deleting && <DeleteViewDialog view={deleting} onClose={() => setDeleting(null)} />}
      {editing && <EditViewDialog view={editing} onClose={() => setEditing(null)} />}
    </nav>
  );
}

function DeleteViewDialog({ view, onClose }: { view: SavedView; onClose: () => void }) {
  const uid = useId();
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);
  async function remove() {
    setBusy(true);
    try {
      await deleteView(view.id);
      onClose();
    } catch (err) {
      setError(err instanceof ApiError ? err : new ApiError(0, "client", String(err)));
      setBusy(false);
    }
  }
  return (
    <Dialog title="Delete saved view?" role="alertdialog" onClose={onClose} busy={busy} describedBy={`${uid}-what`}>
      <p className="dialog-text" id={`${uid}-what`}>
        “{view.name}”{view.team_name ? ` is shared with ${view.team_name}; its members will no longer see it.` : " will be gone."}
      </p>
      <FieldErrors error={error} />
      <div className="form-actions">
        <button type="button" className="btn btn-ghost" onClick={onClose} disabled={busy}>
          Cancel
        </button>
        <button type="button" className="btn btn-danger-solid" onClick={remove} disabled={busy}>
          Delete
        </button>
      </div>
    </Dialog>
  );
}

/** The owner's rename, share and unshare of a saved view. */
function EditViewDialog({ view, onClose }: { view: SavedView; onClose: () => void }) {
  const { user } = useSession();
  const uid = useId();
  const [name, setName] = useState(view.name);
  const [team, setTeam] = useState(view.team ?? "");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);
  const teams = user?.teams ?? [];

  async function submit(e: FormEvent) {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      await updateView(view.id, { name: name.trim(), team: team || null });
      onClose();
    } catch (err) {
      setError(err instanceof ApiError ? err : new ApiError(0, "client", String(err)));
      setBusy(false);
    }
  }

  return (
    <Dialog title="Rename or share view" onClose={onClose} busy={busy}>
      <ViewForm
        uid={uid}
        name={name}
        onName={setName}
        team={team}
        onTeam={setTeam}
        teams={teams}
        current={view.team && !teams.some((t) => t.slug === view.team) ? { slug: view.team, name: view.team_name ?? view.team } : undefined}
        error={error}
        busy={busy}
        onSubmit={submit}
        onClose={onClose}
      />
    </Dialog>
  );
}

/** A saved view's name and who it is shared with, for the save and the edit dialogs; `current`
 * is a team the view is shared with that the person is no longer in (kept until they change it). */
function ViewForm({ uid, name, onName, team, onTeam, teams, current, hint, error, busy, onSubmit, onClose }: {
  uid: string;
  name: string;
  onName: (v: string) => void;
  team: string;
  onTeam: (v: string) => void;
  teams: { slug: string; name: string }[];
  current?: { slug: string; name: string };
  hint?: string;
  error: ApiError | null;
  busy: boolean;
  onSubmit: (e: FormEvent) => void;
  onClose: () => void;
}) {
  return (
    <form className="dialog-form" onSubmit={onSubmit} aria-busy={busy}>
      <div className="field">
        <label htmlFor={`${uid}-name`}>Name</label>
        <input id={`${uid}-name`} data-autofocus className={`input${error?.fields.name ? " is-invalid" : ""}`} required maxLength={100} value={name} onChange={(e) => onName(e.target.value)} />
      </div>
      <div className="field">
        <label htmlFor={`${uid}-team`}>Share with</label>
        <select id={`${uid}-team`} className={`input${error?.fields.team ? " is-invalid" : ""}`} value={team} onChange={(e) => onTeam(e.target.value)}>
          <option value="">Only me</option>
          {current && <option value={current.slug}>Team {current.name}</option>}
          {teams.map((t) => (
            <option key={t.slug} value={t.slug}>
              Team {t.name}
            </option>
          ))}
        </select>
        {hint && <span className="field-hint">{hint}</span>}
      </div>
      <FieldErrors error={error} />
      <div className="form-actions">
        <button type="button" className="btn btn-ghost" onClick={onClose} disabled={busy}>
          Cancel
        </button>
        <button type="submit" className="btn btn-primary" disabled={busy || !name.trim()}>
          Save
        </button>
      </div>
    </form>
  );
}

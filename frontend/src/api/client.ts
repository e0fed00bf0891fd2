// The one way the UI talks to the server: JSON over fetch, session cookie, CSRF header on writes,
// and the API's single error shape turned into an ApiError.

export const PORTAL = "/api/v1/portal/";

export class ApiError extends Error {
  readonly status: number;
  readonly code: string;
  readonly fields: Record<string, string>;

  constructor(status: number, code: string, message: string, fields: Record<string, string> = {}) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
    this.fields = fields;
  }
}

let csrfToken = "";

export function setCsrfToken(token: string): void {
  csrfToken = token;
}

function cookie(name: string): string {
  const match = document.cookie.split("; ").find((c) => c.startsWith(`${name}=`));
  return match ? decodeURIComponent(match.slice(name.length + 1)) : "";
}

/** Told the error code: `session_ended` when single sign-on could not renew the session. */
type Listener = (code: string) => void;
const unauthenticatedListeners = new Set<Listener>();

/** Called when a read answers 401/403 unauthenticated: the session expired or was signed out. */
export function onUnauthenticated(listener: Listener): () => void {
  unauthenticatedListeners.add(listener);
  return () => unauthenticatedListeners.delete(listener);
}

/** A path relative to the portal API ("runs?…") or absolute ("/api/v1/pricing/gpus"). */
export function apiUrl(path: string): string {
  return path.startsWith("/") ? path : PORTAL + path;
}

export interface RequestOptions {
  method?: "GET" | "POST" | "PUT" | "PATCH" | "DELETE";
  body?: unknown;
  signal?: AbortSignal;
}

export async function apiFetch<T>(path: string, opts: RequestOptions = {}): Promise<T> {
  const method = opts.method ?? "GET";
  const headers: Record<string, string> = { Accept: "application/json" };
  if (opts.body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET") headers["X-CSRFToken"] = cookie("csrftoken") || csrfToken;
  let response: Response;
  try {
    response = await fetch(apiUrl(path), {
      method,
      headers,
      body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
      credentials: "same-origin",
      signal: opts.signal,
    });
  } catch (err) {
    if ((err as Error).name === "AbortError") throw err;
    throw new ApiError(0, "network", "The server could not be reached. Check your connection and try again.");
  }
  if (response.status === 204) return undefined as T;
  const text = await response.text();
  let data: unknown = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  if (!response.ok) {
    const err = (data as { error?: { code?: string; message?: string; fields?: Record<string, string> } } | null)?.error;
    const apiError = new ApiError(
      response.status,
      err?.code ?? `http_${response.status}`,
      err?.message ?? `The server answered ${response.status} ${response.statusText}`.trim(),
      err?.fields ?? {},
    );
    if (response.status === 401 || (response.status === 403 && apiError.code === "unauthenticated")) {
      unauthenticatedListeners.forEach((l) => l(apiError.code));
    }
    throw apiError;
  }
  return data as T;
}

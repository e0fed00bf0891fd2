import { useEffect, useId, useRef, type KeyboardEvent, type ReactNode } from "react";
import { createPortal } from "react-dom";

const FOCUSABLE = 'button:not([disabled]), [href], input:not([disabled]), select:not([disabled]), textarea:not([disabled]), [tabindex]:not([tabindex="-1"])';

interface Props {
  title: string;
  /** Escape, or a Cancel button: the parent unmounts the dialog. */
  onClose: () => void;
  children: ReactNode;
  /** "alertdialog" for a confirmation that needs an answer. */
  role?: "dialog" | "alertdialog";
  /** While a request is in flight Escape does nothing, so its answer is not lost. */
  busy?: boolean;
  /** id of the text that says what the dialog is about (aria-describedby). */
  describedBy?: string;
}

/**
 * A small modal: focus moves into it (to the element marked data-autofocus, else the first control),
 * Tab and Shift+Tab stay inside, Escape closes it, and focus returns to what opened it.
 */
export function Dialog({ title, onClose, children, role = "dialog", busy = false, describedBy }: Props) {
  const ref = useRef<HTMLDivElement>(null);
  const titleId = useId();
  const close = useRef(onClose);
  close.current = onClose;

  useEffect(() => {
    const opener = document.activeElement instanceof HTMLElement ? document.activeElement : null;
    const box = ref.current;
    const first = box?.querySelector<HTMLElement>("[data-autofocus]") ?? box?.querySelector<HTMLElement>(FOCUSABLE) ?? box;
    first?.focus();
    return () => {
      if (opener && opener.isConnected) opener.focus();
    };
  }, []);

  // Escape closes from anywhere (focus can fall to the page when a busy button is disabled), but not
  // while a request is in flight.
  const busyNow = useRef(busy);
  busyNow.current = busy;
  useEffect(() => {
    const onEscape = (e: globalThis.KeyboardEvent) => {
      if (e.key !== "Escape") return;
      e.stopPropagation();
      if (!busyNow.current) close.current();
    };
    document.addEventListener("keydown", onEscape);
    return () => document.removeEventListener("keydown", onEscape);
  }, []);

  // A button disabled while busy drops the focus: keep it inside the dialog.
  useEffect(() => {
    const box = ref.current;
    const active = document.activeElement;
    if (box && (!active || !box.contains(active) || active.matches(":disabled"))) box.focus();
  }, [busy]);

  function onKeyDown(e: KeyboardEvent<HTMLDivElement>) {
    if (e.key !== "Tab" || !ref.current) return;
    const items = Array.from(ref.current.querySelectorAll<HTMLElement>(FOCUSABLE));
    if (items.length === 0) {
      e.preventDefault();
      return;
    }
    const first = items[0];
    const last = items[items.length - 1];
    if (e.shiftKey && (document.activeElement === first || document.activeElement === ref.current)) {
      e.preventDefault();
      last.focus();
    } else if (!e.shiftKey && document.activeElement === last) {
      e.preventDefault();
      first.focus();
    }
  }

  return createPortal(
    <div className="dialog-backdrop">
      <div ref={ref} className="dialog" role={role} aria-modal="true" aria-labelledby={titleId} aria-describedby={describedBy} tabIndex={-1} onKeyDown={onKeyDown}>
        <h2 className="dialog-title" id={titleId}>
          {title}
        </h2>
        {children}
      </div>
    </div>,
    document.body,
  );
}

import { useEffect, useRef, useState } from "react";

/**
 * A text input's draft that commits `delayMs` after typing stops (or at once with `flush`).
 * A change of `value` from outside (back button, "Clear filters") replaces the draft and cancels
 * a pending commit, so an old draft never overwrites a newer URL.
 */
export function useCommittedText(value: string, onCommit: (v: string) => void, delayMs = 350) {
  const [draft, setDraft] = useState(value);
  const dirty = useRef(false);
  const commit = useRef(onCommit);
  commit.current = onCommit;
  const latestValue = useRef(value);
  latestValue.current = value;

  useEffect(() => {
    dirty.current = false;
    setDraft(value);
  }, [value]);

  useEffect(() => {
    if (!dirty.current) return;
    const id = setTimeout(() => {
      dirty.current = false;
      if (draft !== latestValue.current) commit.current(draft);
    }, delayMs);
    return () => clearTimeout(id);
  }, [draft, delayMs]);

  return {
    draft,
    change: (v: string) => {
      dirty.current = true;
      setDraft(v);
    },
    flush: () => {
      dirty.current = false;
      if (draft !== latestValue.current) commit.current(draft);
    },
  };
}

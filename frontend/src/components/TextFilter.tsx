import { useCommittedText } from "../lib/useDebounced";

/** A text filter that commits to the URL a moment after typing stops (Enter commits at once). */
export function TextFilter({ id, label, value, placeholder, onCommit, options }: { id: string; label: string; value: string; placeholder?: string; onCommit: (v: string) => void; options?: string[] }) {
  const text = useCommittedText(value, onCommit);
  return (
    <label className="filter" htmlFor={id}>
      <span className="filter-label">{label}</span>
      <input
        id={id}
        className="input"
        type="search"
        value={text.draft}
        placeholder={placeholder}
        list={options ? `${id}-options` : undefined}
        onChange={(e) => text.change(e.target.value)}
        onBlur={text.flush}
        onKeyDown={(e) => {
          if (e.key === "Enter") text.flush();
        }}
      />
      {options && (
        <datalist id={`${id}-options`}>
          {options.map((o) => (
            <option key={o} value={o} />
          ))}
        </datalist>
      )}
    </label>
  );
}

import { Link } from "react-router";

import { Empty } from "../components/States";

export function NotFoundPage() {
  return (
    <div className="page">
      <Empty title="This page does not exist">
        <Link to="/">Back to the overview</Link>
      </Empty>
    </div>
  );
}

import { useParams } from "react-router";

import { EntityView } from "./Entity";

export function TeamPage() {
  const { slug = "" } = useParams();
  return <EntityView key={slug} kind="team" slug={slug} />;
}

import { useParams } from "react-router";

import { EntityView } from "./Entity";

export function ProjectPage() {
  const { slug = "" } = useParams();
  return <EntityView key={slug} kind="project" slug={slug} />;
}

import { describe, expect, it } from "vitest";

import { tokenKindsFor } from "./Settings";

const team = { slug: "nlp", name: "nlp", role: "admin" };

describe("tokenKindsFor", () => {
  it("offers the SCIM token to organization admins only", () => {
    expect(tokenKindsFor({ username: "ada", is_finance: false, is_org_admin: true, teams: [] })).toEqual(["personal", "project", "node", "scim"]);
    expect(tokenKindsFor({ username: "lee", is_finance: false, is_org_admin: false, teams: [team] })).toEqual(["personal", "project"]);
    expect(tokenKindsFor({ username: "fin", is_finance: true, is_org_admin: false, teams: [] })).toEqual(["personal"]);
  });
});

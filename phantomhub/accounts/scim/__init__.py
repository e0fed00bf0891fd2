"""SCIM 2.0 provisioning at /scim/v2/ (RFC 7643, RFC 7644; docs/identity.md "SCIM provisioning").

Built on django-scim2's views and adapter machinery, with adapters over Django's own `auth.User`
and the directory tables (`DirectoryAccount`, `DirectoryGroup`) instead of its SCIM mixin models
(docs/design-notes.md says why):

| module | holds |
|---|---|
| `access.py` | who may call: a SCIM token only; the body bound (413) before anything reads it |
| `errors.py` | the SCIM error answer (`urn:ietf:params:scim:api:messages:2.0:Error`) |
| `values.py` | SCIM attribute values to checked Python values, 400s naming the attribute |
| `paths.py` | PATCH paths and the value filters in them (`members[value eq "..."]`) |
| `filters.py` | `filter=` queries to querysets (userName, externalId, displayName, ...) |
| `services.py` | the writes: people created, changed, deactivated, deleted; groups and members |
| `adapters.py` | Users and Groups: SCIM documents in and out, PATCH operations |
| `config.py` | ServiceProviderConfig and the base URL of `location`s |
| `views.py`, `urls.py` | the endpoints |
"""

"""Password sign-in switched off (PHANTOMHUB_LOCAL_PASSWORDS=0): the one sentence the portal's
sign-in and the admin's answer with (docs/identity.md, "Local passwords off and break-glass")."""

from __future__ import annotations

PASSWORDS_OFF_CODE = "local_passwords_off"
PASSWORDS_OFF_MESSAGE = "Password sign-in is switched off on this PhantomHub: sign in with single sign-on."

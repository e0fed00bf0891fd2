"""The audit log: who changed what, when, from where, before and after (docs/audit.md)."""

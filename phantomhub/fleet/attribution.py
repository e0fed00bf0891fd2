"""Attribution rules: which team and project an owner's GPU time belongs to (pure: no Django).

Rules are ordered and the first that matches decides; an owner no rule matches is unattributed
(its time is shown as such, never dropped). A run owner is attributed to its run's project by the
caller, before any rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any


@dataclass(frozen=True)
class Rule:
    match: str  # k8s_namespace | k8s_label | slurm_account | slurm_partition | unix_user
    key: str
    pattern: str
    team_id: int | None
    project_id: int | None


def _subject(rule: Rule, owner: dict[str, Any]) -> str | None:
    kind = owner.get("kind")
    if rule.match == "k8s_namespace" and kind == "k8s":
        return owner.get("namespace")
    if rule.match == "k8s_label" and kind == "k8s":
        value = (owner.get("labels") or {}).get(rule.key)
        return value if isinstance(value, str) else None
    if rule.match == "slurm_account" and kind == "slurm":
        return owner.get("account")
    if rule.match == "slurm_partition" and kind == "slurm":
        return owner.get("partition")
    if rule.match == "unix_user" and kind in ("slurm", "user"):
        return owner.get("user")
    return None


def rule_matches(rule: Rule, owner: dict[str, Any]) -> bool:
    subject = _subject(rule, owner)
    return subject is not None and fnmatchcase(subject, rule.pattern)


def owner_attribute(owner: dict[str, Any], rules: Sequence[Rule]) -> tuple[int | None, int | None, int | None]:
    """(team id, project id, index of the rule that matched), or Nones when none matches."""
    for index, rule in enumerate(rules):
        if rule_matches(rule, owner):
            return rule.team_id, rule.project_id, index
    return None, None, None


def owner_label(owner: dict[str, Any] | None) -> str:
    """How people read a holder: `run llm-pretrain/3f2a…`, `k8s ml-team/train-abc`, `slurm job 12345 (alice)`."""
    if not owner:
        return "no process visible"
    kind = owner.get("kind")
    if kind == "run":
        return f"run {owner.get('project')}/{owner.get('run_id')}"
    if kind == "k8s":
        return f"pod {owner.get('namespace') or '?'}/{owner.get('pod') or '?'}"
    if kind == "slurm":
        who = ", ".join(x for x in (owner.get("user"), owner.get("account")) if x)
        return f"slurm job {owner.get('job_id') or '?'}" + (f" ({who})" if who else "")
    return f"user {owner.get('user') or '?'}"

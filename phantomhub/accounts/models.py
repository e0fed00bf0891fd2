"""Teams, projects, people's roles, and API tokens."""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models


class Team(models.Model):
    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    # What people read (set in Settings); blank shows the slug. `name` is what registration or the
    # demo wrote (often a naive title-case of the slug), kept but not shown.
    display_name = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug

    @property
    def label(self) -> str:
        return self.display_name or self.slug


class Project(models.Model):
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="projects")
    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    display_name = models.CharField(max_length=100, blank=True)  # as Team.display_name
    # None: use the organization default (PHANTOMHUB_TARGET_MFU / org settings).
    target_mfu = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0.01), MaxValueValidator(1.0)],
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug

    @property
    def label(self) -> str:
        return self.display_name or self.slug


class Role(models.TextChoices):
    VIEWER = "viewer"
    MEMBER = "member"
    ADMIN = "admin"


class Source(models.TextChoices):
    """Where a membership or an organization role comes from (accounts/directory.py)."""

    LOCAL = "local"  # given by hand (Settings, the admin, seeddemo); the directory leaves it alone
    DIRECTORY = "directory"  # given by the group mapping from the identity provider's groups


class Membership(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.LOCAL)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "team"], name="membership_user_team_unique")]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} as {self.role}"


class Profile(models.Model):
    """Organization-wide flags of a person: finance sees all spend, admin manages everything."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="profile")
    is_finance = models.BooleanField(default=False)
    is_org_admin = models.BooleanField(default=False)
    # Which of the two flags the group mapping gave ("finance", "org_admin"): the directory takes
    # back only what it gave; a flag set by hand (the break-glass admin) stays (accounts/directory.py).
    directory_flags = models.JSONField(default=list, blank=True)

    def __str__(self) -> str:
        return f"profile of {self.user}"


class DirectoryAccount(models.Model):
    """A person known to the identity provider: by OIDC sign-in (issuer and subject) or by SCIM
    provisioning (scim_id, external_id). Their directory groups decide their synced access."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="directory")
    scim_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    external_id = models.CharField(max_length=255, blank=True, db_index=True)
    oidc_issuer = models.CharField(max_length=500, blank=True)
    oidc_subject = models.CharField(max_length=255, blank=True)
    synced_at = models.DateTimeField(null=True, blank=True)
    # Set when SCIM deleted the person (accounts/scim/, docs/identity.md "SCIM provisioning"): the
    # user row stays (what they did keeps its actor), SCIM answers 404 for it, and a later SCIM
    # create with the same userName takes the account back under a new scim_id.
    scim_deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["oidc_issuer", "oidc_subject"],
                condition=~models.Q(oidc_subject=""),
                name="directoryaccount_oidc_identity_unique",
            )
        ]

    def __str__(self) -> str:
        return f"directory account of {self.user}"


class DirectoryGroup(models.Model):
    """A group of the identity provider, as its groups claim names it at sign-in or SCIM pushes it.
    Members are replaced as a whole by each sign-in (that person's groups) or SCIM write."""

    display_name = models.CharField(max_length=255, unique=True)
    scim_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    external_id = models.CharField(max_length=255, blank=True, db_index=True)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, related_name="directory_groups", blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["display_name"]

    def __str__(self) -> str:
        return self.display_name


class Grant(models.TextChoices):
    """What a group mapping rule gives: an organization role, or a role in one team."""

    ORG_ADMIN = "org_admin"
    FINANCE = "finance"
    TEAM_LEAD = "team_lead"  # Role.ADMIN of the team
    TEAM_MEMBER = "team_member"  # Role.MEMBER
    TEAM_VIEWER = "team_viewer"  # Role.VIEWER


TEAM_GRANT_ROLES = {Grant.TEAM_LEAD: Role.ADMIN, Grant.TEAM_MEMBER: Role.MEMBER, Grant.TEAM_VIEWER: Role.VIEWER}


class GroupMappingRule(models.Model):
    """One rule of the group mapping: people in a group whose name matches `pattern` (an exact
    name or a shell glob such as `ml-*-leads`, case-sensitive) get `grant` (in `team`, for the
    team grants)."""

    pattern = models.CharField(max_length=255)
    grant = models.CharField(max_length=16, choices=Grant.choices)
    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.CASCADE, related_name="group_rules")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["pattern", "grant", "team__slug"]
        constraints = [
            models.UniqueConstraint(fields=["pattern", "grant", "team"], name="groupmappingrule_unique"),
            models.CheckConstraint(
                condition=(
                    models.Q(grant__in=["org_admin", "finance"], team__isnull=True)
                    | models.Q(grant__in=["team_lead", "team_member", "team_viewer"], team__isnull=False)
                ),
                name="groupmappingrule_team_matches_grant",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.pattern} -> {self.grant}{' in ' + self.team.slug if self.team else ''}"


class TokenKind(models.TextChoices):
    PROJECT = "project"  # ingest and read for one project; what the agent uses
    PERSONAL = "personal"  # read-only, acts with its owner's permissions (integrations)
    NODE = "node"  # may only POST node telemetry for its hostnames (the node collector); reads nothing
    SCIM = "scim", "SCIM"  # the identity provider's: reaches /scim/v2/ and nothing else (accounts/scim/)


class ApiToken(models.Model):
    """A bearer token. Only its SHA-256 digest is stored; the prefix lets people recognise it.

    Its life (docs/identity.md, "Tokens"): it works from creation until the first of its expiry
    (`expires_at`), its revocation (`revoked_at`) or, once rotated, the end of the overlap
    (`overlap_ends_at`, the token that replaced it in `replaced_by`). `accounts/auth.py` refuses it
    after that with a 401 naming which and when."""

    kind = models.CharField(max_length=16, choices=TokenKind.choices, default=TokenKind.PROJECT)
    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.CASCADE, related_name="tokens")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=200, default="unnamed")
    # Who made it: a project or node token's owner (a personal token's is `user`). None for
    # tokens made before owners were kept, by `manage.py createtoken`, or whose maker was deleted.
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="api_tokens_created"
    )
    prefix = models.CharField(max_length=16, db_index=True)
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    # The client address of that use (accounts.signin.client_address: behind a trusted proxy,
    # the address the proxy was reached from), written with last_used_at.
    last_used_address = models.GenericIPAddressField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Rotation: the token issued in its place, and when this one stops working (the overlap).
    replaced_by = models.OneToOneField("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="replaces")
    overlap_ends_at = models.DateTimeField(null=True, blank=True)
    # A node token's hostnames (exact, or shell globs like `gpu-a-*`): the nodes it may report
    # for. Empty for other kinds; a node token naming none reports for no node.
    hostnames = models.JSONField(default=list, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=(
                    models.Q(kind="project", project__isnull=False, user__isnull=True)
                    | models.Q(kind="personal", user__isnull=False, project__isnull=True)
                    | models.Q(kind="node", user__isnull=True, project__isnull=True)
                    | models.Q(kind="scim", user__isnull=True, project__isnull=True)
                ),
                name="apitoken_owner_matches_kind",
            ),
            models.CheckConstraint(
                condition=models.Q(replaced_by__isnull=True) | models.Q(overlap_ends_at__isnull=False),
                name="apitoken_rotation_has_an_end",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.kind})"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    @property
    def owner(self) -> Any:
        """The person it belongs to: a personal token's user, else its maker (None if unknown)."""
        return self.user if self.kind == TokenKind.PERSONAL else self.created_by

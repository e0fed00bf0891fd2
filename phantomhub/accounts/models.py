"""Teams, projects, people's roles, and API tokens."""

from __future__ import annotations

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


class Membership(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "team"], name="membership_user_team_unique")]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} as {self.role}"


class Profile(models.Model):
    """Organization-wide flags of a person: finance sees all spend, admin manages everything."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="profile")
    is_finance = models.BooleanField(default=False)
    is_org_admin = models.BooleanField(default=False)

    def __str__(self) -> str:
        return f"profile of {self.user}"


class TokenKind(models.TextChoices):
    PROJECT = "project"  # ingest and read for one project; what the agent uses
    PERSONAL = "personal"  # read-only, acts with its owner's permissions (integrations)
    NODE = "node"  # may only POST node telemetry for its hostnames (the node collector); reads nothing


class ApiToken(models.Model):
    """A bearer token. Only its SHA-256 digest is stored; the prefix lets people recognise it."""

    kind = models.CharField(max_length=16, choices=TokenKind.choices, default=TokenKind.PROJECT)
    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.CASCADE, related_name="tokens")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=200, blank=True)
    prefix = models.CharField(max_length=16, db_index=True)
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
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
                ),
                name="apitoken_owner_matches_kind",
            )
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.kind})"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

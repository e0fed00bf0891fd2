from django.urls import path, re_path

from phantomhub.portal import api, compare, identity, jobs, saved_views_api, tokens

urlpatterns = [
    path("session", api.SessionApi.as_view(), name="portal-session"),
    path("runs", api.RunListApi.as_view(), name="portal-runs"),
    path("runs.csv", api.RunListCsvApi.as_view(), name="portal-runs-csv"),
    path("runs/<uuid:run_id>", api.RunPageApi.as_view(), name="portal-run"),
    path("compare", compare.CompareApi.as_view(), name="portal-compare"),
    re_path(r"^leaderboards/(?P<kind>[a-z]+)\.csv$", api.LeaderboardCsvApi.as_view(), name="portal-leaderboard-csv"),
    path("leaderboards/<str:kind>", api.LeaderboardApi.as_view(), name="portal-leaderboard"),
    path("overview", api.OverviewApi.as_view(), name="portal-overview"),
    path("teams", api.TeamListApi.as_view(), name="portal-teams"),
    path("teams/<slug:slug>", api.TeamPageApi.as_view(), name="portal-team"),
    path("projects/<slug:slug>", api.ProjectPageApi.as_view(), name="portal-project"),
    path("projects/<slug:slug>/failures", jobs.ProjectFailuresApi.as_view(), name="portal-project-failures"),
    path("jobs", jobs.JobListApi.as_view(), name="portal-jobs"),
    path("jobs/<uuid:job_id>", jobs.JobPageApi.as_view(), name="portal-job"),
    re_path(r"^finance/(?P<month>\d{4}-\d{2})\.csv$", api.FinanceCsvApi.as_view(), name="portal-finance-csv"),
    re_path(r"^finance/(?P<month>\d{4}-\d{2})\.pdf$", api.FinancePdfApi.as_view(), name="portal-finance-pdf"),
    re_path(r"^finance/(?P<month>\d{4}-\d{2})$", api.FinanceApi.as_view(), name="portal-finance"),
    re_path(r"^finance/(?P<month>\d{4}-\d{2})/close$", api.FinanceCloseApi.as_view(), name="portal-finance-close"),
    re_path(r"^finance/(?P<month>\d{4}-\d{2})/reopen$", api.FinanceReopenApi.as_view(), name="portal-finance-reopen"),
    path("settings", api.SettingsApi.as_view(), name="portal-settings"),
    path("tokens", tokens.TokenListApi.as_view(), name="portal-tokens"),
    path("tokens/<int:token_id>", tokens.TokenDetailApi.as_view(), name="portal-token"),
    path("tokens/<int:token_id>/rotate", tokens.TokenRotateApi.as_view(), name="portal-token-rotate"),
    path("views", saved_views_api.SavedViewListApi.as_view(), name="portal-views"),
    path("views/<int:view_id>", saved_views_api.SavedViewDetailApi.as_view(), name="portal-view"),
    path("group-mapping", identity.GroupMappingApi.as_view(), name="portal-group-mapping"),
    path("group-mapping/preview", identity.GroupMappingPreviewApi.as_view(), name="portal-group-mapping-preview"),
    path("people", identity.PeopleApi.as_view(), name="portal-people"),
    path("people/<str:username>", identity.PersonApi.as_view(), name="portal-person"),
    path(
        "people/<str:username>/memberships/<slug:slug>", identity.PersonMembershipApi.as_view(), name="portal-person-membership"
    ),
]

from django.urls import path

from phantomhub.planning import api

urlpatterns = [
    path("budgets", api.BudgetListApi.as_view(), name="budget-list"),
    path("budgets/status", api.BudgetStatusApi.as_view(), name="budget-status"),
    path("budgets/<int:budget_id>", api.BudgetDetailApi.as_view(), name="budget-detail"),
]

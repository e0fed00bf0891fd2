from django.urls import path

from phantomhub.alerts import api

urlpatterns = [
    path("rules", api.AlertRuleListApi.as_view(), name="alerts-rules"),
    path("rules/<int:rule_id>", api.AlertRuleDetailApi.as_view(), name="alerts-rule"),
    path("rules/<int:rule_id>/test", api.AlertRuleTestApi.as_view(), name="alerts-rule-test"),
    path("alerts", api.AlertStateListApi.as_view(), name="alerts-states"),
    path("alerts/<int:state_id>", api.AlertStateDetailApi.as_view(), name="alerts-state"),
    path("deliveries", api.AlertDeliveryListApi.as_view(), name="alerts-deliveries"),
]

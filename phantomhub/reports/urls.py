from django.urls import path

from phantomhub.reports import api

urlpatterns = [
    path("subscriptions", api.SubscriptionListApi.as_view(), name="reports-subscriptions"),
    path("subscriptions/<int:sub_id>", api.SubscriptionDetailApi.as_view(), name="reports-subscription"),
    path("deliveries", api.DeliveryListApi.as_view(), name="reports-deliveries"),
]

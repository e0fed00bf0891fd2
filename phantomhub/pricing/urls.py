from django.urls import path

from phantomhub.pricing import api

urlpatterns = [
    path("gpus", api.GpuListApi.as_view(), name="gpu-list"),
    path("prices", api.PriceListApi.as_view(), name="price-list"),
    path("prices.csv", api.PriceCsvApi.as_view(), name="price-csv"),
    path("prices/<int:price_id>", api.PriceDetailApi.as_view(), name="price-detail"),
    path("audit", api.PriceAuditApi.as_view(), name="price-audit"),
]

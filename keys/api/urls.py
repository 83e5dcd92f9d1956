"""The keys API router: keys, and the usage sub-feature's viewsets."""

from rest_framework.routers import SimpleRouter

from keys.budgets.api import views as budgets
from keys.payloads.api import views as payloads
from keys.usage.api import views as usage

from . import views

router = SimpleRouter()
router.register("keys", views.KeyViewSet, basename="key")
router.register("usage/records", usage.UsageRecordViewSet, basename="usage-record")
router.register("usage/daily", usage.UsageDailyViewSet, basename="usage-daily")
router.register("usage/summary", usage.UsageSummaryViewSet, basename="usage-summary")
router.register("budgets", budgets.BudgetViewSet, basename="budget")
router.register("payload-logging", payloads.PayloadLoggingViewSet, basename="payload-logging")
router.register("request-logs", payloads.RequestPayloadViewSet, basename="request-log")

urlpatterns = router.urls

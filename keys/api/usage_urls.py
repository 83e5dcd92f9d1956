from rest_framework.routers import SimpleRouter

from . import usage

router = SimpleRouter()
router.register("usage/records", usage.UsageRecordViewSet, basename="usage-record")
router.register("usage/daily", usage.UsageDailyViewSet, basename="usage-daily")
router.register("usage/summary", usage.UsageSummaryViewSet, basename="usage-summary")

urlpatterns = router.urls

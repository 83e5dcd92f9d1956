from rest_framework.routers import SimpleRouter

from . import views

router = SimpleRouter()
router.register("keys", views.KeyViewSet, basename="key")

urlpatterns = router.urls

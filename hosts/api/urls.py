from rest_framework.routers import SimpleRouter

from . import views

router = SimpleRouter()
router.register("hosts", views.HostViewSet, basename="host")

urlpatterns = router.urls

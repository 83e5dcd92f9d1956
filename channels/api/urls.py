from rest_framework.routers import SimpleRouter

from . import views

router = SimpleRouter()
router.register("channels", views.ChannelViewSet, basename="channel")
router.register("models", views.ModelViewSet, basename="model")

urlpatterns = router.urls

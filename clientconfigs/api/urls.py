from django.urls import path
from rest_framework.routers import SimpleRouter

from .views import BundleView, ClientViewSet

router = SimpleRouter()
router.register("client-configs/clients", ClientViewSet, basename="client-config")

urlpatterns = [
    path("client-configs/bundle/", BundleView.as_view(), name="client-config-bundle"),
    *router.urls,
]

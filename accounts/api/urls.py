from django.urls import path
from rest_framework.routers import SimpleRouter

from . import views

router = SimpleRouter()
router.register("users", views.UserViewSet, basename="user")
router.register("teams", views.TeamViewSet, basename="team")
router.register("tokens", views.ApiTokenViewSet, basename="apitoken")
router.register("audit-log", views.AuditLogViewSet, basename="auditlog")

urlpatterns = [
    path("me/", views.MeView.as_view(), name="me"),
    *router.urls,
]

"""The hosts app's one API router: hosts (with their actions), deployments, launch jobs, fit estimate."""

from rest_framework.routers import SimpleRouter

from hosts.deployments.api import views as deployments
from hosts.downloads.api import views as downloads

from . import views

router = SimpleRouter()
router.register("hosts", views.HostViewSet, basename="host")
router.register("deployments", deployments.DeploymentViewSet, basename="deployment")
router.register("jobs", deployments.LaunchJobViewSet, basename="launchjob")
router.register("fit-estimate", deployments.FitEstimateViewSet, basename="fit-estimate")
router.register("downloads", downloads.DownloadViewSet, basename="download")

urlpatterns = router.urls

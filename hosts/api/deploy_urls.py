from rest_framework.routers import SimpleRouter

from . import deploy

router = SimpleRouter()
router.register("deployments", deploy.DeploymentViewSet, basename="deployment")
router.register("jobs", deploy.LaunchJobViewSet, basename="launchjob")
router.register("fit-estimate", deploy.FitEstimateViewSet, basename="fit-estimate")
# Only detail actions: /api/hosts/{id}/refresh-inventory/ and /confirm-host-key/ (the host
# resource itself is routed by hosts/api/urls.py, which comes first).
router.register("hosts", deploy.HostActionsViewSet, basename="host-actions")

urlpatterns = router.urls

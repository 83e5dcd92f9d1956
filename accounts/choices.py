from django.db import models
from django.utils.translation import gettext_lazy as _


class Role(models.TextChoices):
    ADMIN = "admin", _("Admin")
    TEAM_LEAD = "team_lead", _("Team lead")
    DEVELOPER = "developer", _("Developer")

from django.db import models


class Role(models.TextChoices):
    ADMIN = "admin", "Admin"
    TEAM_LEAD = "team_lead", "Team lead"
    DEVELOPER = "developer", "Developer"

from django.db import models


class Role(models.TextChoices):
    ADMIN = "admin", "Admin"
    DEVELOPER = "developer", "Developer"

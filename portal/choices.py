from django.db import models


class Role(models.TextChoices):
    ADMIN = "admin", "Admin"
    DEVELOPER = "developer", "Developer"


class AuditAction(models.TextChoices):
    CREATE = "create", "Created"
    UPDATE = "update", "Changed"
    DELETE = "delete", "Deleted"
    ACTION = "action", "Action"

"""`manage.py ensure_admin`: the first admin, for `portal up` and the compose stack's migrate step."""

import sys
from typing import Any

from django.core.management.base import BaseCommand

from accounts.services import ensure_first_admin


class Command(BaseCommand):
    help = "Create the user `admin` when no admin exists (password from PORTAL_ADMIN_PASSWORD, else printed once)."

    def handle(self, *args: Any, **options: Any) -> None:
        ensure_first_admin(sys.stdout)

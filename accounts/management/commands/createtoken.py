"""`portal manage createtoken USER`: a personal API token for scripts, without a browser."""

from __future__ import annotations

import datetime
import itertools
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from accounts.models import ApiToken, User
from accounts.services import issue_token

DEFAULT_NAME = "command line"
MAX_DAYS = 36500


class Command(BaseCommand):
    help = (
        "Print a new personal API token for USER (shown once; use it as `Authorization: Token …`). "
        "With --quiet only the token is printed, for `TOKEN=$(portal manage createtoken admin --quiet)`."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument(
            "--name",
            default=None,
            help=f"label shown under Account → API tokens (default: {DEFAULT_NAME!r}, numbered when taken)",
        )
        parser.add_argument(
            "--expires-days", type=int, default=None, help=f"expire after this many days (at most {MAX_DAYS})"
        )
        parser.add_argument("--quiet", action="store_true", help="print only the token")

    def handle(
        self, *args: Any, username: str, name: str | None, expires_days: int | None, quiet: bool, **options: Any
    ) -> None:
        try:
            user = User.objects.get(username=username)
        except User.DoesNotExist:
            raise CommandError(f"No user named {username!r}. Users: `portal manage shell` or the Users page.") from None
        if not user.is_active:
            raise CommandError(f"User {username!r} is deactivated; reactivate them first.")
        if expires_days is not None and not 0 < expires_days <= MAX_DAYS:
            raise CommandError(f"--expires-days must be a number of days from 1 to {MAX_DAYS}.")
        expires_at = timezone.now() + datetime.timedelta(days=expires_days) if expires_days else None
        taken = set(ApiToken.objects.filter(user=user, revoked_at__isnull=True).values_list("name", flat=True))
        if name is None:  # run again (a script's setup), each run gets a token of its own
            numbered = (f"{DEFAULT_NAME} {i}" for i in itertools.count(2))
            name = next(n for n in itertools.chain([DEFAULT_NAME], numbered) if n not in taken)
        elif name[:100] in taken:
            raise CommandError(f"{username!r} already has a token named {name[:100]!r}; choose another --name.")
        token, plaintext = issue_token(user=user, name=name[:100], expires_at=expires_at)
        if quiet:
            self.stdout.write(plaintext)
            return
        self.stdout.write(
            f"API token for {user.username} ({token.name}); shown once, store it now:\n\n  {plaintext}\n\n"
            f"  curl -H 'Authorization: Token {plaintext[:4]}…' http://127.0.0.1:8000/api/keys/\n"
        )

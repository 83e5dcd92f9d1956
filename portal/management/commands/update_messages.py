"""`manage.py update_messages`: refresh the zh-Hans catalog from the code and templates
(makemessages with the folders that are not ours left out), compile it, and list what is left to
translate. CONTRIBUTING.md says when to run it."""

from __future__ import annotations

from django.core.management import call_command
from django.core.management.base import BaseCommand

from portal import catalog

IGNORE = [".venv/*", "node_modules/*", "static/vendor/*", "tests/*", "bench/*", "deploy/*", "locale/*"]


class Command(BaseCommand):
    help = "Update locale/zh_Hans from the code and templates, compile it, and list untranslated messages."

    def add_arguments(self, parser):
        parser.add_argument("--no-compile", action="store_true", help="Only run makemessages.")

    def handle(self, *args, no_compile: bool = False, **options):
        for domain in ("django", "djangojs"):
            call_command(
                "makemessages",
                locale=["zh_Hans"],
                domain=domain,
                ignore_patterns=IGNORE,
                no_obsolete=True,
                add_location="file",
                verbosity=0,
            )
        if not no_compile:
            call_command("compilemessages", locale=["zh_Hans"], verbosity=0)
        missing = catalog.untranslated()
        for entry in missing:
            self.stdout.write(f"untranslated: {entry}")
        self.stdout.write(f"{len(missing)} message(s) without a zh-Hans translation")

"""Django's own form errors whose zh-Hans in Django's catalog reads badly ("确认总共不超过 14 个数字."
ends with an English full stop; "选择一个有效的选项。 %(value)s …" keeps an English space). Marked
here, with Django's exact msgids, so makemessages keeps them in our catalog, which Django reads
before its own (LOCALE_PATHS): the translations there are ours. Nothing imports this module."""

from django.utils.translation import gettext_noop, ngettext_lazy

MESSAGES = (
    gettext_noop("Ensure this value is less than or equal to %(limit_value)s."),
    gettext_noop("Ensure this value is greater than or equal to %(limit_value)s."),
    gettext_noop("Select a valid choice. %(value)s is not one of the available choices."),
    ngettext_lazy(
        "Ensure that there are no more than %(max)s digit in total.",
        "Ensure that there are no more than %(max)s digits in total.",
        "max",
    ),
    ngettext_lazy(
        "Ensure that there are no more than %(max)s decimal place.",
        "Ensure that there are no more than %(max)s decimal places.",
        "max",
    ),
    ngettext_lazy(
        "Ensure this value has at most %(limit_value)d character (it has %(show_value)d).",
        "Ensure this value has at most %(limit_value)d characters (it has %(show_value)d).",
        "limit_value",
    ),
)

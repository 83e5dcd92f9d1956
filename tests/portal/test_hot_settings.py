"""`portal.hot`: the hot path's settings as plain attributes, following a changed setting."""

import pytest
from django.test import override_settings

from portal.hot import hot


def test_a_setting_is_kept_as_an_attribute_and_follows_an_override(settings):
    settings.GATEWAY_IDLE_TIMEOUT = 12.5
    assert hot.GATEWAY_IDLE_TIMEOUT == 12.5
    assert hot.__dict__["GATEWAY_IDLE_TIMEOUT"] == 12.5  # read once, then a plain attribute
    settings.GATEWAY_IDLE_TIMEOUT = 3.0  # pytest-django's fixture: `setting_changed` forgets it
    assert hot.GATEWAY_IDLE_TIMEOUT == 3.0
    with override_settings(GATEWAY_IDLE_TIMEOUT=7.0):
        assert hot.GATEWAY_IDLE_TIMEOUT == 7.0
    assert hot.GATEWAY_IDLE_TIMEOUT == 3.0


def test_an_unknown_setting_is_an_attribute_error():
    with pytest.raises(AttributeError):
        hot.NO_SUCH_SETTING_HERE  # noqa: B018

"""The download request form (host page, launch form's "download first")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django import forms
from django.utils.translation import gettext_lazy as _

from portal.forms import SecretsAskedAgain

from .models import ModelDownload

if TYPE_CHECKING:
    _DownloadModelForm = forms.ModelForm[ModelDownload]
else:  # Django's generic forms and views take no [] at runtime
    _DownloadModelForm = forms.ModelForm


class DownloadForm(SecretsAskedAgain, _DownloadModelForm):
    token = forms.CharField(
        label=_("Access token"),
        required=False,
        strip=True,
        max_length=500,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text=_(
            "For private or gated repositories. Stored encrypted, handed to the host in a 0600 file "
            "(never on a command line) and forgotten when the download ends."
        ),
    )

    class Meta:
        model = ModelDownload
        fields = ["source", "repo_id", "revision", "pattern", "endpoint", "token", "install_tool"]
        labels = {
            "source": _("Source"),
            "repo_id": _("Repository"),
            "revision": _("Revision"),
            "pattern": _("Files"),
            "endpoint": _("Mirror (HF_ENDPOINT)"),
            "install_tool": _("Install the download tool on the host when it is missing (into a venv)"),
        }
        help_texts = {
            "repo_id": _("e.g. Qwen/Qwen3-8B, or unsloth/Qwen3-8B-GGUF for GGUF quantisations."),
            "revision": _("Branch, tag or commit."),
            "pattern": _(
                "Glob patterns separated by spaces, e.g. *Q4_K_M.gguf for one quantisation; "
                "empty downloads the whole repository."
            ),
            "endpoint": _("e.g. https://hf-mirror.com; empty: the portal's setting."),
        }

    def clean_pattern(self) -> str:
        return " ".join(self.cleaned_data.get("pattern", "").split())

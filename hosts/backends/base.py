"""What every backend shares: typed options, token validation, command preview, the API key's file.

The server's API key never goes on a command line (any user of the host could read it with `ps`):
the launch writes it to a 0600 file in the deployment's folder and the server reads it from
there, directly (llama-server `--api-key-file`, SGLang `--config`) or through an environment
variable the launcher sets from the file (vLLM's `VLLM_API_KEY`). See `Secret`.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

from channels.models import MODEL_NAME_VALIDATOR
from portal import i18n

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

MASK = "****"
# One extra argument is one token: flags, numbers, paths, key=value. Anything a shell would
# interpret (spaces, quotes, ; | & $ ` < > ( ) { } * ? ~ ! \) is refused even though we quote.
TOKEN = re.compile(r"^[A-Za-z0-9_./:=,+@%-]{1,200}$")
MAX_EXTRA_ARGS = 40


@dataclass(frozen=True)
class Option:
    """One typed backend option; `flag` is what the command line gets."""

    name: str
    type: type  # int, float, bool or str (str needs `choices` or a `pattern`)
    flag: str
    label: StrOrPromise  # lazy: translated when the form renders
    default: Any = None
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] = ()
    help: StrOrPromise = ""
    pattern: str = ""  # a str without `choices`: what its value must fully match

    def clean(self, value: Any) -> Any:
        if value in (None, ""):
            return self.default
        if self.type is bool:
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("1", "true", "on", "yes"):
                return True
            if str(value).lower() in ("0", "false", "off", "no"):
                return False
            raise ValidationError(_("Expected true or false."))
        if self.type is int:
            if isinstance(value, bool) or not re.fullmatch(r"-?\d+", str(value).strip()):
                raise ValidationError(_("Expected a whole number."))
            value = int(str(value).strip())
        elif self.type is float:
            try:
                value = float(value)
            except (TypeError, ValueError):
                raise ValidationError(_("Expected a number.")) from None
        else:
            value = str(value).strip()
            if self.choices and value not in self.choices:
                raise ValidationError(_("Choose one of: %(choices)s.") % {"choices": i18n.listing(self.choices)})
            if self.pattern and not re.fullmatch(self.pattern, value):
                raise ValidationError(_("A name of letters, digits, '_', '-' or '.'."))
        if self.min is not None and value < self.min:
            raise ValidationError(_("At least %(min)s.") % {"min": f"{self.min:g}"})
        if self.max is not None and value > self.max:
            raise ValidationError(_("At most %(max)s.") % {"max": f"{self.max:g}"})
        return value


@dataclass
class LaunchSpec:
    """Everything needed to build a command line (already validated)."""

    model_path: str
    served_model_name: str
    gpu_indices: list[int]
    port: int
    options: dict[str, Any]
    extra_args: list[str] = field(default_factory=list)
    api_key: str = ""
    bind_host: str = "0.0.0.0"  # the gateway reaches the server from another machine
    extra_env: dict[str, str] = field(default_factory=dict)  # multi-node: Ray address, NCCL interface
    distributed_backend: str = ""  # "ray" when the deployment spans several hosts

    @property
    def env(self) -> dict[str, str]:
        devices = {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in self.gpu_indices)} if self.gpu_indices else {}
        return {**devices, **self.extra_env}


def validate_extra_args(tokens: Any, reserved: set[str]) -> list[str]:
    if tokens in (None, ""):
        return []
    if isinstance(tokens, str):
        raise ValidationError(_("Give extra arguments as a list of tokens, one per item."))
    if not isinstance(tokens, list) or len(tokens) > MAX_EXTRA_ARGS:
        raise ValidationError(_("A list of at most %(MAX_EXTRA_ARGS)s tokens.") % {"MAX_EXTRA_ARGS": MAX_EXTRA_ARGS})
    cleaned = []
    for token in tokens:
        if not isinstance(token, str) or not TOKEN.fullmatch(token):
            raise ValidationError(
                _("%(token)s is not allowed: one token each, letters, digits and _ . / : = , + @ %% - only.")
                % {"token": repr(str(token)[:40])}
            )
        flag = token.split("=", 1)[0]
        if flag in reserved:
            raise ValidationError(_("%(flag)s is set by the portal; use the form field instead.") % {"flag": flag})
        cleaned.append(token)
    return cleaned


def validate_served_name(name: str) -> str:
    MODEL_NAME_VALIDATOR(name)
    return name


def mask(argv: list[str], secret: str) -> list[str]:
    return [MASK if (secret and secret in a) else a for a in argv]


def preview(argv: list[str], env: dict[str, str], secret: str) -> str:
    """The command as a person would type it, API key masked."""
    prefix = [f"{k}={v}" for k, v in env.items()]
    return shlex.join(prefix + mask(argv, secret)).replace(shlex.quote(MASK), MASK)


@dataclass(frozen=True)
class Secret:
    """The API key as the server reads it: `text` goes to `file` (mode 0600, in the deployment's
    folder, the server's working directory); when `env` is set the launcher exports the file's
    first line as that variable."""

    file: str
    text: str
    env: str = ""


class Backend:
    """Base class: subclasses set the class attributes and implement `argv` and `context_window`."""

    kind: str = ""
    label: str = ""
    binary: str = ""
    channel_kind: str = ""
    options: tuple[Option, ...] = ()
    reserved_flags: set[str] = set()
    health_path = "/health"
    key_file = "api_key"
    key_env = ""  # the server reads its key from this variable, set from `key_file` by the launcher

    def key_file_text(self, key: str) -> str:
        return key + "\n"

    def key_args(self) -> list[str]:
        """Arguments that point the server at `key_file` (none when it reads `key_env`)."""
        return []

    def secret(self, spec: LaunchSpec) -> Secret | None:
        if not spec.api_key:
            return None
        return Secret(file=self.key_file, text=self.key_file_text(spec.api_key), env=self.key_env)

    def option(self, name: str) -> Option:
        return next(o for o in self.options if o.name == name)

    def validate_model_path(self, path: str) -> str:
        raise NotImplementedError

    def clean_options(self, options: dict[str, Any] | None, gpu_count: int) -> dict[str, Any]:
        """The options typed, checked; raises a ValidationError keyed by the spec's fields
        (`options` for unknown ones, `options.<name>` for a bad value, or `gpu_indices`)."""
        try:
            return self._clean_options(options, gpu_count)
        except ValidationError as exc:
            errors = exc.message_dict.items()
            raise ValidationError(
                {k if k in ("options", "gpu_indices") else f"options.{k}": v for k, v in errors}
            ) from None

    def _clean_options(self, options: dict[str, Any] | None, gpu_count: int) -> dict[str, Any]:
        options = dict(options or {})
        unknown = set(options) - {o.name for o in self.options}
        errors: dict[str, list[str]] = {}
        if unknown:
            errors["options"] = [
                _("Unknown option(s) for %(backend)s: %(options)s.")
                % {"backend": self.label, "options": i18n.listing(sorted(unknown))}
            ]
        cleaned = {}
        for opt in self.options:
            try:
                cleaned[opt.name] = opt.clean(options.get(opt.name))
            except ValidationError as exc:
                errors[opt.name] = exc.messages
        if errors:
            raise ValidationError(errors)
        return self.check(cleaned, gpu_count)

    def check(self, options: dict[str, Any], gpu_count: int) -> dict[str, Any]:
        """Rules across options (e.g. tensor parallel = GPUs chosen)."""
        return options

    def clean(
        self,
        *,
        model_path: str,
        served_model_name: str,
        options: dict[str, Any] | None,
        extra_args: Any,
        gpu_count: int,
    ) -> tuple[dict[str, Any], list[str]]:
        """Validate everything a person typed; raises a ValidationError keyed by field."""
        errors: dict[str, list[str]] = {}
        for name, check in (("model_path", self.validate_model_path), ("served_model_name", validate_served_name)):
            try:
                check(model_path if name == "model_path" else served_model_name)
            except ValidationError as exc:
                errors[name] = exc.messages
        cleaned_options: dict[str, Any] = {}
        try:
            cleaned_options = self.clean_options(options, gpu_count)
        except ValidationError as exc:
            errors.update(exc.message_dict)
        try:
            extra = validate_extra_args(extra_args, self.reserved_flags)
        except ValidationError as exc:
            errors["extra_args"] = exc.messages
            extra = []
        if errors:
            raise ValidationError(errors)
        return cleaned_options, extra

    def argv(self, spec: LaunchSpec) -> list[str]:
        raise NotImplementedError

    def context_window(self, client: httpx.Client, root_url: str, api_key: str, served_name: str) -> int | None:
        raise NotImplementedError

    def configured_window(self, options: dict[str, Any], extra_args: list[str]) -> int | None:
        """The context window one request gets from a server started with these options, as far as
        they say it (`context_window` reads the real one once it runs); None when they do not."""
        return None

    # Arguments that make the server an embedding server: a flag alone, or a flag with one of
    # its values (`--flag value` or `--flag=value`).
    embedding_flags: frozenset[str] = frozenset()
    embedding_values: dict[str, frozenset[str]] = {}  # read only, one per backend

    def serves_embeddings(self, extra_args: list[str]) -> bool:
        """The further arguments start an embedding server (its model then gets the embedding kind
        when the launch creates it: client configs offer it for embeddings only)."""
        for i, token in enumerate(extra_args):
            flag, eq, value = token.partition("=")
            if flag in self.embedding_flags and not eq:
                return True
            if not eq and i + 1 < len(extra_args):
                value = extra_args[i + 1]
            if value in self.embedding_values.get(flag, ()):
                return True
        return False

    def fit_params(self, options: dict[str, Any], model_path: str = "") -> dict[str, Any]:
        """Inputs for the memory estimate taken from the options."""
        raise NotImplementedError

    def parse_allocation(self, log: str) -> dict[str, Any]:
        """What the server says it allocated, from its start-up log (`hosts.calibration`)."""
        return {}


_PATH = re.compile(r"^/[A-Za-z0-9_.+@=-][A-Za-z0-9_./+@=-]{0,498}$")


def validate_absolute_path(path: str, *, suffix: str = "") -> str:
    if not isinstance(path, str) or not _PATH.fullmatch(path) or "/../" in path + "/" or "//" in path:
        raise ValidationError(
            _("An absolute path on the host of letters, digits and _ . / + @ = - (no spaces, no ..).")
        )
    if suffix and not path.endswith(suffix):
        raise ValidationError(_("The path must end in %(suffix)s.") % {"suffix": suffix})
    return path

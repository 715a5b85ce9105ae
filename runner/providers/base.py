"""The provider interface: what a model backend declares and the two calls it answers.

A provider turns an ImageRequest into an ImageResult or a TextRequest into a TextResult. Failures
are raised as ProviderError with ``transient`` set so the caller knows whether a retry may help.
Secrets reach a provider only through ``secrets``; they are never part of ``settings`` and so
never part of the profile id.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from ..errors import InvalidPipeline, Location, ProviderError
from ..source.redact import MAX_MESSAGE_CHARS, Redactor
from ..state.canonical import CanonicalError, digest
from .honours import Honours, everything
from .jobs import RemoteJob
from .limits import Gate, make_gate
from .requestkey import NOT_KEYED
from .tracking import CallTracker

# A backend's account (MAX_MESSAGE_CHARS) and what runner says around it.
MAX_ERROR_CHARS = MAX_MESSAGE_CHARS + 400

# Settings that change how a call is made but never what it produces: kept out of the profile.
OPERATIONAL_SETTINGS = frozenset(
    {
        "type",
        "timeout",
        "max_concurrency",
        "max_retries",
        "retry_base_delay",
        "retry_max_delay",
        "retry_uncertain",
    }
)


class ProviderConfigError(InvalidPipeline):
    """A provider's settings are not valid (unknown key, wrong type, missing file)."""


@dataclass(frozen=True)
class Capabilities:
    """What a provider can do; steps adapt to it (seeds, references, concurrency)."""

    kinds: frozenset[str]
    supports_seed: bool = False
    supports_reference_image: bool = False
    max_concurrency: int = 4
    accepts_idempotency_key: bool = False
    # Kinds the backend offers only as an experiment (its API may change or be withdrawn).
    experimental: frozenset[str] = frozenset()

    def to_json(self) -> dict[str, Any]:
        return {
            "kinds": sorted(self.kinds),
            "experimental": sorted(self.experimental),
            "supports_seed": self.supports_seed,
            "supports_reference_image": self.supports_reference_image,
            "max_concurrency": self.max_concurrency,
            "accepts_idempotency_key": self.accepts_idempotency_key,
        }


@dataclass
class ImageRequest:
    """One image to make. ``references`` are encoded images (PNG/JPEG bytes)."""

    prompt: str
    negative_prompt: str = ""
    size: tuple[int, int] = (1024, 1024)
    seed: int | None = None
    references: list[bytes] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    # How the call is made, not what it makes: kept out of the call's key (requestkey.py).
    idempotency_key: str = field(default="", metadata=NOT_KEYED)
    # seconds; None -> the provider's configured timeout
    timeout: float | None = field(default=None, metadata=NOT_KEYED)
    # a job-queue backend's journaled job for this call
    job: RemoteJob | None = field(default=None, metadata=NOT_KEYED)
    # told when a request goes out and the backend's job id
    tracker: CallTracker | None = field(default=None, metadata=NOT_KEYED)


@dataclass
class ImageResult:
    """The image bytes with what the backend said about them (seed used, revised prompt, model)."""

    image: bytes
    metadata: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=dict)


@dataclass
class TextRequest:
    """A chat request. Each message is {role, content, images?: [bytes]}."""

    messages: list[dict[str, Any]]
    model: str | None = None
    temperature: float | None = None
    seed: int | None = None
    format: str | None = None  # None or "json"
    # keyed as "schema", the name the llm step's keys have always used
    json_schema: dict[str, Any] | None = field(default=None, metadata={"key_name": "schema"})
    max_tokens: int | None = None
    params: dict[str, Any] = field(default_factory=dict)
    idempotency_key: str = field(default="", metadata=NOT_KEYED)
    timeout: float | None = field(default=None, metadata=NOT_KEYED)
    tracker: CallTracker | None = field(default=None, metadata=NOT_KEYED)


@dataclass
class TextResult:
    """The reply text; usage holds prompt_tokens/completion_tokens when the backend reports them."""

    text: str
    metadata: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently transient failures of this provider are retried."""

    attempts: int = 4
    base_delay: float = 1.0
    cap: float = 30.0


class Provider:
    """Base class of every provider. Subclasses set the class attributes and the generate calls.

    Class attributes:
      key: the registered name.  version: bump when the same settings would produce other output.
      default_capabilities: what ``runner providers`` lists.
      known_settings: accepted settings besides the operational ones; others are refused.
      operational_settings: how calls are made, not what they produce: never in the profile.
      defaults: default setting values (part of the profile, so a changed default shows).
    """

    key: ClassVar[str] = ""
    version: ClassVar[str] = "1"
    description: ClassVar[str] = ""
    default_capabilities: ClassVar[Capabilities] = Capabilities(kinds=frozenset())
    known_settings: ClassVar[frozenset[str]] = frozenset()
    defaults: ClassVar[Mapping[str, Any]] = {}
    operational_settings: ClassVar[frozenset[str]] = OPERATIONAL_SETTINGS
    default_timeout: ClassVar[float] = 120.0
    # A job-queue backend: its image calls carry a RemoteJob the step journals (see jobs.py).
    remote_jobs: ClassVar[bool] = False
    # Request fields, by kind ("image", "text"), that this provider never puts on the wire: kept
    # out of its calls' keys (requestkey.py), so changing one does not send the same request again.
    not_sent: ClassVar[Mapping[str, frozenset[str]]] = {}
    default_retry: ClassVar[RetryPolicy] = RetryPolicy()

    def __init__(
        self,
        *,
        settings: Mapping[str, Any] | None = None,
        secrets: Mapping[str, str] | None = None,
        base_dir: Path | None = None,
        name: str | None = None,
    ) -> None:
        given = dict(settings or {})
        unknown = sorted(set(given) - self.known_settings - self.operational_settings)
        if unknown:
            allowed = ", ".join(sorted(self.known_settings | self.operational_settings))
            raise ProviderConfigError(
                f"provider '{name or self.key}': unknown setting(s) {', '.join(unknown)}",
                hint=f"accepted settings: {allowed}",
            )
        self.settings: dict[str, Any] = {**self.defaults, **given}
        self.secrets: dict[str, str] = dict(secrets or {})
        self.base_dir = base_dir or Path.cwd()
        self.name = name or self.key
        self.redactor = Redactor(self.secrets.values())
        self._gate: Gate | None = None
        self._profile_memo: tuple[dict[str, Any], str] | None = None

    # --- identity -------------------------------------------------------------------------

    def profile_settings(self) -> dict[str, Any]:
        """The settings that can change output; subclasses add content hashes of named files."""
        return {
            k: v
            for k, v in self.settings.items()
            if k not in self.operational_settings and not k.endswith("_env")
        }

    def profile(self) -> str:
        """``<key>@<version>:<12 hex of the canonical settings>``; secrets are never hashed.

        Raises ProviderConfigError when a setting is not plain JSON data.
        """
        settings = self.profile_settings()
        memo = self._profile_memo
        # Asked several times per call (key, ledger, output): hashed again only on a change.
        if memo is not None and memo[0] == settings:
            return memo[1]
        try:
            h = digest(settings)[:12]
        except CanonicalError as exc:
            raise ProviderConfigError(f"provider '{self.name}': settings {exc}") from None
        profile = f"{self.key}@{self.version}:{h}"
        self._profile_memo = (copy.deepcopy(settings), profile)
        return profile

    # --- configuration helpers --------------------------------------------------------------

    @property
    def capabilities(self) -> Capabilities:
        caps = self.default_capabilities
        if "max_concurrency" in self.settings:
            caps = replace(caps, max_concurrency=self.int_setting("max_concurrency", minimum=1))
        return caps

    @property
    def gate(self) -> Gate:
        """Bounds this provider's calls in flight by ``max_concurrency``, across the whole run
        (across the cluster, on Dask workers: limits.ClusterGate)."""
        if self._gate is None:
            self._gate = make_gate(self.name, self.capabilities.max_concurrency)
        return self._gate

    def can_reroute(self) -> bool:
        """A call whose backend refused it can go to another one at once (pools say so)."""
        return False

    def keep_clients(self) -> None:
        """Keep connections open across calls until ``aclose`` (a run does; HTTP providers)."""

    async def aclose(self) -> None:
        """Release what the provider kept open for the run (HTTP connections); idempotent."""

    @property
    def timeout(self) -> float:
        return self.float_setting("timeout", self.default_timeout)

    def retry_policy(self) -> RetryPolicy:
        d = self.default_retry
        return RetryPolicy(
            attempts=1 + self.int_setting("max_retries", d.attempts - 1, minimum=0),
            base_delay=self.float_setting("retry_base_delay", d.base_delay),
            cap=self.float_setting("retry_max_delay", d.cap),
        )

    @property
    def retry_uncertain(self) -> bool:
        """``retry_uncertain = true``: calls whose reply was lost may be sent again (and paid)."""
        value = self.settings.get("retry_uncertain", False)
        if not isinstance(value, bool):
            raise ProviderConfigError(f"provider '{self.name}': retry_uncertain must be true/false")
        return value

    def int_setting(self, name: str, default: int = 0, *, minimum: int | None = None) -> int:
        value = self.settings.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ProviderConfigError(f"provider '{self.name}': {name} must be an integer")
        if minimum is not None and value < minimum:
            raise ProviderConfigError(f"provider '{self.name}': {name} must be >= {minimum}")
        return value

    def float_setting(self, name: str, default: float) -> float:
        value = self.settings.get(name, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ProviderConfigError(f"provider '{self.name}': {name} must be a number >= 0")
        return float(value)

    def str_setting(self, name: str, default: str = "") -> str:
        value = self.settings.get(name, default)
        if not isinstance(value, str):
            raise ProviderConfigError(f"provider '{self.name}': {name} must be a string")
        return value

    def redact(self, text: str) -> str:
        """``text`` with this provider's secrets replaced by ``***``."""
        return self.redactor.redact(text)

    def error(
        self,
        message: str,
        *,
        transient: bool = False,
        maybe_executed: bool = False,
        status: int | None = None,
        retry_after: float | None = None,
        remote_id: str | None = None,
    ) -> ProviderError:
        """A ProviderError naming this provider, its message redacted (see errors.Failure)."""
        return ProviderError(
            # redacted before it is cut: a key straddling the cut must not leave its head
            f"{self.name}: {self.redactor.clip(message, MAX_ERROR_CHARS)}",
            transient=transient,
            maybe_executed=maybe_executed,
            status=status,
            retry_after=retry_after,
            provider=self.name,
            remote_id=remote_id,
        )

    def honours(self, kind: str) -> Honours:
        """The request settings this provider puts on the wire for ``kind`` ("image", "text"):
        a step setting anything else is refused before any call (providers/honours.py). A
        provider that declares nothing is taken at its word for everything."""
        return everything(kind)

    def check(self, *, references: int | None, where: Location | None = None) -> None:
        """Compile-time checks of this provider for one step (``references``: how many reference
        images the step gives, None when not known before it runs). Raises ProviderConfigError.
        """

    def size_refused(
        self, size: tuple[int, int], params: Mapping[str, Any]
    ) -> tuple[str, str] | None:
        """(why, the sizes accepted) when this provider would refuse an image of ``size`` with
        the step's ``params`` (its model...), else None. Asked before the first step runs; a
        provider that cannot tell beforehand (a ComfyUI workflow decides) answers None."""
        return None

    # --- the calls --------------------------------------------------------------------------

    async def generate_image(self, request: ImageRequest) -> ImageResult:
        """Make one image. Raises ProviderError (transient or permanent)."""
        raise self.error("this provider does not generate images", transient=False)

    async def generate_text(self, request: TextRequest) -> TextResult:
        """Answer a chat request. Raises ProviderError (transient or permanent)."""
        raise self.error("this provider does not generate text", transient=False)

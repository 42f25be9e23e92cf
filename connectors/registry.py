"""Find connector classes by type name and build configured connectors.

Every connector — built-in or third-party — is registered in the ``gpu_ledger.connectors``
entry-point group (``pip install -e .`` registers the built-ins), the entry point naming the class::

    [project.entry-points."gpu_ledger.connectors"]
    npu_exporter = "acme_npu.connector:NpuExporterConnector"

A plugin whose import fails because an optional dependency is missing (``boto3`` for
``cloudwatch``) is logged and skipped; asking for it then says which module is missing and which
extra of the plugin's distribution brings it (``pip install 'gpu-ledger[aws]'``). Any other
import error is a bug and is raised. ``GPU_LEDGER_DISABLED_CONNECTORS=a,b`` disables types by name.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Protocol

from pydantic import ValidationError

from connectors.sdk import ConfigurationError, ConnectorConfig

ENTRY_POINT_GROUP = "gpu_ledger.connectors"
DISABLED_ENV = "GPU_LEDGER_DISABLED_CONNECTORS"

log = logging.getLogger(__name__)


class UnknownConnectorType(ConfigurationError):
    """No connector class is registered (or enabled) under this type name."""


class ConnectorConfigError(ConfigurationError):
    """A ``[[connectors]]`` table is wrong; ``problems`` are ``(key, message)`` pairs."""

    def __init__(self, connector: str, type_name: str, problems: list[tuple[str, str]]):
        self.connector, self.type_name, self.problems = connector, type_name, problems
        details = "; ".join(f'key "{key}": {msg}' if key else msg for key, msg in problems)
        super().__init__(f'connector "{connector}" (type "{type_name}"): {details}')


class ConnectorClass(Protocol):
    """What the registry needs of a registered class: the model its configs validate with, and a
    constructor taking one such config (keyword arguments: clocks and clients, for tests)."""

    config_model: type[ConnectorConfig]

    def __call__(self, config: Any, /, **kwargs: Any) -> Any: ...


class Registry:
    """Connector classes by type name, loaded lazily from entry points.

    Tests build one from their own ``EntryPoint`` objects; production uses :data:`default`.
    """

    def __init__(self, eps: Iterable[EntryPoint] | None = None, disabled: Iterable[str] | None = None):
        self._eps: dict[str, EntryPoint] = {}
        for ep in entry_points(group=ENTRY_POINT_GROUP) if eps is None else eps:
            self._eps.setdefault(ep.name, ep)  # the first wins when a plugin is installed twice
        if disabled is None:
            disabled = os.environ.get(DISABLED_ENV, "").split(",")
        self.disabled = frozenset(d.strip() for d in disabled if d.strip())
        self._classes: dict[str, ConnectorClass] = {}
        self._missing: dict[str, str] = {}  # type name → missing optional module
        self._install_hint: dict[str, str] = {}  # type name → how to install it

    def known_types(self) -> list[str]:
        """Registered, enabled type names (not imported yet: listing is cheap)."""
        return sorted(n for n in self._eps if n not in self.disabled and n not in self._missing)

    def connector_class(self, type_name: str) -> ConnectorClass:
        """The class registered as ``type_name``; :class:`UnknownConnectorType` if none."""
        if type_name in self._classes:
            return self._classes[type_name]
        if type_name in self.disabled:
            raise UnknownConnectorType(f'connector type "{type_name}" is disabled by {DISABLED_ENV}')
        ep = self._eps.get(type_name)
        if ep is None:
            known = ", ".join(self.known_types()) or "none installed"
            raise UnknownConnectorType(f'unknown connector type "{type_name}"; known types: {known}')
        if type_name in self._missing:
            raise UnknownConnectorType(self._missing_message(type_name))
        try:
            cls = ep.load()
        except ModuleNotFoundError as exc:
            if not _is_optional_dependency(exc, ep):
                raise
            self._missing[type_name] = exc.name or str(exc)
            self._install_hint[type_name] = install_hint(ep, self._missing[type_name])
            log.warning("connector plugin %s skipped: %s", type_name, self._missing_message(type_name))
            raise UnknownConnectorType(self._missing_message(type_name)) from exc
        if not isinstance(getattr(cls, "config_model", None), type) or not issubclass(
            cls.config_model, ConnectorConfig
        ):
            raise TypeError(f"connector {ep.value} has no config_model subclassing ConnectorConfig")
        self._classes[type_name] = cls
        return cls

    def _missing_message(self, type_name: str) -> str:
        return (
            f'connector type "{type_name}" needs the module "{self._missing[type_name]}", which is not '
            f"installed: {self._install_hint[type_name]}"
        )

    def validate(self, table: Mapping[str, Any]) -> ConnectorConfig:
        """The ``[[connectors]]`` table validated by its type's ``config_model``."""
        name = str(table.get("name") or "")
        type_name = table.get("type")
        if not name:
            raise ConnectorConfigError("?", str(type_name), [("name", "missing")])
        if not isinstance(type_name, str) or not type_name:
            raise ConnectorConfigError(name, str(type_name), [("type", "missing")])
        try:
            cls = self.connector_class(type_name)
        except UnknownConnectorType as exc:
            raise ConnectorConfigError(name, type_name, [("type", str(exc))]) from exc
        try:
            return cls.config_model.model_validate(dict(table))
        except ValidationError as exc:
            raise ConnectorConfigError(name, type_name, validation_problems(exc)) from None

    def build(self, table: Mapping[str, Any] | ConnectorConfig, **kwargs: Any) -> Any:
        """A connector instance: ``cls(config, **kwargs)`` (kwargs: clocks, clients — tests)."""
        config = table if isinstance(table, ConnectorConfig) else self.validate(table)
        return self.connector_class(config.type)(config, **kwargs)


def validation_problems(exc: ValidationError) -> list[tuple[str, str]]:
    """``(key, message)`` per error, "unknown key" for ``extra='forbid'`` violations."""
    problems = []
    for err in exc.errors(include_url=False):
        key = ".".join(str(p) for p in err["loc"])
        msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        problems.append((key, msg))
    return problems


#: Extras that are never the way to install a connector's dependencies.
_TOOLING_EXTRAS = frozenset({"test", "tests", "dev", "docs", "lint"})
_REQUIREMENT_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def _dashed(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def extras_providing(module: str, requires: Iterable[str]) -> list[str]:
    """The extras among ``requires`` (a distribution's ``Requires-Dist`` lines) whose requirement
    brings ``module``: the requirement's name is the module's dotted path dashed (``azure.identity``
    → ``azure-identity``), or a prefix of it, or starts with it (``google`` → ``google-cloud-…``).
    With no such requirement, the same for the module's parent package (``google.api_core``, a
    dependency of a dependency, → ``google`` → the ``google-cloud-…`` requirements)."""
    declared = []
    for line in requires:
        name, extra = _REQUIREMENT_NAME.match(line), _EXTRA_MARKER.search(line)
        if name is not None and extra is not None and extra[1] not in _TOOLING_EXTRAS:
            declared.append((_dashed(name[1]), extra[1]))
    parts = module.split(".")
    for length in range(len(parts), 0, -1):
        wanted = _dashed(".".join(parts[:length]))
        extras: list[str] = []
        for have, extra_name in declared:
            if have == wanted or have.startswith(wanted + "-") or wanted.startswith(have + "-"):
                extras += [extra_name] if extra_name not in extras else []
        if extras:
            return extras
    return []


def install_hint(ep: EntryPoint, module: str) -> str:
    """How to install what ``ep``'s plugin misses: ``pip install 'DIST[EXTRA]'`` when its
    distribution declares an extra that brings ``module``, else ``pip install`` the module's
    distribution."""
    dist = ep.dist
    if dist is not None:
        extras = extras_providing(module, dist.requires or ())
        if extras:
            project = dist.metadata["Name"]
            return " or ".join(f"pip install '{project}[{extra}]'" for extra in extras)
    return f"pip install the distribution that provides {module.split('.')[0]!r}"


def _is_optional_dependency(exc: ModuleNotFoundError, ep: EntryPoint) -> bool:
    """A missing third-party module, not a missing module of the plugin's own package."""
    own_root = ep.value.split(":")[0].split(".")[0]
    missing_root = (exc.name or "").split(".")[0]
    return bool(missing_root) and missing_root != own_root


_default: Registry | None = None


def default_registry() -> Registry:
    """The process-wide registry (entry points and the disable list read once)."""
    global _default
    if _default is None:
        _default = Registry()
    return _default


def connector_class(type_name: str) -> ConnectorClass:
    return default_registry().connector_class(type_name)


def validate_config(table: Mapping[str, Any]) -> ConnectorConfig:
    return default_registry().validate(table)


def build_connector(table: Mapping[str, Any] | ConnectorConfig, **kwargs: Any) -> Any:
    """Validate a ``[[connectors]]`` table (or take a validated config) and build ``cls(config)``."""
    return default_registry().build(table, **kwargs)

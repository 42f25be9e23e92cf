"""Checks the deployment tests share: Kubernetes objects against the official client's models,
and ``GPU_LEDGER_*`` variables against the settings they claim to set."""

from __future__ import annotations

import contextlib
import http.server
import re
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from connectors.registry import default_registry
from service.api.answer_cache_settings import AnswerCacheSettings
from service.auth.config import AuthSettings
from service.limits import Limits
from service.settings import CONFIG_ENV, CONNECTOR_ENV_PREFIX, ENV_PREFIX, SCALARS

ROOT = Path(__file__).resolve().parents[2]
K8S_DIR = ROOT / "deploy" / "kubernetes"

#: The ``[table]`` settings a ``GPU_LEDGER_<TABLE>__<KEY>`` variable may set, and their models.
TABLES = {"LIMITS": Limits, "AUTH": AuthSettings, "ANSWER_CACHE": AnswerCacheSettings}
#: Read by connectors.registry, not by the settings model.
OTHER_VARS = {CONFIG_ENV, "GPU_LEDGER_DISABLED_CONNECTORS"}


def load_documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def kustomize_resources() -> dict[str, dict[str, Any]]:
    """Every object ``deploy/kubernetes/kustomization.yaml`` lists, by ``Kind/name``."""
    kustomization = yaml.safe_load((K8S_DIR / "kustomization.yaml").read_text())
    objects: dict[str, dict[str, Any]] = {}
    for resource in kustomization["resources"]:
        for doc in load_documents(K8S_DIR / resource):
            key = f"{doc['kind']}/{doc['metadata']['name']}"
            assert key not in objects, f"{key} defined twice"
            objects[key] = doc
    return objects


def model_name(doc: Mapping[str, Any]) -> str:
    """``apps/v1`` + ``Deployment`` → ``V1Deployment`` (the client's class name)."""
    version = str(doc["apiVersion"]).rsplit("/", 1)[-1]
    return version[:1].upper() + version[1:] + str(doc["kind"])


def model_problems(data: Any, type_name: str, path: str = "") -> list[str]:
    """Where ``data`` does not fit the client's ``type_name``: unknown fields (which the client's
    own deserializer silently drops, and the API server rejects or ignores), wrong JSON types."""
    import kubernetes.client as k8s

    if data is None:
        return []
    if m := re.fullmatch(r"(?:list|List)\[(.+)\]", type_name):
        if not isinstance(data, list):
            return [f"{path}: expected a list, got {type(data).__name__}"]
        return [p for i, item in enumerate(data) for p in model_problems(item, m[1], f"{path}[{i}]")]
    if m := re.fullmatch(r"dict\(([^,]+), (.+)\)|Dict\[([^,]+), (.+)\]", type_name):
        if not isinstance(data, dict):
            return [f"{path}: expected a mapping, got {type(data).__name__}"]
        value_type = m[2] or m[4]
        return [p for k, v in data.items() for p in model_problems(v, value_type, f"{path}.{k}")]
    scalars: dict[str, tuple[type, ...]] = {
        "str": (str,),
        "int": (int,),
        "float": (int, float),
        "bool": (bool,),
        "datetime": (str,),
        "date": (str,),
        "bytes": (str,),
        "object": (object,),
    }
    if type_name in scalars:
        ok = isinstance(data, scalars[type_name]) and not (type_name == "int" and isinstance(data, bool))
        return [] if ok else [f"{path}: expected {type_name}, got {type(data).__name__} {data!r}"]
    cls = getattr(k8s, type_name)
    if not isinstance(data, dict):
        return [f"{path}: expected a {type_name} mapping, got {type(data).__name__}"]
    by_json = {json_key: attr for attr, json_key in cls.attribute_map.items()}
    problems = [f"{path}.{key}: no such field in {type_name}" for key in data if key not in by_json]
    for key, value in data.items():
        if key in by_json:
            problems += model_problems(value, cls.openapi_types[by_json[key]], f"{path}.{key}")
    return problems


def deserialize(doc: Mapping[str, Any]) -> Any:
    """The client's model object for ``doc``; its constructors raise ``ValueError`` for a missing
    required field (client-side validation is on by default)."""
    from kubernetes.client import ApiClient

    client = ApiClient()
    try:
        return client._ApiClient__deserialize(dict(doc), model_name(doc))  # type: ignore[attr-defined]
    finally:
        client.close()


def unknown_ledger_vars(env: Mapping[str, str], connector_names: Mapping[str, type]) -> list[str]:
    """``GPU_LEDGER_*`` names in ``env`` that set nothing: not a scalar setting, not a key of
    ``[limits]``/``[auth]``/``[answer_cache]``, not a key of a configured connector's model
    (``connector_names``: its name as written in the variable → its config model)."""
    bad = []
    for name in env:
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in OTHER_VARS:
            continue
        rest = upper[len(ENV_PREFIX) :]
        if upper.startswith(CONNECTOR_ENV_PREFIX):
            connector, _, key = upper[len(CONNECTOR_ENV_PREFIX) :].partition("__")
            model = connector_names.get(connector)
            if model is None or key.lower() not in model.model_fields:
                bad.append(name)
        elif "__" in rest:
            table, _, key = rest.partition("__")
            if table not in TABLES or key.lower() not in TABLES[table].model_fields:
                bad.append(name)
        elif rest.lower() not in SCALARS:
            bad.append(name)
    return bad


def connector_models(settings: Any) -> dict[str, type]:
    """Configured connectors as ``unknown_ledger_vars`` wants them."""
    registry = default_registry()
    return {
        c.name.upper().replace("-", "_").replace(".", "_"): registry.connector_class(c.type).config_model
        for c in settings.connectors
    }


@contextlib.contextmanager
def health_server(ok_paths: set[str]) -> Iterator[int]:
    """A local HTTP server answering 200 on ``ok_paths`` and 404 elsewhere; yields its port."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            self.send_response(200 if self.path in ok_paths else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()

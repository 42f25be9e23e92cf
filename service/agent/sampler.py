"""Where the agent's readings come from: a :class:`Sampler`.

Production: ``connectors.nvml.NvmlSampler`` (imported only when used, so the agent package
imports on machines without a GPU or NVML). Tests hand the agent a deterministic sampler on a
fixed clock. ``source = "module:Class"`` in the ``[agent]`` table plugs in another one.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Protocol, runtime_checkable

from connectors.attribution import PodDirectory, ProcessAttributor
from connectors.docker_api import DockerEngine
from connectors.sdk.metrics import DeviceInfo, SampleBatch
from service.agent.config import AgentSettings
from service.agent.keys import check_table, describe
from service.agent.kube import KubeSampler, start_kube
from service.agent.nvml_options import NVML_KEYS, NvmlSettings

NVML = "connectors.nvml:NvmlSampler"


@runtime_checkable
class Sampler(Protocol):
    """One reading of every device of the node, now.

    ``sample()`` returns a :class:`~connectors.base.SampleBatch` whose rows all carry the reading
    time (``ts_ms``) and the units of ``connectors.base.SAMPLE_COLUMNS`` (percent, W, J counter,
    bytes, °C), with the devices and the workloads it names. It must be cheap (it runs every
    ``period_s``) and may raise; the agent logs the error and tries again next period.
    ``devices()`` is the node's devices now. Optionally ``pci_bus_id(device_id) -> str | None``
    fills the exporter's ``pci_bus_id`` label.
    """

    def devices(self) -> list[DeviceInfo]: ...

    def sample(self) -> SampleBatch: ...


def load_sampler(settings: AgentSettings) -> Sampler:
    """The sampler ``settings.source`` names: ``"nvml"`` or ``"module:Class"``.

    The class is built as ``cls(config)`` where ``config`` is, for NVML, ``NvmlSettings`` checked
    by the agent itself (no pydantic in the agent: ``service.agent.nvml_options``); for another
    class, its ``config_model`` (when it has one) validated from ``name``, ``period_s`` and
    ``[agent.source_options]``, else those options as a dict. NVML is not touched here:
    ``NvmlSampler`` starts it on first use.
    """
    spec = NVML if settings.source == "nvml" else settings.source
    module_name, _, class_name = spec.partition(":")
    if not class_name:
        raise ValueError(f'source "{settings.source}": expected "nvml" or "module:Class"')
    cls: Any = getattr(importlib.import_module(module_name), class_name)
    options: dict[str, Any] = {"name": settings.name, "type": settings.source.split(":")[0]}
    config: Any
    if spec == NVML:
        options["period_s"] = settings.period_s  # one period for the loop and the sampler
        options.update(settings.source_options)
        values, problems = check_table(options, NVML_KEYS)
        if problems:
            raise ValueError(f"[agent.source_options] for {spec}: {describe(problems)}")
        config = NvmlSettings(**values)
    else:
        config = _validated(cls, spec, options, settings)
    meta, pod_resources = start_kube(settings)
    pids = attributor(settings, meta)
    sampler = cls(config, attributor=pids) if _takes_attributor(cls) else cls(config)
    if not isinstance(sampler, Sampler):
        raise TypeError(f"{spec} is not a Sampler (needs devices() and sample())")
    if meta is None and pod_resources is None:
        return sampler
    holder = pids.pod_workload if _takes_attributor(cls) else None
    return KubeSampler(sampler, meta=meta, pod_resources=pod_resources, describe=holder)


def _validated(cls: Any, spec: str, options: dict[str, Any], settings: AgentSettings) -> Any:
    """Another sampler's options through its pydantic ``config_model`` (imported only then)."""
    model = getattr(cls, "config_model", None)
    if model is None:
        return options | settings.source_options
    from pydantic import ValidationError

    from connectors.registry import validation_problems

    if "period_s" in model.model_fields:
        options["period_s"] = settings.period_s  # one period for the loop and the sampler
    try:
        return model.model_validate(options | settings.source_options)
    except ValidationError as exc:
        raise ValueError(f"[agent.source_options] for {spec}: {describe(validation_problems(exc))}") from None


def _takes_attributor(cls: Any) -> bool:
    return "attributor" in inspect.signature(cls).parameters


def attributor(settings: AgentSettings, pods: PodDirectory | None = None) -> ProcessAttributor:
    """PID → workload for this node: cgroups under ``proc_root``, Docker labels, the Kubernetes
    API's pods (``pods``), the rules."""
    docker = DockerEngine(settings.docker_socket) if settings.docker_socket is not None else None
    return ProcessAttributor(
        settings.attribution_rules, proc_root=settings.proc_root, docker=docker, pods=pods
    )

"""The node agent (``gpu-ledger agent``): sample every GPU of a node, spool, ship, export.

* ``config`` — the ``[agent]`` table of the agent's TOML file.
* ``sampler`` — the :class:`~service.agent.sampler.Sampler` Protocol (NVML in production).
* ``spool`` — batches on disk, in order, before anything is sent.
* ``ship`` — sends spooled batches to ``POST /api/v1/batches`` with retry and backoff.
* ``exporter`` — ``/metrics`` with dcgm-exporter's names and labels.
* ``loop`` — the :class:`~service.agent.loop.Agent` that ties them together on one clock.
"""

"""The ``[answer_cache]`` settings table (:mod:`service.api.answer_cache`), light enough for
:mod:`service.settings` to import without the API."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

MIB = 1024 * 1024


class AnswerCacheSettings(BaseModel):
    """The ``[answer_cache]`` table::

        [answer_cache]
        max_b = 268435456        # bytes of answers kept per worker process (0: no cache)
        entry_max_b = 8388608    # larger answers are computed every time, never kept

    ``GPU_LEDGER_ANSWER_CACHE__MAX_B=0`` (environment) turns the cache off.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_b: int = Field(default=256 * MIB, ge=0)
    entry_max_b: int = Field(default=8 * MIB, gt=0)

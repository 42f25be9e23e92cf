"""One daily series forecast by exponential smoothing, with prediction intervals (docs/forecast.md).

* ``n >= 14`` days (two full weeks): **Holt-Winters** — additive level, additive trend, additive
  season of 7 days (ETS(A,A,A)), fitted by statsmodels' ``ExponentialSmoothing`` (initial states
  estimated with the smoothing parameters, least squares on the one-step errors).
* ``7 <= n < 14``: **Holt's linear trend** (ETS(A,A,N)): one week says too little about a weekday
  pattern for 7 seasonal states plus level and trend.
* ``n < 7``: :class:`HistoryTooShort`.
* the smoother fails or gives a non-finite forecast (not seen in tests; numerical trouble must not
  become a server error): **seasonal naive** — each day as the same weekday of the last week,
  σ from the week-on-week differences, intervals widening with the number of weeks ahead.
* a constant series (a fleet that never changed, a group with no cost): that constant, intervals
  of width 0 — a smoother would only add rounding noise to it.

Prediction intervals are the analytic ones of the additive (class 1) ETS models (Hyndman et al.,
*Forecasting with Exponential Smoothing*, 2008, table 6.1): the h-step variance is
``σ² (1 + Σ_{j<h} c_j²)`` with ``c_j = α (1 + j β*) + γ [j ≡ 0 mod 7]`` and
``σ² = SSE / (n − k)``, k the fitted parameters; bounds are ``mean ± z σ_h`` of a normal.
statsmodels' own ``ETSModel`` gives the same intervals but fits by maximum likelihood in ~40×
the time (0.7 s against 20 ms per series on the shared 2-core machine), and a forecast answer
fits up to hundreds of series.

The series are GPU-hours and money, never negative: means and bounds are clipped at 0.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from service.analytics.errors import QueryError

SEASON_DAYS = 7
#: Two full weeks: the least history the seasonal model is fitted on.
SEASONAL_MIN_DAYS = 2 * SEASON_DAYS
#: One week: the least history of any model.
MIN_DAYS = SEASON_DAYS

HOLT_WINTERS = "HOLT_WINTERS_ADDITIVE_WEEKLY"
HOLT_LINEAR = "HOLT_LINEAR_TREND"
CONSTANT = "CONSTANT"
SEASONAL_NAIVE = "SEASONAL_NAIVE"


class HistoryTooShort(QueryError):
    code = "HISTORY_TOO_SHORT"


@dataclass(frozen=True)
class SeriesForecast:
    """``mean[h]`` for the ``h+1``-th day after the history; ``bounds[level] = (lower, upper)``."""

    model: str
    mean: np.ndarray
    bounds: dict[float, tuple[np.ndarray, np.ndarray]]
    sigma: float  # standard deviation of the one-step errors (0 for CONSTANT)


def _psi(alpha: float, beta: float, gamma: float, horizon: int, seasonal: bool) -> np.ndarray:
    """``c_j`` for j = 1 … horizon − 1 (the weights of past errors in an h-step forecast)."""
    j = np.arange(1, horizon, dtype=np.float64)
    c = alpha * (1.0 + j * beta)
    if seasonal:
        c = c + gamma * (j % SEASON_DAYS == 0)
    return c


def _bounds(
    mean: np.ndarray, sigma: float, c: np.ndarray, levels: Sequence[float]
) -> dict[float, tuple[np.ndarray, np.ndarray]]:
    # Var(h) = σ² (1 + Σ_{j=1}^{h-1} c_j²): h = 1 has σ² alone.
    sd = sigma * np.sqrt(1.0 + np.concatenate([[0.0], np.cumsum(c**2)]))
    out: dict[float, tuple[np.ndarray, np.ndarray]] = {}
    for level in levels:
        z = NormalDist().inv_cdf(0.5 + level / 200.0)
        out[level] = (np.maximum(mean - z * sd, 0.0), np.maximum(mean + z * sd, 0.0))
    return out


def forecast_series(
    history: Sequence[float] | np.ndarray, horizon: int, levels: Sequence[float]
) -> SeriesForecast:
    """Forecast ``horizon`` days after the daily ``history`` (oldest first; missing days are 0)
    with prediction intervals at ``levels`` (% , each in (0, 100))."""
    y = np.asarray(history, dtype=np.float64)
    n = y.size
    if n < MIN_DAYS:
        raise HistoryTooShort(
            f"{n} days of history: a forecast needs at least {MIN_DAYS} whole UTC days "
            f"({SEASONAL_MIN_DAYS} for the weekly season)"
        )
    if not np.isfinite(y).all():
        raise ValueError("a history value is not finite")
    if np.ptp(y) == 0.0:
        mean = np.full(horizon, max(y[0], 0.0))
        return SeriesForecast(CONSTANT, mean, {lv: (mean, mean) for lv in levels}, 0.0)
    seasonal = n >= SEASONAL_MIN_DAYS
    # Imported here: statsmodels (and pandas, scipy) cost ~1 s to import, which no other command
    # of the CLI should pay.
    from statsmodels.tsa.holtwinters import ExponentialSmoothing

    model = ExponentialSmoothing(
        y,
        trend="add",
        seasonal="add" if seasonal else None,
        seasonal_periods=SEASON_DAYS if seasonal else None,
        initialization_method="estimated",
    )
    try:
        with warnings.catch_warnings():
            # ConvergenceWarning on short or flat series: the least-squares fit is still the best
            # found, and its residual variance widens the intervals accordingly. A series the
            # model fits exactly (SSE 0) makes statsmodels take log(0) for its information
            # criteria as the results are read: harmless here (σ = 0), so the reads stay inside.
            warnings.simplefilter("ignore")
            fit = model.fit(use_brute=False, method="least_squares")
            params = fit.params
            alpha = float(params["smoothing_level"])
            beta = float(params["smoothing_trend"])
            gamma = float(params["smoothing_seasonal"]) if seasonal else 0.0
            # α, β*, γ, the initial level and trend, and the 7 initial seasonal states.
            k = 5 + (SEASON_DAYS if seasonal else 0)
            sigma = math.sqrt(float(fit.sse) / max(n - k, 1))
            mean = np.asarray(fit.forecast(horizon), dtype=np.float64)
    except (ValueError, ArithmeticError, np.linalg.LinAlgError):
        return seasonal_naive(y, horizon, levels)
    if not (np.isfinite(mean).all() and math.isfinite(sigma) and math.isfinite(alpha + beta + gamma)):
        return seasonal_naive(y, horizon, levels)
    c = _psi(alpha, beta, gamma, horizon, seasonal)
    bounds = _bounds(mean, sigma, c, levels)
    return SeriesForecast(HOLT_WINTERS if seasonal else HOLT_LINEAR, np.maximum(mean, 0.0), bounds, sigma)


def seasonal_naive(y: np.ndarray, horizon: int, levels: Sequence[float]) -> SeriesForecast:
    """Each day as the same weekday of the history's last week; σ of the week-on-week changes, the
    h-step variance σ² × (weeks ahead), as for a random walk by weekday."""
    if y.size < SEASON_DAYS:
        raise HistoryTooShort(f"{y.size} days of history: the seasonal naive forecast needs a week")
    h = np.arange(horizon)
    mean = y[-SEASON_DAYS:][h % SEASON_DAYS]  # day n + h is the weekday of day n - 7 + h mod 7
    diffs = y[SEASON_DAYS:] - y[:-SEASON_DAYS]
    sigma = float(np.sqrt(np.mean(diffs**2))) if diffs.size else 0.0
    sd = sigma * np.sqrt(h // SEASON_DAYS + 1.0)
    bounds: dict[float, tuple[np.ndarray, np.ndarray]] = {}
    for level in levels:
        z = NormalDist().inv_cdf(0.5 + level / 200.0)
        bounds[level] = (np.maximum(mean - z * sd, 0.0), np.maximum(mean + z * sd, 0.0))
    return SeriesForecast(SEASONAL_NAIVE, np.maximum(mean, 0.0), bounds, sigma)

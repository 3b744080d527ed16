"""Prefill as a Service: where to prefill, and how to split the decode site (seed 003, §3.4, eqs. 3-8).

A prefill site (PrfaaS) with N_prfaas instances prefills the long requests and ships their KV over a link of
B_out bytes/s to the decode site; the decode site's own N_p prefill instances take the short ones, its N_d
decode instances serve every request. With a routing threshold t (a request whose uncached increment is
longer than t goes to the prefill site):

  p       = P(L > t),  l_long = E[L | L > t],  l_short = E[L | L <= t]
  Θprfaas = min(N_prfaas / T_prefill(l_long), B_out / S_kv(l_long))          (3)
  Θpd-p   = N_p / T_prefill(l_short)                                         (4)
  Θpd-d   = N_d * BS_max / (T_decode * L_out)                                (5)
  Λmax    = min(Θprfaas / p, Θpd-p / (1 - p), Θpd-d)                         (6)

`plan` searches t and N_p on a grid for the largest Λmax (§3.4.2: the optimum balances the producers, eq. 7,
and the producers against the consumer, eq. 8). T_prefill and S_kv come from a measured `PrefillProfile`
(S_kv: the bytes a prefix's full blocks fetch, kv.decide.throughput; Φkv = S_kv / T_prefill, eq. 1), B_out
from a measured link rate, L from a `LengthDistribution` (the paper's: truncated log-normal, `PAPER`).

    profile = PrefillProfile.measure(model, layout, [512, 1024, 2048], block_tokens=128, kv_format="fp16",
                                     model_name="embedded-tinyllama")
    best = plan(profile, PAPER, link_Bps=50e6, deployment=Deployment())
    base = single_site(profile, PAPER, Deployment())
"""

from __future__ import annotations

import itertools
import json
import math
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import NormalDist

import numpy as np

_NORMAL = NormalDist()
BOUNDS = ("prefill site compute", "prefill site link", "decode site prefill", "decode")


def _finite_positive(value, what: str) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} must be a finite number > 0, got {value!r}")
    return value


# --------------------------------------------------------------------------------------------- the profile


def _fit_quadratic(tokens: np.ndarray, seconds: np.ndarray) -> tuple[float, float, float]:
    """a + b*l + c*l^2 with a, b, c >= 0, least squares in relative error (a 0.1 s point counts as much as a
    10 s one). Three unknowns: every subset of them solved free, the best one with no negative coefficient
    wins (an exact non-negative least squares for so few)."""
    scale = float(tokens.max())
    x = tokens / scale  # conditioning: l^2 of 128K tokens is 1.7e10
    design = np.stack([np.ones_like(x), x, x * x], axis=1) / seconds[:, None]
    target = np.ones_like(seconds)
    best, best_err = None, math.inf
    for size in (1, 2, 3):
        for cols in itertools.combinations(range(3), size):
            coef, *_ = np.linalg.lstsq(design[:, cols], target, rcond=None)
            if np.any(coef < 0):
                continue
            err = float(np.sum((design[:, cols] @ coef - target) ** 2))
            if err < best_err - 1e-15:
                full = np.zeros(3)
                full[list(cols)] = coef
                best, best_err = full, err
    if best is None:  # cannot happen (a constant alone fits with a >= 0), kept as a guard
        best = np.array([float(seconds.mean()), 0.0, 0.0])
    return float(best[0]), float(best[1] / scale), float(best[2] / scale**2)


@dataclass(frozen=True)
class PrefillProfile:
    """Measured: prompt length -> KV bytes its full blocks fetch, and its prefill time on one instance."""

    model: str
    device: str
    kv_format: str
    block_tokens: int
    points: tuple[tuple[int, int, float], ...]  # (tokens, kv_bytes, prefill_s), tokens increasing, >= 2 points
    note: str = ""  # how the times were measured (e.g. on a layer slice, scaled), for the reader
    _fit: tuple[float, float, float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise ValueError("profile: model must be a non-empty string")
        if not isinstance(self.block_tokens, int) or isinstance(self.block_tokens, bool) or self.block_tokens <= 0:
            raise ValueError(f"profile: block_tokens must be an integer > 0, got {self.block_tokens!r}")
        try:
            points = tuple((int(t), int(b), float(s)) for t, b, s in self.points)
        except (TypeError, ValueError):
            raise ValueError("profile: points must be (tokens, kv_bytes, prefill_s) triples") from None
        if len(points) < 2:
            raise ValueError(f"profile: at least 2 points are needed, got {len(points)}")
        for (t0, _, _), (t1, _, _) in zip(points, points[1:]):
            if t1 <= t0:
                raise ValueError(f"profile: point tokens must increase, got {t0} then {t1}")
        for t, b, s in points:
            if t <= 0 or b < 0 or not math.isfinite(s) or s <= 0:
                raise ValueError(f"profile: bad point ({t}, {b}, {s}): tokens > 0, kv_bytes >= 0, prefill_s > 0")
        object.__setattr__(self, "points", points)
        tokens = np.array([p[0] for p in points], dtype=float)
        seconds = np.array([p[2] for p in points], dtype=float)
        object.__setattr__(self, "_fit", _fit_quadratic(tokens, seconds))

    @property
    def fit(self) -> tuple[float, float, float]:
        """(a, b, c) of prefill_s(l) = a + b*l + c*l^2."""
        return self._fit

    def kv_bytes(self, tokens: float) -> float:
        """S_kv(l): piecewise linear through the points, the end segments extended (KV grows linearly in l)."""
        pts = self.points
        if tokens <= pts[0][0]:
            (t0, b0, _), (t1, b1, _) = pts[0], pts[1]
        elif tokens >= pts[-1][0]:
            (t0, b0, _), (t1, b1, _) = pts[-2], pts[-1]
        else:
            i = next(i for i in range(1, len(pts)) if pts[i][0] >= tokens)
            (t0, b0, _), (t1, b1, _) = pts[i - 1], pts[i]
        return max(0.0, b0 + (b1 - b0) * (tokens - t0) / (t1 - t0))

    def prefill_s(self, tokens: float) -> float:
        """T_prefill(l): the fitted near-quadratic (attention grows as l^2, the rest as l), > 0."""
        a, b, c = self._fit
        return max(a + b * tokens + c * tokens * tokens, 1e-12)

    def phi_Bps(self, tokens: float) -> float:
        """Φkv(l) = S_kv(l) / T_prefill(l) (eq. 1): the link rate that keeps pace with one instance's prefill."""
        return self.kv_bytes(tokens) / self.prefill_s(tokens)

    def as_dict(self) -> dict:
        return {"model": self.model, "device": self.device, "kv_format": self.kv_format,
                "block_tokens": self.block_tokens, "points": [list(p) for p in self.points], "note": self.note}

    @classmethod
    def from_dict(cls, d) -> PrefillProfile:
        if not isinstance(d, dict):
            raise ValueError(f"profile: a JSON object expected, got {type(d).__name__}")
        missing = [k for k in ("model", "device", "kv_format", "block_tokens", "points") if k not in d]
        if missing:
            raise ValueError(f"profile: missing field(s) {', '.join(missing)}")
        unknown = sorted(set(d) - {"model", "device", "kv_format", "block_tokens", "points", "note"})
        if unknown:
            raise ValueError(f"profile: unknown field(s) {', '.join(unknown)}")
        points = d["points"]
        if not isinstance(points, list) or not all(isinstance(p, (list, tuple)) and len(p) == 3 for p in points):
            raise ValueError("profile: points must be a list of [tokens, kv_bytes, prefill_s]")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for p in points for v in p):
            raise ValueError("profile: every point value must be a number")
        for key in ("model", "device", "kv_format"):
            if not isinstance(d[key], str):
                raise ValueError(f"profile: {key} must be a string")
        return cls(d["model"], d["device"], d["kv_format"], d["block_tokens"],
                   tuple(tuple(p) for p in points), str(d.get("note", "")))

    def save(self, path) -> None:
        Path(path).write_text(json.dumps(self.as_dict(), indent=1) + "\n")

    @classmethod
    def load(cls, path) -> PrefillProfile:
        try:
            d = json.loads(Path(path).read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"profile {path}: not JSON ({exc.msg}, line {exc.lineno})") from None
        return cls.from_dict(d)

    @classmethod
    def measure(cls, model, layout, lengths, *, block_tokens: int, kv_format: str, model_name: str,
                repeats: int = 2) -> PrefillProfile:
        """S_kv and T_prefill at each length (kv.decide.throughput.measure), prefill timed on the model's device."""
        from .throughput import measure

        lengths = sorted({int(n) for n in lengths})
        rows = measure(model, layout, lengths, block_tokens=block_tokens, kv_format=kv_format, repeats=repeats)
        return cls(model_name, str(model.device), kv_format, block_tokens,
                   tuple((r.tokens, r.fetch_bytes, r.prefill_s) for r in rows))


# --------------------------------------------------------------------------------------------- the workload


@dataclass(frozen=True)
class LengthDistribution:
    """Truncated log-normal prompt lengths (the paper's workload: PAPER)."""

    mu: float
    sigma: float
    low: int
    high: int

    def __post_init__(self) -> None:
        if not (math.isfinite(self.mu) and math.isfinite(self.sigma) and self.sigma > 0):
            raise ValueError(f"lengths: mu must be finite and sigma > 0, got mu {self.mu}, sigma {self.sigma}")
        if not (isinstance(self.low, int) and isinstance(self.high, int) and 1 <= self.low < self.high):
            raise ValueError(f"lengths: want integers 1 <= low < high, got [{self.low}, {self.high}]")
        if self._mass(self.low, self.high) <= 0:
            raise ValueError(f"lengths: no probability in [{self.low}, {self.high}] for mu {self.mu}, sigma {self.sigma}")

    def _cdf(self, x: float) -> float:  # the untruncated log-normal's
        return _NORMAL.cdf((math.log(x) - self.mu) / self.sigma)

    def _mass(self, a: float, b: float) -> float:
        return max(0.0, self._cdf(b) - self._cdf(a)) if b > a else 0.0

    def _partial_mean(self, a: float, b: float) -> float:
        """∫_a^b x f(x) dx of the untruncated log-normal: e^(μ+σ²/2) (Φ((ln b-μ-σ²)/σ) - Φ((ln a-μ-σ²)/σ))."""
        if b <= a:
            return 0.0
        shift = self.mu + self.sigma**2
        return math.exp(self.mu + self.sigma**2 / 2) * (
            _NORMAL.cdf((math.log(b) - shift) / self.sigma) - _NORMAL.cdf((math.log(a) - shift) / self.sigma))

    def sample(self, n: int, seed: int) -> list[int]:
        """n lengths by the inverse CDF (deterministic for a seed), rounded, within [low, high]."""
        if n < 0:
            raise ValueError(f"sample: n must be >= 0, got {n}")
        rng = random.Random(seed)
        lo, hi = self._cdf(self.low), self._cdf(self.high)
        out = []
        for _ in range(n):
            u = lo + (hi - lo) * rng.random()
            u = min(max(u, 1e-300), 1 - 1e-16)
            x = math.exp(self.mu + self.sigma * _NORMAL.inv_cdf(u))
            out.append(min(self.high, max(self.low, round(x))))
        return out

    def share_above(self, t: float) -> float:
        """p = P(L > t)."""
        a = min(max(t, self.low), self.high)
        return self._mass(a, self.high) / self._mass(self.low, self.high)

    def mean_above(self, t: float) -> float:
        """l_long = E[L | L > t]; `high` when nothing lies above t."""
        a = min(max(t, self.low), self.high)
        mass = self._mass(a, self.high)
        if mass <= 0:
            return float(self.high)
        return min(self.high, max(a, self._partial_mean(a, self.high) / mass))

    def mean_below(self, t: float) -> float:
        """l_short = E[L | L <= t]; `low` when nothing lies below t."""
        b = min(max(t, self.low), self.high)
        mass = self._mass(self.low, b)
        if mass <= 0:
            return float(self.low)
        return min(b, max(self.low, self._partial_mean(self.low, b) / mass))

    def mean(self) -> float:
        return self.mean_below(self.high)

    def scaled_to(self, high: int, low: int | None = None) -> LengthDistribution:
        """The same shape at another scale: sigma kept, mu moved by log(high / self.high), truncated to
        [low, high] (low by default scaled alike, at least 1): the paper's workload at lengths a CPU serves."""
        if not isinstance(high, int) or high < 2:
            raise ValueError(f"lengths: high must be an integer >= 2, got {high!r}")
        if low is None:
            low = max(1, round(self.low * high / self.high))
        return LengthDistribution(self.mu + math.log(high / self.high), self.sigma, int(low), high)


PAPER = LengthDistribution(9.90, 1.00, 128, 131072)  # §4.1: μ 9.90, σ 1.00, truncated to [128, 128K]


# --------------------------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class Deployment:
    prefill_instances: float = 1.0  # N_prfaas: instances at the prefill site
    pd_instances: float = 1.0  # N_p + N_d at the decode site (split by the plan)
    decode_batch: int = 1  # BS_max
    decode_step_s: float = 0.05  # T_decode per output token
    output_tokens: int = 64  # L_out

    def __post_init__(self) -> None:
        for name in ("prefill_instances", "pd_instances", "decode_batch", "decode_step_s", "output_tokens"):
            _finite_positive(getattr(self, name), f"deployment {name}")

    @property
    def decode_rate_per_instance(self) -> float:
        """Requests/s one decode instance completes (eq. 5 per unit of N_d)."""
        return self.decode_batch / (self.decode_step_s * self.output_tokens)


@dataclass(frozen=True)
class Plan:
    threshold: float  # t, tokens: uncached increments longer than t go to the prefill site
    share_offloaded: float  # p
    long_tokens: float  # l_long
    short_tokens: float  # l_short
    theta_prfaas: float  # eq. 3, requests/s
    theta_pd_p: float  # eq. 4
    theta_pd_d: float  # eq. 5
    throughput: float  # Λmax, eq. 6, requests/s
    np: float  # N_p
    nd: float  # N_d
    egress_Bps: float  # bytes/s leaving the prefill site at Λmax (p * Λ * S_kv(l_long))
    link_Bps: float
    bound: str  # which term of eq. 6 binds: "prefill site compute", "prefill site link", "decode site prefill", "decode"

    def as_dict(self) -> dict:
        return asdict(self)


def _check_inputs(profile, lengths, deployment) -> None:
    if not isinstance(profile, PrefillProfile):
        raise ValueError(f"a PrefillProfile is needed, got {type(profile).__name__}")
    if not isinstance(lengths, LengthDistribution):
        raise ValueError(f"a LengthDistribution is needed, got {type(lengths).__name__}")
    if not isinstance(deployment, Deployment):
        raise ValueError(f"a Deployment is needed, got {type(deployment).__name__}")


def _link(link_Bps) -> float:
    return _finite_positive(link_Bps, "link_Bps")


@dataclass(frozen=True)
class _Route:
    """What a threshold decides, independent of N_p: p, l_long, l_short, Θprfaas (eq. 3) and its binding part."""

    t: float
    p: float
    l_long: float
    l_short: float
    theta_prfaas: float
    link_binds: bool
    t_short: float  # T_prefill(l_short)
    s_long: float  # S_kv(l_long)


def _route(profile, lengths, link_Bps: float, deployment, t: float) -> _Route:
    p = lengths.share_above(t)
    l_long, l_short = lengths.mean_above(t), lengths.mean_below(t)
    s_long = profile.kv_bytes(l_long)
    compute = deployment.prefill_instances / profile.prefill_s(l_long)  # eq. 3, left
    wire = link_Bps / s_long if s_long > 0 else math.inf  # eq. 3, right: a prefix of no full block sends nothing
    return _Route(t, p, l_long, l_short, min(compute, wire), wire < compute, profile.prefill_s(l_short), s_long)


def _terms(r: _Route, np_: float, deployment) -> tuple[float, float, float, float]:
    """(Θpd-p, Θpd-d, and the three terms of eq. 6 folded to Λmax)."""
    theta_pd_p = np_ / r.t_short  # eq. 4
    theta_pd_d = (deployment.pd_instances - np_) * deployment.decode_rate_per_instance  # eq. 5
    # eq. 6: a stage that gets no requests (p = 0 or p = 1) limits nothing
    a = r.theta_prfaas / r.p if r.p > 0 else math.inf
    b = theta_pd_p / (1 - r.p) if r.p < 1 else math.inf
    return theta_pd_p, theta_pd_d, a, b


def throughput_at(profile, lengths, link_Bps, deployment, threshold, np) -> Plan:
    """Eqs. 3-6 at one threshold t and one N_p (N_d = pd_instances - N_p)."""
    _check_inputs(profile, lengths, deployment)
    link_Bps = _link(link_Bps)
    try:
        threshold, np_ = float(threshold), float(np)
    except (TypeError, ValueError):
        raise ValueError("threshold and np must be numbers") from None
    if not math.isfinite(threshold):
        raise ValueError(f"threshold must be finite, got {threshold}")
    if not (0 < np_ < deployment.pd_instances):
        raise ValueError(f"N_p must lie in (0, {deployment.pd_instances:g}), got {np_:g}")
    r = _route(profile, lengths, link_Bps, deployment, threshold)
    theta_pd_p, theta_pd_d, a, b = _terms(r, np_, deployment)
    lam = min(a, b, theta_pd_d)
    if lam == a:
        bound = "prefill site link" if r.link_binds else "prefill site compute"
    elif lam == b:
        bound = "decode site prefill"
    else:
        bound = "decode"
    return Plan(threshold, r.p, r.l_long, r.l_short, r.theta_prfaas, theta_pd_p, theta_pd_d, lam, np_,
                deployment.pd_instances - np_, r.p * lam * r.s_long, link_Bps, bound)


def default_thresholds(lengths: LengthDistribution, points: int = 200) -> list[float]:
    """~`points` thresholds log-spaced over [low, high], with "offload all" (low) and "never offload" (high)."""
    grid = np.exp(np.linspace(math.log(lengths.low), math.log(lengths.high), points))
    return sorted({float(lengths.low), float(lengths.high), *(float(t) for t in grid)})


def default_splits(deployment: Deployment, points: int = 100) -> list[float]:
    """N_p at `points` - 1 evenly spaced fractions of the decode site, strictly inside (0, pd_instances)."""
    return [deployment.pd_instances * i / points for i in range(1, points)]


def _search(profile, lengths, link_Bps: float, deployment, thresholds, splits) -> Plan:
    """The exhaustive grid of §3.4.2 / §4 (vectorised over N_p). Ties go to the larger t (less crosses the link),
    then to the smaller N_p."""
    if thresholds is None:
        thresholds = default_thresholds(lengths)
    if splits is None:
        splits = default_splits(deployment)
    try:
        thresholds = sorted({float(t) for t in thresholds})
        splits = np.array(sorted({float(s) for s in splits}), dtype=float)
    except (TypeError, ValueError):
        raise ValueError("thresholds and splits must be numbers") from None
    if not thresholds or splits.size == 0:
        raise ValueError("the grid is empty: give at least one threshold and one N_p")
    if not all(math.isfinite(t) for t in thresholds):
        raise ValueError("thresholds must be finite")
    if np.any(splits <= 0) or np.any(splits >= deployment.pd_instances):
        raise ValueError(f"every N_p must lie in (0, {deployment.pd_instances:g})")
    decode = (deployment.pd_instances - splits) * deployment.decode_rate_per_instance  # eq. 5 for every N_p
    best_lam, best_t, best_np = -math.inf, None, None
    for t in thresholds:  # increasing: an equal Λ at a larger t replaces the smaller one
        r = _route(profile, lengths, link_Bps, deployment, t)
        a = r.theta_prfaas / r.p if r.p > 0 else math.inf
        b = splits / r.t_short / (1 - r.p) if r.p < 1 else np.full_like(splits, math.inf)
        lam = np.minimum(np.minimum(a, b), decode)
        i = int(np.argmax(lam))  # the first (smallest N_p) of equal maxima
        if lam[i] >= best_lam * (1 - 1e-12):
            best_lam, best_t, best_np = float(lam[i]), t, float(splits[i])
    return throughput_at(profile, lengths, link_Bps, deployment, best_t, best_np)


def plan(profile, lengths, link_Bps, deployment, *, thresholds=None, splits=None) -> Plan:
    """The threshold t and the split N_p/N_d that maximise Λmax (eq. 6), by grid search (§3.4.2: at the optimum
    eq. 7 balances the two producers and eq. 8 the producers against decode, up to the grid's resolution)."""
    _check_inputs(profile, lengths, deployment)
    return _search(profile, lengths, _link(link_Bps), deployment, thresholds, splits)


def single_site(profile, lengths, deployment) -> Plan:
    """The baseline without a prefill site: every request prefilled at the decode site (p = 0, t = high), the
    same search over N_p. No link is crossed; link_Bps is reported as 0."""
    _check_inputs(profile, lengths, deployment)
    best = _search(profile, lengths, 1.0, deployment, [float(lengths.high)], None)
    return Plan(**{**best.as_dict(), "link_Bps": 0.0, "egress_Bps": 0.0, "theta_prfaas": 0.0})


def all_offloaded(profile, lengths, link_Bps, deployment) -> Plan:
    """The naive heterogeneous deployment: every request prefilled at the prefill site (t = low - 1, p = 1), the
    same search over N_p (the decode site's prefill instances idle, so the smallest N_p of the grid wins)."""
    _check_inputs(profile, lengths, deployment)
    return _search(profile, lengths, _link(link_Bps), deployment, [float(lengths.low - 1)], None)

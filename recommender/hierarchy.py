"""Combine tasks: each task's best weight as a noisy observation of a law in log training size.

Model (Gaussian given its hyperparameters, so each piece has a closed form):

    best weight of task i = trend(x_i) + g(x_i) + eta_task(i) + delta_regime(i) + eps_i
    x = log10 training size
    trend(x) = a + s (x - 4) [+ d * 1(x > c)]   one of three mean models (below)
    g ~ Gaussian process, squared-exponential kernel (signal sd, length in decades)
    eta ~ N(0, tau^2)       how far real tasks scatter around the law; one per task name, so
                            several studies of one task, or of one task at several sizes,
                            share it
    delta_r ~ N(0, REGIME_SD^2)  a shared offset of every point measured in regime r, other than
                            the regime answered for (whose offset is 0)
    eps_i ~ N(0, v_i)       how imprecisely task i's trials locate its best (`task_curve`)

Priors. Three mean models, averaged by marginal likelihood times prior:
- a line (prior 1 - STEP_SHARE - RULE_SHARE): level at 10^4 examples ~ N(8, 3^2), slope
  ~ N(-3, 2^2) per decade. The SIWLM paper's finding (Son et al. 2021: weights of 9 or more
  helped its tasks of 2.5k-8.5k examples, below 6 its tasks of 67k-393k, about -3 weight units
  per decade), held loosely enough that four tasks pointing the other way overrule it;
- one sharp transition at c (prior STEP_SHARE): level below ~ N(11, 3^2), slope ~ N(0, 1.5^2),
  jump ~ N(-6, 4^2); c on a STEP_SPACING grid strictly inside the studied sizes (outside them
  no data could place it), PAPER_SHARE of its prior a normal around 10^4, the rest uniform;
- the paper's rule as stated (prior RULE_SHARE): 12 +- 1 below 10^4 examples, 3.5 +- 1.4 above.
The deviation's signal sd and length scale, and tau, are not fixed: the answer averages over a
grid of them (`DEVIATIONS` x `TAU_GRID`, tau with a half-Cauchy prior of scale TAU_SCALE, each
grid point weighted by its spacing) and over the mean models, each weighted by its marginal
likelihood times its prior (deterministic; no optimiser, no sampling). The coefficients and the
offsets are integrated out exactly (their Gaussian priors add H B H^T and REGIME_SD^2 Z Z^T to
the covariance), so their uncertainty is part of every interval.

A new task of size n (in the asked regime) has its own eta: its predictive distribution is a
mixture of Gaussians over the grid. The recommended weight is the mixture's median (the point
that minimises the expected absolute error); the 80% interval its 10% and 90% quantiles.

Tasks that ignore the law: a task's best weight is, with probability pi, anywhere in 1-15
(uniform) instead of near the law (`fit_law`'s `robust`); a best weight at an end of a grid is a
censored observation, entered as an expectation-propagation site (`bounds`).

Its figures on generated worlds, what was tried and rejected and its known shortfalls are in
docs/recommender.md ("The model") and BENCHMARKS.md section 7.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.linalg import cho_solve
from scipy.special import ndtr
from scipy.stats import truncnorm

from weightsearch.recommender.baselines import RULE_THRESHOLD
from weightsearch.studies.schema import WEIGHT_HIGH, WEIGHT_LOW

CENTRE = 4.0  # log10 size at which the trend's level is stated (10^4 examples)
# Prior (mean, sd) of the mean's coefficients (level at 10^4 examples, slope per decade, jump at
# the transition) for a line and for a law with a transition.
LINE_PRIOR = ((8.0, 3.0), (-3.0, 2.0), (0.0, 0.0))
STEP_PRIOR = ((11.0, 3.0), (0.0, 1.5), (-6.0, 4.0))
# The paper's rule of thumb as stated (`weightsearch.recommender.baselines`): 12 below 10^4
# examples, 3.5 from there on, give or take a point.
RULE_PRIOR = ((12.0, 1.0), (0.0, 0.0), (-8.5, 1.0))
PRIORS = (LINE_PRIOR, STEP_PRIOR, RULE_PRIOR)  # by model: line, transition, the paper's rule
MODEL_NAMES = ("line", "transition", "the paper's rule")
RULE_SHARE = 0.2  # prior probability that the paper's rule holds as stated
STEP_SHARE = 0.35  # prior probability of one sharp transition inside the studied sizes
STEP_SPACING = 0.25  # decades between candidate transition points
# Where the transition lies: the paper's small tasks end at 8.5k examples and its large ones
# start at 67k; read as "about 10,000" (as the rule-of-thumb baseline reads it), PAPER_SHARE of
# the prior is a normal around 10^4 with sd 0.25 decades, the rest uniform over the candidates.
PAPER_STEP = (4.0, 0.25)
PAPER_SHARE = 0.7
DEVIATIONS = ((0.5, 0.5), (1.5, 0.3), (1.5, 0.8), (3.0, 0.3), (3.0, 0.8))  # (signal sd, length)
TAU_GRID = tuple(float(t) for t in np.geomspace(0.25, 6.0, 12))  # task scatter, weight units
TAU_SCALE = 1.5  # half-Cauchy prior on tau, weight units (weakly informative)
REGIME_SD = 3.0  # prior sd of another regime's offset, weight units
OUTLIER_PRIOR = (1.0, 19.0)  # Beta prior on the share of tasks that ignore the law
# How far a task that ignores the law lies from it: a uniform over 1-15 has variance 16.3,
# and its centre is up to 7 units from the law.
OUTLIER_VAR = 25.0
ROUNDS = 2  # refits for the outlier probabilities and the censored sites
SITE_VAR_MAX = 1e4  # a censored point whose bound tells the law nothing
KEEP = 1e-4  # components below this posterior weight are dropped (fewer solves per request)
SMALL = 15  # up to this many points, every component's inverse is formed in one batch
MAX_COMPONENTS = 64  # and at most this many are kept, the heaviest (memory: 64 x n^2 floats)
_MAX_BATCH = 4_000_000  # matrix entries per batch of components (memory bound)


@dataclass(frozen=True)
class Prediction:
    median: float
    low: float  # 10% quantile
    high: float  # 90% quantile
    variance: float  # of the Gaussian mixture (the uniform outlier part left out)
    influence: np.ndarray  # each observation's weight in the predictive mean


@dataclass
class Law:
    weights: np.ndarray  # (G,) posterior weight of each kept component
    x: np.ndarray  # (n,) observed log sizes
    model: np.ndarray  # (G,) 0 line, 1 transition, 2 the paper's rule (`PRIORS`)
    step_at: np.ndarray  # (G,) transition point, NaN for a line
    signal2: np.ndarray  # (G,)
    length: np.ndarray  # (G,)
    tau2_each: np.ndarray  # (G,)
    alpha: np.ndarray  # (G, n) C^-1 (y - prior mean)
    cinv: np.ndarray  # (G, n, n)
    groups: dict[str, np.ndarray]  # regime label -> indicator of its points
    outlier_share: float = 0.0  # estimated share of tasks that do not follow the law
    outliers: np.ndarray | None = None  # (n,) each point's probability of being one
    _trend: dict[str, float] | None = field(default=None, repr=False)

    @property
    def tau2(self) -> float:
        return float(self.weights @ self.tau2_each)

    def probability(self, model: int) -> float:
        """The posterior probability of a mean model (`MODEL_NAMES`)."""
        return float(self.weights[self.model == model].sum())

    @property
    def prior_mean(self) -> np.ndarray:
        """(G, 3) prior means of the coefficients."""
        return _priors(self.model)[0]

    @property
    def prior_var(self) -> np.ndarray:
        """(G, 3) prior variances of the coefficients."""
        return _priors(self.model)[1]

    def _basis(self, x: np.ndarray) -> np.ndarray:
        return _basis(x, self.step_at)

    def predict(self, x0: float) -> Prediction:
        """The best weight of a new task of log10 size `x0`, in the asked regime."""
        h0 = self._basis(np.array([x0]))[:, 0, :]  # (G, 3)
        h = self._basis(self.x)  # (G, n, 3)
        b = self.prior_var
        k = self.signal2[:, None] * np.exp(
            -0.5 * ((x0 - self.x[None, :]) / self.length[:, None]) ** 2)
        k = k + np.einsum("gnp,gp->gn", h, b * h0)
        means = np.einsum("gp,gp->g", h0, self.prior_mean) + np.einsum("gn,gn->g", k, self.alpha)
        solved = np.einsum("gnm,gm->gn", self.cinv, k)
        total = self.signal2 + np.einsum("gp,gp->g", h0 * h0, b) + self.tau2_each
        variances = np.maximum(total - np.einsum("gn,gn->g", k, solved), 1e-9)
        low, median, high = mixture_quantiles(self.weights, means, np.sqrt(variances),
                                              (0.1, 0.5, 0.9), uniform=self.outlier_share)
        mean = float(self.weights @ means)
        variance = float(self.weights @ (variances + (means - mean) ** 2))
        return Prediction(median=median, low=low, high=high, variance=variance,
                          influence=self.weights @ solved)

    def trend(self) -> dict[str, float]:
        """The posterior slope (weight units per decade) and the mean at 10^4 examples (jump
        included where a transition lies below), mixed over components: mean and sd of each;
        and the prior's pull on the slope (`_slope_without_prior`). Computed once per law: the
        service asks for it with every answer."""
        if self._trend is None:
            self._trend = self._posterior_trend()
        return dict(self._trend)

    def _posterior_trend(self) -> dict[str, float]:
        hb = self._basis(self.x) * self.prior_var[:, None, :]  # (G, n, 3)
        mean = self.prior_mean + np.einsum("gnp,gn->gp", hb, self.alpha)
        cov = (np.einsum("gp,pq->gpq", self.prior_var, np.eye(3))
               - np.einsum("gnp,gnm,gmq->gpq", hb, self.cinv, hb))
        at_centre = self._basis(np.array([CENTRE]))[:, 0, :]  # (G, 3)
        slope = np.zeros_like(at_centre)
        slope[:, 1] = 1.0
        out = {}
        for name, h in (("level", at_centre), ("slope", slope)):
            means = np.einsum("gp,gp->g", h, mean)
            variances = np.einsum("gp,gpq,gq->g", h, cov, h)
            m = float(self.weights @ means)
            var = float(self.weights @ (variances + (means - m) ** 2))
            out[name], out[f"{name}_sd"] = m, math.sqrt(max(var, 0.0))
        return {**out, **self._slope_without_prior(mean[:, 1], cov[:, 1, 1])}

    def _slope_without_prior(self, post_mean: np.ndarray,
                             post_var: np.ndarray) -> dict[str, float]:
        """The slope the data alone give (its coefficient's prior made flat, mean and sd), and
        the prior's share of the slope's precision, mixed over the components whose slope the
        data set: lines and transitions (the paper's rule fixes it at 0). In a component the
        likelihood of the slope, everything else integrated out, is Gaussian, so the posterior
        precision is the prior's plus the data's and the posterior mean their precision-weighted
        mean: the data's part is the difference (the other coefficients keep their priors). NaN
        where the data do not inform the slope."""
        prior_var = self.prior_var[:, 1]
        free = prior_var > 0
        out = dict.fromkeys(("slope_data_alone", "slope_data_alone_sd", "slope_prior_share"),
                            math.nan)
        if not free.any():
            return out
        w = self.weights[free] / self.weights[free].sum()
        prior_precision = 1.0 / prior_var[free]
        precision = 1.0 / np.maximum(post_var[free], 1e-12)
        out["slope_prior_share"] = float(w @ np.minimum(prior_precision / precision, 1.0))
        data = precision - prior_precision
        if (data <= 1e-6 * prior_precision).any():
            return out
        means = (precision * post_mean[free] - prior_precision * self.prior_mean[free, 1]) / data
        m = float(w @ means)
        out["slope_data_alone"] = m
        out["slope_data_alone_sd"] = math.sqrt(float(w @ (1.0 / data + (means - m) ** 2)))
        return out

    def offsets(self) -> dict[str, tuple[float, float]]:
        """Each other regime's estimated offset from the asked one: (mean, sd)."""
        out = {}
        r2 = REGIME_SD ** 2
        for label, z in self.groups.items():
            means = r2 * (self.alpha @ z)
            variances = r2 - r2 * r2 * np.einsum("n,gnm,m->g", z, self.cinv, z)
            m = float(self.weights @ means)
            var = float(self.weights @ (variances + (means - m) ** 2))
            out[label] = (m, math.sqrt(max(var, 0.0)))
        return out


def _basis(x: np.ndarray, step_at: np.ndarray) -> np.ndarray:
    """(G, len(x), 3): level, slope and jump columns of the mean at `x` per component."""
    step = (x[None, :] > step_at[:, None]).astype(float)  # NaN (a line) compares False
    level = np.ones_like(step)
    return np.stack([level, level * (x[None, :] - CENTRE), step], axis=-1)


def _priors(model: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(G, 3) prior means and variances of the coefficients, by mean model."""
    table = np.array(PRIORS)  # (models, 3, 2)
    return table[model, :, 0], table[model, :, 1] ** 2


def mixture_quantiles(weights: np.ndarray, means: np.ndarray, sds: np.ndarray,
                      probs: Sequence[float], uniform: float = 0.0) -> list[float]:
    """Quantiles of a mixture of normals (`weights` summing to 1), taken with weight
    1 - `uniform`, and a uniform over the weight range with weight `uniform`; by bisection on
    the distribution function."""
    lo = np.full(len(probs), min(float(np.min(means - 6 * sds)), WEIGHT_LOW))
    hi = np.full(len(probs), max(float(np.max(means + 6 * sds)), WEIGHT_HIGH))
    target = np.asarray(probs, dtype=float)
    for _ in range(60):
        mid = (lo + hi) / 2
        cdf = (1 - uniform) * (ndtr((mid[:, None] - means[None, :]) / sds[None, :]) @ weights)
        cdf += uniform * np.clip((mid - WEIGHT_LOW) / (WEIGHT_HIGH - WEIGHT_LOW), 0.0, 1.0)
        below = cdf < target
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return [float(v) for v in (lo + hi) / 2]


def _mean_models(x: np.ndarray) -> list[tuple[int, float, float]]:
    """(model, transition point, log prior) of each mean model: a line, the paper's rule, and a
    transition at each point of the STEP_SPACING grid strictly inside the observed sizes
    (observations on both sides); outside them no data could place it."""
    # The rule gives 3.5 from RULE_THRESHOLD examples on (x >= 4); the basis switches at x > c.
    rule = (2, math.log10(RULE_THRESHOLD) - 1e-9, math.log(RULE_SHARE))
    grid = np.arange(math.floor(x.min() / STEP_SPACING) * STEP_SPACING, x.max(),
                     STEP_SPACING) if len(x) > 1 else np.array([])
    points = np.array([c for c in grid if (x <= c).any() and (x > c).any()])
    if not len(points):
        return [(0, math.nan, math.log(1 - RULE_SHARE)), rule]
    near = np.exp(-0.5 * ((points - PAPER_STEP[0]) / PAPER_STEP[1]) ** 2)
    share = PAPER_SHARE * near / near.sum() + (1 - PAPER_SHARE) / len(points)
    return [(0, math.nan, math.log(1 - STEP_SHARE - RULE_SHARE)), rule] + [
        (1, float(c), math.log(STEP_SHARE * w)) for c, w in zip(points, share, strict=True)]


def fit_law(log_sizes: Sequence[float], best: Sequence[float], variances: Sequence[float],
            tasks: Sequence[str] | None = None,
            groups: Sequence[str | None] | None = None, robust: bool = True,
            bounds: Sequence[tuple[float | None, float | None]] | None = None) -> Law:
    """The law from per-task (log10 size, located best weight, its variance).

    `tasks`: each point's task name (points of one task share their scatter eta); `groups`:
    each point's regime label, None for the regime answered for (the others get an offset).

    `robust`: tasks that do not follow the law must not bend it. A task's best weight is,
    with probability pi, anywhere in the weight range (uniform) rather than near the law; pi
    has a Beta(1, 19) prior (one task in twenty). Two rounds of expectation-maximisation: each
    task's probability of being such a task, from its residuals with the whole task left out
    (`_outlier_probability`), adds that probability times OUTLIER_VAR, shared by its points, to
    the covariance of the next fit, and pi is re-estimated from the probabilities. A new task's
    prediction mixes in the uniform with weight pi.

    `bounds`: per point, (at least, at most) where its trials only bound the best weight (the
    grid's end weight won; `task_curve`). Such a point enters as a Gaussian site fitted by
    expectation propagation: the law's leave-one-out prediction at the point, truncated at the
    bound and multiplied by the point's own Gaussian evidence, divided by that prediction; so a
    task whose best lies past the grid's end pulls the law outwards as far as the other tasks
    make plausible, not to the end weight's cell."""
    x = np.asarray(log_sizes, dtype=float)
    y = np.asarray(best, dtype=float)
    noise = np.asarray(variances, dtype=float)
    names = list(tasks) if tasks is not None else [str(i) for i in range(len(x))]
    same_task = np.array([[a == b for b in names] for a in names], dtype=float)
    bounds = list(bounds) if bounds is not None else [(None, None)] * len(x)
    censored = [i for i, (a, b) in enumerate(bounds) if a is not None or b is not None]
    located, own = y.copy(), noise.copy()
    law = _fit(x, y, noise, same_task, groups)
    chance, share = np.zeros(len(x)), 0.0
    # An outlier task is shifted as a whole: its points share the extra variance.
    extra = np.zeros_like(same_task)
    robust = robust and len(set(names)) >= 3
    for _ in range(ROUNDS if robust or censored else 0):
        if robust:
            share = share or OUTLIER_PRIOR[0] / sum(OUTLIER_PRIOR)
            chance = _outlier_probability(law, share, names, extra)
            per_task = dict(zip(names, chance, strict=True))
            share = (OUTLIER_PRIOR[0] + sum(per_task.values())) / (
                sum(OUTLIER_PRIOR) + len(per_task))
            extra = OUTLIER_VAR * same_task * chance
        if censored:
            y, noise = _censored_sites(law, y.copy(), noise.copy(), censored, bounds,
                                       located, own)
        law = _fit(x, y, noise, same_task, groups, extra=extra)
    law.outlier_share, law.outliers = float(share), chance
    return law


def _censored_sites(law: Law, y: np.ndarray, noise: np.ndarray, censored: list[int],
                    bounds, located: np.ndarray,
                    own: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One expectation-propagation update of each censored point's site (y_i, v_i), from its
    own location and variance (`located`, `own`) and its bound; `noise` holds the sites'
    variances `law` was fitted with."""
    diag = np.diagonal(law.cinv, axis1=1, axis2=2)  # (G, n)
    loo_mean = y[None, :] - law.alpha / diag  # the law's prediction of each point without it
    loo_var = 1.0 / diag - noise[None, :]  # of the task's best weight itself (the cavity)
    for i in censored:
        m = float(law.weights @ loo_mean[:, i])
        s2 = max(float(law.weights @ (loo_var[:, i] + (loo_mean[:, i] - m) ** 2)), 1e-6)
        # The tilted distribution: the law's prediction times the point's own Gaussian
        # evidence, truncated at its bound.
        v = own[i]
        post_var = 1.0 / (1.0 / s2 + 1.0 / v)
        post_mean = post_var * (m / s2 + located[i] / v)
        mean_t, var_t = _truncated(post_mean, post_var, *bounds[i])
        precision = 1.0 / var_t - 1.0 / s2
        if precision <= 1.0 / SITE_VAR_MAX:  # the point adds nothing the law did not know
            y[i], noise[i] = m, SITE_VAR_MAX
        else:
            noise[i] = max(1.0 / precision, 1e-3)
            y[i] = noise[i] * (mean_t / var_t - m / s2)
    return y, noise


def _truncated(mean: float, var: float, low: float | None,
               high: float | None) -> tuple[float, float]:
    """Mean and variance of N(mean, var) truncated to [low, high]."""
    sd = math.sqrt(var)
    a = -np.inf if low is None else (low - mean) / sd
    b = np.inf if high is None else (high - mean) / sd
    if a > 30 or b < -30:  # far in the tail: the asymptotic moments (inverse Mills ratio)
        z = a if a > 30 else -b
        lam = z + 1.0 / z
        shift, spread = sd * lam, var * max(1 + z * lam - lam * lam, 0.0)
        return (mean + shift if a > 30 else mean - shift), max(spread, var * 1e-6)
    t_mean, t_var = truncnorm.stats(a, b, loc=mean, scale=sd, moments="mv")
    return float(t_mean), max(float(t_var), var * 1e-6)


def _outlier_probability(law: Law, share: float, names: list[str],
                         extra: np.ndarray) -> np.ndarray:
    """Each task's probability of not following the law, given to each of its points. The task
    is left out as a whole (its points share eta): its residuals r = (Cinv_TT)^-1 alpha_T with
    covariance (Cinv_TT)^-1, less `extra` (the outlier variance the last fit gave it), under a
    follower's density against an outlier's (that plus OUTLIER_VAR shared by its points); mixed
    over the components."""
    out = np.zeros(len(names))
    for name in dict.fromkeys(names):
        idx = np.array([i for i, n in enumerate(names) if n == name])
        cov = np.linalg.inv(law.cinv[:, idx][:, :, idx])  # (G, k, k)
        residual = np.einsum("gij,gj->gi", cov, law.alpha[:, idx])
        follower = cov - extra[np.ix_(idx, idx)]
        outlier = follower + OUTLIER_VAR
        log_f = _log_normal(residual, follower) + math.log(1 - share)
        log_o = _log_normal(residual, outlier) + math.log(share)
        out[idx] = law.weights @ (1.0 / (1.0 + np.exp(np.clip(log_f - log_o, -700, 700))))
    return out


def _log_normal(residual: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """log N(residual; 0, cov) per component, up to the shared constant."""
    _, logdet = np.linalg.slogdet(cov)
    quad = np.einsum("gi,gi->g", residual, np.linalg.solve(cov, residual[..., None])[..., 0])
    return -0.5 * (quad + logdet)


def _fit(x: np.ndarray, y: np.ndarray, noise: np.ndarray, same_task: np.ndarray,
         groups: Sequence[str | None] | None, extra: np.ndarray | None = None) -> Law:
    """The law for observations (x, y) with variances `noise`; `same_task`: 1 where two
    points are of one task; `extra`: covariance added to every component's (the outlier
    variance of tasks likely not to follow the law)."""
    n = len(x)
    fixed = np.diag(noise) + (extra if extra is not None else 0.0)
    labels = list(groups) if groups is not None else [None] * n
    indicators = {g: np.array([lab == g for lab in labels], dtype=float)
                  for g in dict.fromkeys(lab for lab in labels if lab is not None)}
    same_group = sum((np.outer(z, z) for z in indicators.values()), np.zeros((n, n)))
    grid = [(m, c, prior, s, ell, t) for m, c, prior in _mean_models(x)
            for s, ell in DEVIATIONS for t in TAU_GRID]
    model = np.array([g[0] for g in grid])
    step_at = np.array([g[1] for g in grid])
    # The half-Cauchy density times the grid's spacing, which is proportional to tau on a
    # geometric grid: without that factor the many small values would outvote the few large.
    log_prior = np.array([g[2] - math.log1p((g[5] / TAU_SCALE) ** 2) + math.log(g[5])
                          for g in grid])
    signal2 = np.array([g[3] ** 2 for g in grid])
    length = np.array([g[4] for g in grid])
    tau2 = np.array([g[5] ** 2 for g in grid])
    basis, (prior_mean, prior_cov) = _basis(x, step_at), _priors(model)
    residuals = y[None, :] - np.einsum("gnp,gp->gn", basis, prior_mean)
    distance2 = (x[:, None] - x[None, :]) ** 2

    def factor(part: np.ndarray) -> np.ndarray:
        """The Cholesky factors of the covariance of the components `part`."""
        cov = (signal2[part, None, None] * np.exp(-0.5 * distance2 / length[part, None, None] ** 2)
               + np.einsum("gnp,gp,gmp->gnm", basis[part], prior_cov[part], basis[part])
               + tau2[part, None, None] * same_task + REGIME_SD ** 2 * same_group + fixed)
        return np.linalg.cholesky(cov)

    def solved(part: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(C^-1, C^-1 r, log |C|) of the components `part`."""
        chol = factor(part)
        linv = np.linalg.solve(chol, np.broadcast_to(np.eye(n), chol.shape))
        cinv = np.einsum("gkn,gkm->gnm", linv, linv)
        logdet = 2 * np.log(np.diagonal(chol, axis1=1, axis2=2)).sum(axis=1)
        return cinv, np.einsum("gnm,gm->gn", cinv, residuals[part]), logdet

    # Two passes, so that neither memory nor time grows with the grid times n^3 more than
    # once: every component's marginal likelihood from its Cholesky factor (triangular solves
    # only), then the inverses of the few components that carry the posterior.
    loglik = np.empty(len(grid))
    batch = max(1, _MAX_BATCH // max(n * n, 1))
    for start in range(0, len(grid), batch):
        part = np.arange(start, min(start + batch, len(grid)))
        if n <= SMALL:  # batched inverses cost less than a Python loop of solves
            _, alpha, logdet = solved(part)
            loglik[part] = -0.5 * np.einsum("gn,gn->g", alpha, residuals[part]) - 0.5 * logdet
            continue
        for g, lower, r in zip(part, factor(part), residuals[part], strict=True):
            alpha = cho_solve((lower, True), r, check_finite=False)
            loglik[g] = -0.5 * float(alpha @ r) - float(np.log(np.diagonal(lower)).sum())
    logpost = loglik + log_prior
    weights = np.exp(logpost - logpost.max())
    weights /= weights.sum()
    keep = np.argsort(-weights)[:MAX_COMPONENTS]
    keep = keep[weights[keep] > KEEP]
    cinv, alpha, _ = solved(keep)
    return Law(weights=weights[keep] / weights[keep].sum(), x=x, model=model[keep],
               step_at=step_at[keep], signal2=signal2[keep], length=length[keep],
               tau2_each=tau2[keep], alpha=alpha, cinv=cinv, groups=indicators)

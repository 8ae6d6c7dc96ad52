"""Combine tasks: each task's best weight as a noisy observation of a smooth law in log size.

Model (hierarchical, Gaussian throughout, so it has a closed form):
    best weight of task i = f(log10 size_i) + eta_i + eps_i
    f ~ Gaussian process, mean m, squared-exponential kernel (SIGNAL_SD, LENGTH_DECADES)
    eta_i ~ N(0, tau^2)   how far real tasks of one size scatter around the law
    eps_i ~ N(0, v_i)     how imprecisely task i's own trials locate its best (`task_curve`),
                          plus REGIME_VAR when the task was measured in another regime
A new task of size n gets f(log10 n) + eta: its posterior mean, and an interval from the
posterior variance of f plus tau^2 (where the best weight of *a new task* lies, not where the
law lies). m is the precision-weighted mean of the observations. tau is not fixed at its maximum
likelihood (which, with a handful of tasks, is often near zero and gives intervals far too
narrow): the answer averages over a fixed grid of tau values, each weighted by its marginal
likelihood times a half-Cauchy prior of scale TAU_SCALE (deterministic; no optimiser, no
sampling); the predictive variance is the mixture's, i.e. it includes the spread between tau
values.

Why a Gaussian process: it is the smallest model that is smooth in log size, lets each task count
by its own precision (a flat study has a huge v_i and is ignored; a three-seed study with a clear
peak has a small one and dominates its neighbourhood), reverts to the overall mean away from all
evidence with a variance that grows there, and costs one Cholesky of an n x n matrix (n = tasks,
tens). Alternatives: a kernel-weighted mean of best weights (what this replaced: every task counts
the same however weak); a parametric law such as a line in log size (too rigid for a handful of
points that may curve); a full MCMC over the hyperparameters (slow per request, and the interval
barely changes with ~10 tasks).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

SIGNAL_SD = 4.0  # prior sd of the law around its mean, in weight units
LENGTH_DECADES = 0.8  # the law changes over about this many decades of training size
TAU_GRID = tuple(0.25 * i for i in range(1, 21))  # candidate task scatter, 0.25 .. 5
TAU_SCALE = 4.0  # half-Cauchy prior on tau, weight units (weakly informative)
REGIME_VAR = 9.0  # extra variance of evidence from another regime (sd 3 weight units)
Z80 = 1.2816  # two-sided 80% normal quantile


def _kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    d = a[:, None] - b[None, :]
    return SIGNAL_SD ** 2 * np.exp(-0.5 * (d / LENGTH_DECADES) ** 2)


@dataclass
class _Fit:
    x: np.ndarray
    mean: float
    tau2: float
    chol: np.ndarray
    alpha: np.ndarray

    def predict(self, x0: float) -> tuple[float, float, np.ndarray]:
        """(mean, predictive variance of a new task's best weight, each observation's weight)."""
        k = _kernel(np.array([x0]), self.x)[0]
        v = np.linalg.solve(self.chol, k)
        mu = self.mean + float(k @ self.alpha)
        var_f = max(SIGNAL_SD ** 2 - float(v @ v), 0.0)
        influence = np.linalg.solve(self.chol.T, v)  # k^T K^-1
        return mu, var_f + self.tau2, influence


def _fit_with(x: np.ndarray, y: np.ndarray, noise: np.ndarray,
              tau2: float) -> tuple[_Fit, float]:
    total = noise + tau2
    m = float(np.sum(y / total) / np.sum(1.0 / total))
    K = _kernel(x, x) + np.diag(total)
    chol = np.linalg.cholesky(K)
    r = y - m
    alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, r))
    loglik = -0.5 * float(r @ alpha) - float(np.sum(np.log(np.diag(chol))))
    return _Fit(x=x, mean=m, tau2=tau2, chol=chol, alpha=alpha), loglik


@dataclass
class Law:
    fits: list[_Fit]
    probs: np.ndarray  # posterior weight of each tau

    @property
    def tau2(self) -> float:
        return float(sum(p * f.tau2 for p, f in zip(self.probs, self.fits, strict=True)))

    def predict(self, x0: float) -> tuple[float, float, np.ndarray]:
        """(mean, predictive variance of a new task's best weight, each observation's weight),
        averaged over tau."""
        parts = [f.predict(x0) for f in self.fits]
        means = np.array([p[0] for p in parts])
        mean = float(self.probs @ means)
        var = float(self.probs @ (np.array([p[1] for p in parts]) + (means - mean) ** 2))
        influence = sum(p * part[2] for p, part in zip(self.probs, parts, strict=True))
        return mean, var, influence


def fit_law(log_sizes, best, variances, own=None) -> Law:
    """The law from per-task (log10 size, best weight location, variance incl. regime).

    `own`: which points belong to the regime answered for. With two or more of them, tau's
    posterior is judged on them alone: another regime's disagreement is what REGIME_VAR
    discounts, and must not widen the scatter of this one."""
    x = np.asarray(log_sizes, dtype=float)
    y = np.asarray(best, dtype=float)
    noise = np.asarray(variances, dtype=float)
    judge = np.ones(len(x), bool) if own is None or sum(own) < 2 else np.asarray(own, bool)
    fits, logpost = [], []
    for t in TAU_GRID:
        fit = _fit_with(x, y, noise, t * t)[0]
        loglik = _fit_with(x[judge], y[judge], noise[judge], t * t)[1]
        fits.append(fit)
        logpost.append(loglik - math.log1p((t / TAU_SCALE) ** 2))
    lp = np.array(logpost)
    probs = np.exp(lp - lp.max())
    keep = probs > 1e-4  # fewer solves per request
    probs = probs[keep] / probs[keep].sum()
    return Law(fits=[f for f, k in zip(fits, keep, strict=True) if k], probs=probs)


def interval80(mean: float, var: float) -> tuple[float, float]:
    half = Z80 * math.sqrt(var)
    return mean - half, mean + half

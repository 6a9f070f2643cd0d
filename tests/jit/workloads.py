"""Numerical functions written once against a numpy-like namespace `xp`: called with numpy
they are the oracle, with kiln.numpy (under kiln.jit) the code under test."""
from __future__ import annotations

import math

SELU_ALPHA, SELU_SCALE = 1.6732632423543772, 1.0507009873554805


def selu(xp, x):
    return SELU_SCALE * xp.where(x > 0, x, SELU_ALPHA * (xp.exp(x) - 1))


def softmax(xp, x, axis=-1):
    e = xp.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def layer_norm(xp, x, gamma, beta, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / xp.sqrt(var + eps) * gamma + beta


def gelu_mlp(xp, x, w1, b1, w2, b2):
    """A transformer MLP block: x @ w1 + b1, tanh-GELU, @ w2 + b2, residual."""
    h = x @ w1 + b1
    h = 0.5 * h * (1 + xp.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))
    return x + h @ w2 + b2


def kmeans_assign(xp, points, centroids):
    """Index of the nearest centroid of every point (one k-means assignment step)."""
    d = ((points[:, None, :] - centroids[None, :, :]) ** 2).sum(axis=-1)
    return xp.argmin(d, axis=1)


def pairwise_distances(xp, a, b):
    """Euclidean distance matrix via |a|^2 + |b|^2 - 2 a.b (clamped at 0)."""
    sq = (a * a).sum(axis=1)[:, None] + (b * b).sum(axis=1)[None, :] - 2 * a @ b.T
    return xp.sqrt(xp.maximum(sq, 0))


def _norm_cdf(xp, x):
    # Abramowitz-Stegun 7.1.26 through erf-free tanh-free rational form is imprecise; use
    # the logistic-free exact form with exp: 0.5 * (1 + erf(x / sqrt 2)) without erf
    k = 1.0 / (1.0 + 0.2316419 * xp.abs(x))
    poly = k * (0.319381530 + k * (-0.356563782 + k * (1.781477937 + k * (
        -1.821255978 + k * 1.330274429))))
    pdf = xp.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    cdf = 1.0 - pdf * poly
    return xp.where(x >= 0, cdf, 1.0 - cdf)


def black_scholes(xp, s, k, t, r, sigma):
    """European call and put prices (Hull's polynomial approximation of N(x))."""
    sqrt_t = xp.sqrt(t)
    d1 = (xp.log(s / k) + (r + 0.5 * sigma * sigma) * t) / (sigma * sqrt_t)
    d2 = d1 - sigma * sqrt_t
    discount = k * xp.exp(-r * t)
    call = s * _norm_cdf(xp, d1) - discount * _norm_cdf(xp, d2)
    put = discount * _norm_cdf(xp, -d2) - s * _norm_cdf(xp, -d1)
    return call, put


def numexpr_bool(xp, a, b):
    return a * b - 4.1 * a > 2.5 * b


def transpose_reduce(xp, x):
    """Sum over a reshaped transpose: x[A, B*C] -> [C, B, A] -> sum over B."""
    a, bc = x.shape
    y = x.reshape(a, 3, bc // 3).transpose(2, 1, 0)
    return y.sum(axis=1)

#!/usr/bin/env python3
"""Fits the rational erf of crates/engine/src/kernels.rs: erf(x) ≈ x·P(x²)/Q(x²) on [0, 4].

P has 7 coefficients (odd degree 13 in x), Q 5 (even degree 8, Q(0) = 1). The fit minimises the
largest absolute error by Lawson's iteration (least squares, reweighted by the error) on the
linearised problem x·P − erf·Q = 0, against erf to 30 digits (mpmath). It prints the fit's own
error, the error of the coefficients evaluated in f32 (numpy, without fused multiply-adds), and
the coefficients as Rust constants.

    python3 scripts/fit_erf.py      # needs numpy and mpmath (both come with torch)
"""
import numpy as np
from mpmath import erf, mp

mp.dps = 30
LIMIT = 4.0  # erf(4) = 1 − 1.5e-8: 1.0 in f32
N_P, N_Q = 7, 5

xs = np.linspace(0.0, LIMIT, 20001)
target = np.array([float(erf(x)) for x in xs])
t = xs * xs
weights = np.ones_like(xs)
q_values = np.ones_like(xs)
for _ in range(60):
    columns = [xs * t**i for i in range(N_P)] + [-target * t**j for j in range(1, N_Q)]
    scale = weights / np.abs(q_values)
    coef, *_ = np.linalg.lstsq(np.column_stack(columns) * scale[:, None], target * scale, rcond=None)
    p, q = coef[:N_P], np.concatenate([[1.0], coef[N_P:]])
    q_values = sum(q[j] * t**j for j in range(N_Q))
    error = xs * sum(p[i] * t**i for i in range(N_P)) / q_values - target
    weights = weights * np.sqrt(np.abs(error)) + 1e-30
    weights /= weights.max()
print(f"fit: max |error| {np.abs(error).max():.2e} on [0, {LIMIT}], min Q {q_values.min():.3f}")

x32 = np.minimum(np.linspace(0, 5, 20001), LIMIT).astype(np.float32)
t32 = x32 * x32
p32 = np.float32(p[-1])
for c in p[-2::-1]:
    p32 = p32 * t32 + np.float32(c)
q32 = np.float32(q[-1])
for c in q[-2::-1]:
    q32 = q32 * t32 + np.float32(c)
got = (x32 * p32 / q32).astype(np.float64)
want = np.array([float(erf(float(v))) for v in np.linspace(0, 5, 20001)])
print(f"f32 evaluation: max |error| {np.abs(got - want).max():.2e} on [0, 5]")
print("const P: [f32; %d] = [%s];" % (N_P, ", ".join(repr(float(np.float32(c))) for c in p)))
print("const Q: [f32; %d] = [%s];" % (N_Q, ", ".join(repr(float(np.float32(c))) for c in q)))

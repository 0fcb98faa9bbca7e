"""NumPy goldens for bertflow-calib's moment statistics (crates/calib/tests/it/moments.rs).

Run once with numpy installed (never needed by CI):
    python3 -m venv /tmp/npenv && /tmp/npenv/bin/pip install numpy
    /tmp/npenv/bin/python scripts/reference/moments_numpy.py \
        crates/calib/tests/fixtures/moments_numpy.json

Writes a 50 x 6 float32 matrix (anisotropic, correlated, off-centre) and, computed
from it in float64 with NumPy only:
  mean, cov (np.cov, ddof=1), var (np.var, ddof=0), the covariance eigenvalues,
  the outputs of sn, natsv:k=2 and sn+natsv:k=2 (all sign-free), and for whiten the
  Gram matrix Y Y^T of the whitened first 8 rows (= Xc C^-1 Xc^T, free of the
  eigenvectors' signs).
"""
import json
import sys

import numpy as np

N, D, K = 50, 6, 2


def natsv(x, k):
    """All-but-the-top: centre, remove the projections on the top-k eigenvectors."""
    mu = x.mean(axis=0)
    xc = x - mu
    vals, vecs = np.linalg.eigh(np.cov(x, rowvar=False))
    top = vecs[:, np.argsort(vals)[::-1][:k]]
    return xc - (xc @ top) @ top.T


def main(out):
    rng = np.random.default_rng(20261123)
    mix = rng.standard_normal((D, D)) * np.linspace(0.2, 3.0, D)[:, None]
    x = (rng.standard_normal((N, D)) @ mix + np.linspace(-2.0, 5.0, D)).astype(np.float32)
    x64 = x.astype(np.float64)

    mean = x64.mean(axis=0)
    cov = np.cov(x64, rowvar=False)
    var = x64.var(axis=0)
    eig = np.sort(np.linalg.eigvalsh(cov))[::-1]

    sn = (x64 - mean) / np.sqrt(var)
    nat = natsv(x64, K)
    sn_nat = natsv(sn, K)
    xc = (x64 - mean)[:8]
    whiten_gram = xc @ np.linalg.solve(cov, xc.T)

    doc = {
        "source": "scripts/reference/moments_numpy.py (numpy " + np.__version__ + ")",
        "n": N,
        "d": D,
        "k": K,
        "x": [[float(v) for v in row] for row in x],
        "mean": mean.tolist(),
        "cov": cov.tolist(),
        "var": var.tolist(),
        "eigenvalues": eig.tolist(),
        "sn": sn.tolist(),
        "natsv": nat.tolist(),
        "sn_natsv": sn_nat.tolist(),
        "whiten_gram_first8": whiten_gram.tolist(),
    }
    with open(out, "w") as f:
        # One key per line, each value on that line.
        lines = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in doc.items()]
        f.write("{\n" + ",\n".join(lines) + "\n}\n")


if __name__ == "__main__":
    main(sys.argv[1])

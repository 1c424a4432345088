"""Rows of the four certification modes on a fixed, rounding-proof classifier (issue 38).

Run as a script to write ``tests/data/release_rows.json`` with the code on ``PYTHONPATH`` (done
once, with release 9cbe766, before noises became objects); ``test_noises.py`` reruns the same
rows with today's code and compares them exactly.  The classifier counts pixels above 0.5 with
small integer weights, so its logits are exact integers on every CPU and in any summation order.
"""
import json
import sys
from pathlib import Path

import torch
from torch import nn

FILE = Path(__file__).with_name("data") / "release_rows.json"
SETTINGS = {"sigma": 0.25, "n0": 100, "n": 2000, "alpha": 0.001, "radii": [0.1, 0.25, 0.5], "n_max": 5000,
            "seed": 7, "images": 12, "batch_size": 256}


class PixelVotes(nn.Module):
    """logits[c] = sum_i W[c, i] * (x_i > 0.5), W integers in [-3, 3]: exact in float32."""

    def __init__(self) -> None:
        super().__init__()
        w = torch.randint(-3, 4, (10, 64), generator=torch.Generator().manual_seed(0)).float()
        self.register_buffer("w", w)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x.flatten(1) > 0.5).float() @ self.w.T


def rows() -> dict:
    from rsmooth.smoothing import Smooth  # first: the release's seeding module imports it
    from rsmooth.data import get_dataset
    from rsmooth.seeding import generator
    from rsmooth.smoothing.procedures import Adaptive, Certify, Predict, Sequential

    s = SETTINGS
    data = get_dataset("digits", "test")
    smooth = Smooth(PixelVotes(), 10, s["sigma"])
    # the sequential modes with the release's rule (issue 39's alpha_share 1: the anytime bound alone)
    legacy = {"alpha_share": 1.0} if "alpha_share" in getattr(Sequential, "__dataclass_fields__", {}) else {}
    procedures = {"certify": Certify(s["n0"], s["n"], s["alpha"]), "predict": Predict(s["n"], s["alpha"]),
                  "sequential": Sequential(s["n0"], s["alpha"], s["n_max"], 0.05, s["radii"], **legacy),
                  "adaptive": Adaptive(s["n0"], s["alpha"], s["n_max"], 0.05, 0.05, **legacy)}
    out = {}
    for mode, procedure in procedures.items():
        items = ((i, data[i][0], generator(s["seed"], mode, i)) for i in range(s["images"]))
        found = {}
        for i, result, _ in smooth.stream(procedure, items, s["batch_size"]):
            if mode == "predict":
                found[i] = [int(result)]
            elif mode == "certify":
                found[i] = [int(result[0]), repr(float(result[1]))]
            else:
                found[i] = [int(result.prediction), repr(float(result.radius)), int(result.samples),
                            repr(float(result.p_lower)), [d.value for d in result.decisions or ()]]
        out[mode] = [found[i] for i in range(s["images"])]
    return out


if __name__ == "__main__":
    FILE.write_text(json.dumps({"settings": SETTINGS, "rows": rows()}, indent=1) + "\n")
    print(f"wrote {FILE}", file=sys.stderr)

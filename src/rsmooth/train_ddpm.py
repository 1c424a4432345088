"""``python -m rsmooth.train_ddpm --dataset digits --epochs 300 --out runs/ddpm.pt``: train rsmooth's
small DDPM (:func:`rsmooth.engine.ddpm.train_ddpm`) for ``rsmooth certify --diffusion FILE``.

Rerunning the same command continues the file; ``--epochs`` more extends it.  Errors are one line
(``rsmooth: error: ...``, exit status 2).
"""
import sys

if __name__ == "__main__":  # python -m puts the current folder first on sys.path: drop it first
    from rsmooth.imports import drop_implicit_cwd

    drop_implicit_cwd()

import argparse  # noqa: E402
from typing import List, Optional  # noqa: E402

from rsmooth.cli.exits import explain  # noqa: E402


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rsmooth.train_ddpm", description=__doc__.split(":", 1)[1].split("\n\n")[0]
                                .replace("``", "").replace(":func:", "").replace("`", "").strip())
    p.add_argument("--dataset", default="digits", help="a built-in dataset (digits needs no download)")
    p.add_argument("--out", required=True, help="the DDPM file (continued when it exists)")
    p.add_argument("--epochs", type=int, default=300, help="total epochs (default 300)")
    p.add_argument("--batch-size", type=int, default=128, help="images per optimiser step (default 128)")
    p.add_argument("--lr", type=float, default=2e-4, help="Adam's learning rate (default 2e-4)")
    p.add_argument("--width", type=int, default=32, help="the UNet's base channels, a multiple of 8 (default 32)")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights, batches and noise (default 0)")
    p.add_argument("--data-dir", default=None, help="where datasets are read from or downloaded to")
    args = p.parse_args(argv)
    try:
        from rsmooth.engine.ddpm import train_ddpm

        out = train_ddpm(args.dataset, args.out, args.epochs, batch_size=args.batch_size, lr=args.lr,
                         width=args.width, seed=args.seed, data_dir=args.data_dir)
    except Exception as e:  # one line, as the rsmooth command prints it
        status, line = explain(e)
        print(line, file=sys.stderr)
        return status
    print(f"ddpm: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

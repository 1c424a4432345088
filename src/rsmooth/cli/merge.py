"""``rsmooth merge``: join the shard files of certify, predict, attack, audit or targets
(:func:`rsmooth.engine.shards.merge_shards`)."""
from __future__ import annotations

import argparse

from ..errors import RsmoothError


def add_parser(sub: argparse._SubParsersAction) -> None:
    m = sub.add_parser("merge", help="join the shard files of 'certify|predict|attack|audit|targets --shard I/K'",
                       description="Join the K shard files of a certification ('rsmooth certify|predict "
                       "--shard I/K --out OUT' for I = 0..K-1) into OUT and OUT.json: the rows sorted by idx, "
                       "the same file one job writes (the time column aside). The shards must all be "
                       "complete, come from the same settings and together cover the subset exactly once; "
                       "OUT is written atomically and the shard files are deleted afterwards; a killed merge is "
                       "rerun, and one whose OUT is complete says so and deletes what the shards left. Shards of "
                       "'rsmooth attack|targets --shard I/K' merge the same way, into the file one job writes. "
                       "For 'rsmooth audit --shard I/K --out OUT' give the folder OUT: its audit.tsv, "
                       "counterexamples.json and audit.json (with the summary) are written as one job writes them.")
    m.add_argument("files", nargs="*", metavar="FILE",
                   help="OUT, the --out the shards were run with (its .shard-I-of-K files are found); or, "
                   "with --out, the shard files themselves")
    m.add_argument("--out", help="the merged TSV, when FILE lists the shard files")
    m.add_argument("--overwrite", action="store_true", help="replace an OUT that holds a run with other settings")
    m.add_argument("--keep-shards", action="store_true",
                   help="keep the shard files after merging (then no write access beside them is needed: "
                   "shards on a read-only mount merge with --out elsewhere)")
    m.set_defaults(func=run)


def run(args: argparse.Namespace) -> None:
    from pathlib import Path

    from ..engine.shards import CERTIFY, merge_shards, shard_groups
    from ..engine.targets import shard_kind

    if args.out is None and len(args.files) != 1:
        raise RsmoothError("merge takes OUT (the --out of the shards), or --out OUT and the shard files")
    if args.out is not None and not args.files:
        raise RsmoothError(f"--out {args.out} without shard files: list them, or give OUT alone to find them")
    if _merge_audit(args):
        return
    if args.out is None:
        if Path(args.files[0]).is_dir():  # a folder of 'certify --corruption all --shard I/K'
            groups = shard_groups(args.files[0])
            for out in groups:
                merge_shards(out, CERTIFY, None, overwrite=args.overwrite, keep=args.keep_shards)
            print(f"results: {args.files[0]} " + (f"({len(groups)} files merged)" if groups
                                                   else "(already complete: no shard files left to merge)"))
            return
        out, shards = args.files[0], []
    else:
        out, shards = args.out, args.files
    from ..engine.attack import ATTACK, merges_attack

    kind = ATTACK if merges_attack(out, shards) else shard_kind(out, shards)
    path = merge_shards(out, kind, shards, overwrite=args.overwrite, keep=args.keep_shards)
    print(f"{'targets' if kind.command == 'targets' else 'results'}: {path}")


def _merge_audit(args: argparse.Namespace) -> bool:
    """Merge the shards of an audit when they are an audit's; whether they were."""
    from ..engine.audit import merge_audit, merges_audit, read_summary
    from ..progress import emit

    out, shards = (args.files[0], []) if args.out is None else (args.out, args.files)
    if not merges_audit(out, shards):
        return False
    tsv = merge_audit(out, shards, overwrite=args.overwrite, keep=args.keep_shards)
    emit(read_summary(tsv.parent).line())
    print(f"results: {tsv.parent}")
    return True

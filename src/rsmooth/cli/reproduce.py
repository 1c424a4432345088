"""``rsmooth reproduce``: a paper table trained, certified and tabulated (:mod:`rsmooth.reproduce`),
its steps run through :func:`rsmooth.cli.main`, which the CLI hands down."""
from __future__ import annotations

import argparse

from ..errors import RsmoothError
from .flags import UNITS, add_common_data, integer, number


def add_parser(sub: argparse._SubParsersAction) -> None:
    rp = sub.add_parser(
        "reproduce", help="train, certify and tabulate a whole paper table beside the published values",
        description="Train every (method, sigma) row of a paper table from its preset (CAT-RS through its "
        "consistency targets, sharing the sigma0 = 0.25 Gaussian model across sigmas), certify with the table's "
        "protocol and write OUT/table.md in the paper's layout with the published values and the difference "
        "(mean +- std over --seeds). Every step is an ordinary run folder under OUT/runs: rerun the same "
        "command after a kill to continue. " + UNITS)
    rp.add_argument("table", nargs="?", help="e.g. catrs:table4 (Jeong, Kim, Shin 2023, CAT-RS, arXiv 2212.09000, "
                    "Table 4: Fashion-MNIST); --list shows them all")
    rp.add_argument("--list", action="store_true", help="list the tables, what each trains and the data it needs, "
                    "GPU-hours at the paper budget and the wall time on a 2-core CPU at --budget")
    rp.add_argument("--out", help="output folder (one table and budget per folder)")
    rp.add_argument("--budget", default="small",
                    help="paper (the published protocol), small (default: epochs x0.1, 1/6 of the training set, "
                    "targets and n x0.1, every 10th test example) or smoke (every step at its least: 1 epoch, 0.2%% of the "
                    "training set, targets and n x0.001, every 500th test example: a table in minutes on a CPU); a "
                    "factor may be "
                    "changed: small,epochs=0.05,train=0.1,targets=0.02,n=0.02,test=0.02. The table's caption states it")
    rp.add_argument("--seeds", type=integer, help="train every row with seeds 0..N-1 and show mean +- std "
                    "(default: as many as the published values are over: 5 for catrs:table12, else 1)")
    rp.add_argument("--methods", nargs="+", metavar="METHOD", help="only the rows of these methods (default: all)")
    rp.add_argument("--sigmas", type=number, nargs="+", metavar="SIGMA",
                    help="only the rows of these noise levels, [0,1] pixel units (default: all)")
    rp.add_argument("--jobs", type=integer, default=1,
                    help="run up to K independent steps at once, each in its own process with its log in "
                    "OUT/logs/ (every 10 minutes this command prints each running step's latest line); "
                    "processes no step needs certify: a certification runs as shards over them, merged when "
                    "done (default: 1)")
    rp.add_argument("--print-commands", action="store_true",
                    help="print the steps as rsmooth commands, by stage (a stage's commands are independent: one "
                    "cluster job each), and run nothing; then --collect writes the table")
    rp.add_argument("--collect", action="store_true", help="write the table from the runs done, running nothing")
    add_common_data(rp)
    rp.set_defaults(func=run, rerun_hint=" to continue (finished steps are kept)")


def run(args: argparse.Namespace) -> None:
    """List the tables, or run (print, collect) a reproduction, its steps through ``args.main``."""
    from ..reproduce import list_tables, reproduce

    if args.list:
        print(list_tables(args.budget))
        return
    if not args.table or not args.out:
        raise RsmoothError("reproduce needs TABLE and --out DIR (or --list to see the tables)")
    print(reproduce(args.table, args.out, budget=args.budget, seeds=args.seeds, jobs=args.jobs,
                    methods=args.methods, sigmas=args.sigmas,
                    print_commands=args.print_commands, collect=args.collect, data_dir=args.data_dir,
                    device=args.device, run_step=args.main))

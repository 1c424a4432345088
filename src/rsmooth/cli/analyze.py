"""``rsmooth analyze``: tables and plots of certify files or corruption folders
(:func:`rsmooth.report.analyze`, :func:`rsmooth.report.corruption_tables`)."""
from __future__ import annotations

import argparse

from ..errors import RsmoothError
from .flags import UNITS, number


def add_parser(sub: argparse._SubParsersAction) -> None:
    a = sub.add_parser("analyze", help="ACR and certified accuracy tables and plots",
                       description="Tables in the papers' layout (rows = result files, columns = ACR "
                       "then certified accuracy in % at each radius). " + UNITS)
    a.add_argument("results", nargs="*", help="certify TSV files (rsmooth's or any public codebase's)")
    a.add_argument("--corruptions", nargs="+", metavar="FOLDER",
                   help="instead of files: one folder per model of 'rsmooth certify --corruption all' results; "
                   "prints the corruption tables of Jeong, Kim, Shin 2023 (CAT-RS, arXiv 2212.09000): ACR and "
                   "certified accuracy at r = 0 per severity with their means over the benchmark's corruptions, "
                   "mACR and mAcc (Table 13), and per corruption for each severity (Tables 14-23), or per "
                   "corruption without severities as MNIST-C (Tables 24-25)")
    a.add_argument("--severity", help="with --corruptions: only this severity's tables (default: all)")
    a.add_argument("--paper", metavar="TABLE",
                   help="with certify files: a paper table (e.g. catrs:table4 = Jeong, Kim, Shin 2023, CAT-RS, "
                   "arXiv 2212.09000, Table 4, Fashion-MNIST) whose published ACR and certified accuracy follow "
                   "our rows: the rows that match a file's dataset, sigma and method, and its hyperparameters where "
                   "its metadata records them (the whole table, marked for reference, when none does); 'list' "
                   "lists the tables. With --corruptions: auto (default: the paper's numbers beside ours when the dataset, sigma and "
                   "method match), always (marked not comparable when they do not) or never")
    a.add_argument("--radii", type=number, nargs="+", help="radii for the columns (default: 0 to the largest radius, step 0.25)")
    a.add_argument("--format", default="markdown", choices=["markdown", "latex", "csv"], help="table format")
    a.add_argument("--json", action="store_true", help="print JSON instead of a table")
    a.add_argument("--plot", help="write a plot of certified accuracy against radius; the extension "
                   "picks the format: .png, .pdf or .svg (png without one)")
    a.add_argument("--labels", nargs="+", help="one label per file or --corruptions folder (default: the file "
                   "names, or the run folders when the names repeat, as runs/*/certify.tsv; for folders the "
                   "training method)")
    a.add_argument("--ci", action="store_true",
                   help="honest accuracy figures: each certified accuracy with its exact two-sided Clopper-Pearson "
                   "interval over the test sample (the sampling of test examples, not each certificate's Monte-Carlo "
                   "error) and Cohen et al.'s high-probability lower bound, which discounts the wrong certificates "
                   "(at most the quantile of Binomial(m, alpha) of them; Cohen, Rosenfeld, Kolter 2019, arXiv "
                   "1902.02918, Sec. 3.2 and 4); CSV gets columns acc@r_lo, acc@r_hi, acc@r_hp, --json the numbers, "
                   "--plot error bars; notes under the table say what each means")
    a.add_argument("--paired", action="store_true",
                   help="compare two certify files image by image on the test images (idx) both hold, e.g. yours "
                   "against a paper's released TSV: certified accuracy of each at each radius, the images certified "
                   "by one file only with the exact McNemar test (McNemar 1947) of whether they split evenly, and "
                   "the ACR difference with its 95%% interval (--ci-level) over the images; free of the sampling "
                   "error that intervals against a paper's figures carry")
    a.add_argument("--as-printed", action="store_true",
                   help="with --paired: round the radii of both files to 3 significant digits, as the public "
                   "codebases' certify scripts print them (rsmooth writes full precision)")
    a.add_argument("--ci-level", type=number, metavar="LEVEL",
                   help="with --ci: the confidence level of both; with --paired: of the ACR difference's interval "
                   "(default: 0.95)")
    a.add_argument("--alpha", type=number,
                   help="with --ci: the certificates' alpha for files without a sidecar JSON that records it "
                   "(public codebases' TSVs; their standard protocol: 0.001); without it such files get no "
                   "high-probability bound")
    a.add_argument("--attack", metavar="FILE",
                   help="an attack TSV of 'rsmooth attack' on the images of the one certify file given: one table "
                   "of certified and empirical accuracy at each of its eps (--plot: both curves in one figure); "
                   "refused when the files' images, labels, sigma or noise differ")
    a.set_defaults(func=run)


def run(args: argparse.Namespace) -> None:
    from ..report import analyze, corruption_tables
    from ..report.corruptions import PAPER_MODES
    from ..report.paper import PAPER_TABLES, check_table_id, list_tables

    if args.paper == "list":
        print(list_tables())
        return
    if args.corruptions and args.paper not in (None, *PAPER_MODES):
        raise RsmoothError(f"--paper {args.paper}: with --corruptions choose one of {', '.join(PAPER_MODES)}")
    if not args.corruptions and args.paper in PAPER_MODES:
        raise RsmoothError(f"--paper {args.paper} goes with --corruptions FOLDER...; for certify files give a "
                           f"table: {', '.join(PAPER_TABLES)}")
    if not args.corruptions and args.paper is not None:
        try:
            check_table_id(args.paper)
        except RsmoothError:
            raise RsmoothError(f"--paper {args.paper}: unknown table; choose one of {', '.join(PAPER_TABLES)} "
                               f"('--paper list' describes them)") from None
    if args.attack is not None:
        _empirical(args)
        return
    if args.paired or args.as_printed:
        _compare(args)
        return
    if not args.ci and (args.ci_level is not None or args.alpha is not None):
        raise RsmoothError(f"{'--ci-level' if args.ci_level is not None else '--alpha'} goes with --ci")
    if args.corruptions:
        if args.ci:
            raise RsmoothError("--ci goes with certify files, not --corruptions folders")
        if args.results or args.radii or args.plot:
            raise RsmoothError("--corruptions takes folders of corruption results and prints their tables; "
                               "give certify files (with --radii, --plot) in another 'rsmooth analyze' call")
        print(corruption_tables(args.corruptions, labels=args.labels, fmt=args.format, severity=args.severity,
                                as_json=args.json, paper=args.paper or "auto"))
        return
    if not args.results:
        raise RsmoothError("analyze needs certify TSV files, or --corruptions FOLDER... for corruption results")
    if args.severity is not None:
        raise RsmoothError("--severity goes with --corruptions FOLDER...")

    ci = (args.ci_level if args.ci_level is not None else True) if args.ci else None
    print(analyze(args.results, radii=args.radii, fmt=args.format, labels=args.labels,
                  plot=args.plot, as_json=args.json, paper=args.paper, ci=ci, alpha=args.alpha))


def _compare(args: argparse.Namespace) -> None:
    """``--paired``: two certify files image by image."""
    from ..report.paired import compare

    if not args.paired:
        raise RsmoothError("--as-printed goes with --paired")
    others = [f for f, on in (("--corruptions", args.corruptions), ("--paper", args.paper), ("--ci", args.ci),
                              ("--plot", args.plot), ("--alpha", args.alpha is not None)) if on]
    if others:
        raise RsmoothError(f"--paired compares two certify files; {others[0]} goes with the tables of "
                           f"'rsmooth analyze' without --paired")
    print(compare(args.results, radii=args.radii, labels=args.labels, fmt=args.format, as_json=args.json,
                  level=0.95 if args.ci_level is None else args.ci_level, as_printed=args.as_printed))


def _empirical(args: argparse.Namespace) -> None:
    """``--attack FILE``: certified and empirical accuracy of one certify file and its attack file."""
    from ..report.attack import empirical_table

    if len(args.results) != 1:
        raise RsmoothError(f"--attack takes the one certify file of the attacked images, got {len(args.results)} "
                           f"files")
    others = [f for f, on in (("--corruptions", args.corruptions), ("--paper", args.paper), ("--ci", args.ci),
                              ("--paired", args.paired), ("--radii", args.radii), ("--labels", args.labels)) if on]
    if others:
        raise RsmoothError(f"{others[0]} does not go with --attack (its table has the attack's eps as radii)")
    print(empirical_table(args.results[0], args.attack, fmt=args.format, as_json=args.json, plot=args.plot))

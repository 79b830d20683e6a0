"""Split learning's label defences on one chart: utility against attack success and ε, per defence.

For each defence asked (default: ``grad-gauss``, isotropic Gaussian noise with per-example
clipping, accounted by ``dp-accounting``; and ``marvell``, Li et al.'s optimised noise, ICLR
2022, empirical) the script runs split learning's frontier
(:func:`vflcrypto.protocols.split.frontier.frontier`) at several budgets, beside the undefended
run and the **plaintext model** (the same extractors and head trained in one process on the
same rows, no protocol), and prints

* one table per defence: budget, accounted ε (none for Marvell), test accuracy, test AUC and
  the leak AUCs of norm and direction scoring (folded, worst party; the paper's metric) on the
  first epoch and on the worst epoch of the run, with their chance levels;
* **the comparison at equal leakage**: for every point of the first defence (Marvell), the
  other's utility interpolated at the same leak (the worse of the two worst-epoch leak AUCs),
  the difference, and the verdict: does the first dominate where their leak ranges overlap?

The setting is the binary digits (digit 8 against the rest, 500 overlap rows, 20 epochs;
``--multiclass`` runs the audit's 10-class digits instead, where Marvell does not apply).
``--png FILE`` draws utility against each attack and against ε (one curve per defence;
:func:`vflcrypto.audit.frontier_report.write_frontier_png`), ``--html FILE`` the same page as
``vflcrypto audit split --defence D --html``. Figures vary run to run (fresh CSPRNG noise):
``--repeats`` averages. Run: ``.venv/bin/python bench/privacy_frontier.py --repeats 3 --png f.png``.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

#: the default budgets: ε for the DP defences (grad-gauss up to absurd ε, so that its curve reaches the leak levels
#: Marvell's points have), Marvell's power bound s (the authors ran s = 0.01 to 90)
DEFAULT_BUDGETS = {"grad-gauss": [16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0],
                   "marvell": [0.0625, 0.25, 1.0, 4.0, 16.0], "label-rr": [1.0, 2.0, 4.0, 8.0]}


def plaintext_model(server: Any, parties: list[Any], epochs: int, seed: int = 0) -> dict[str, float | None]:
    """The split model (each party's default extractor, the server's head, Adam, the same batches) trained in one
    process: what the protocol's undefended run should match. Test accuracy, and test AUC on a binary task."""
    import torch
    from vflcrypto.protocols.split import SplitConfig, epoch_batches

    from vflcrypto.audit.literature import roc_auc
    from vflcrypto.ml import nn as vnn

    cfg = SplitConfig(epochs=epochs, seed=seed)
    fs = [vnn.mlp_extractor(p.X_overlap, cfg.dim, hidden=cfg.hidden, seed=cfg.seed * 1000 + k)
          for k, p in enumerate(parties)]
    head = vnn.head(cfg.dim * len(parties), server.n_classes, seed=cfg.seed)
    opts = [vnn.adam([f], cfg.lr) for f in fs] + [vnn.adam([head], cfg.head_lr)]
    y = torch.as_tensor(server.y_overlap, dtype=torch.long)
    for e in range(epochs):
        for rows in epoch_batches(len(y), cfg.batch_size, cfg.seed, e):
            for f in fs:
                f.train()
            loss = torch.nn.functional.cross_entropy(
                head(torch.cat([f(torch.as_tensor(p.X_overlap[rows])) for f, p in zip(fs, parties, strict=True)], 1)),
                y[rows])
            for o in opts:
                o.zero_grad()
            loss.backward()
            for o in opts:
                o.step()
    H = np.concatenate([vnn.forward(f, p.X_test) for f, p in zip(fs, parties, strict=True)], axis=1)
    proba = vnn.predict_proba(head, H)
    yt = np.asarray(server.y_test)
    auc = roc_auc(proba[:, 1], yt == 1) if server.n_classes == 2 else None
    return {"test_accuracy": float(np.mean(proba.argmax(1) == yt)), "test_auc": auc}


def leak(point: dict[str, Any]) -> float:
    """The worse of the two gradient attacks' scores: on the worst epoch where measured (binary: folded leak AUCs),
    else on the first epoch."""
    sc = point["scores"]
    if "norm_worst_epoch" in sc:
        return max(sc["norm_worst_epoch"], sc.get("direction_worst_epoch", 0.0))
    return max(sc.get("norm_scoring", 0.0), sc.get("direction_scoring", 0.0))


def figure(point: dict[str, Any], utility: str) -> float | None:
    """A point's utility figure (of :meth:`~vflcrypto.audit.defences.FrontierPoint.to_dict`): ``test_accuracy``, or a
    further figure such as ``test_auc`` (None where the point has none)."""
    if utility == "test_accuracy":
        return point["test_accuracy"]
    value = point.get("utility", {}).get(utility)
    return None if value is None else float(value)


def compare(first: dict[str, Any], other: dict[str, Any], utility: str) -> dict[str, Any]:
    """``first``'s points against ``other``'s utility interpolated (piecewise linearly in leak) at the same leak;
    points outside ``other``'s leak range are left out. Dominates: every compared difference >= 0."""
    pts = sorted((leak(p), u) for p in other["points"] if (u := figure(p, utility)) is not None)
    xs, ys = [x for x, _ in pts], [y for _, y in pts]
    rows = []
    for p in first["points"]:
        mine = figure(p, utility)
        if p["budget"] is None or mine is None:
            continue
        x = leak(p)
        if not xs or x < xs[0] or x > xs[-1]:
            rows.append({"budget": p["budget"], "leak": x, "utility": mine, "other": None, "difference": None})
            continue
        u = float(np.interp(x, xs, ys))
        rows.append({"budget": p["budget"], "leak": x, "utility": mine, "other": u, "difference": mine - u})
    diffs = [r["difference"] for r in rows if r["difference"] is not None]
    return {"first": first["defence"], "other": other["defence"], "utility": utility, "points": rows,
            "compared": len(diffs), "dominates": bool(diffs) and min(diffs) >= 0,
            "mean_difference": float(np.mean(diffs)) if diffs else None}


def _table(f: dict[str, Any], utility: str) -> list[str]:
    def num(x: float | None, fmt: str = ".3f") -> str:
        return "-" if x is None else format(x, fmt)

    lines = [f"{f['defence']} (budget: {f['budget_name']}); leak AUCs folded, worst party; first epoch, and worst "
             "epoch",
             f"{'budget':>8}{'epsilon':>9}{'test acc':>10}{'test auc':>10}{'norm e1':>9}{'dir e1':>8}{'norm max':>10}"
             f"{'dir max':>9}{'leak':>7}"]
    for p in f["points"]:
        sc = p["scores"]
        lines.append(f"{'none' if p['budget'] is None else format(p['budget'], 'g'):>8}{num(p['epsilon'], '.0f'):>9}"
                     f"{num(p['test_accuracy']):>10}{num(figure(p, 'test_auc')):>10}"
                     f"{num(sc.get('norm_scoring')):>9}{num(sc.get('direction_scoring')):>8}"
                     f"{num(sc.get('norm_worst_epoch')):>10}{num(sc.get('direction_worst_epoch')):>9}{leak(p):>7.3f}")
    base = f["points"][0]["baselines"] if f["points"] else {}
    lines.append(f"{'chance':>8}{'':>9}{'':>10}{'':>10}{num(base.get('norm_scoring')):>9}"
                 f"{num(base.get('direction_scoring')):>8}{num(base.get('norm_worst_epoch')):>10}"
                 f"{num(base.get('direction_worst_epoch')):>9}")
    return lines


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--defences", default="marvell,grad-gauss", help="comma-separated (first: compared to the rest)")
    ap.add_argument("--budgets", action="append", default=[], metavar="D=B,B,...",
                    help=f"a defence's budgets (default {DEFAULT_BUDGETS})")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--overlap", type=int, default=None, help="overlap rows (default 500 binary, 100 multiclass)")
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--multiclass", action="store_true", help="the audit's 10-class digits (no Marvell)")
    ap.add_argument("--png", metavar="FILE.png")
    ap.add_argument("--html", metavar="FILE.html")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from vflcrypto.protocols._repvfl import binary_digits_example, digits_example
    from vflcrypto.protocols.split.frontier import BINARY_OVERLAP, frontier

    from vflcrypto.audit.frontier_report import render_frontier_html, utility_name, write_frontier_png
    from vflcrypto.data.files import atomic_set, atomic_write_text

    budgets = dict(DEFAULT_BUDGETS)
    for spec in args.budgets:
        name, _, values = spec.partition("=")
        budgets[name] = [float(v) for v in values.split(",") if v]
    defences = [d for d in args.defences.split(",") if d]
    binary = not args.multiclass
    overlap = args.overlap or (BINARY_OVERLAP if binary else 100)
    t0 = time.perf_counter()
    server, parties = binary_digits_example(overlap) if binary else digits_example(overlap)
    plain = plaintext_model(server, parties, args.epochs)
    frontiers = [frontier(d, budgets[d], args.repeats, binary=binary, overlap=overlap, epochs=args.epochs)
                 for d in defences]
    utility = "test_auc" if utility_name(frontiers) == "test AUC" else "test_accuracy"
    dicts = [f.to_dict() for f in frontiers]
    out: dict[str, Any] = {"setting": {"binary": binary, "overlap": overlap, "epochs": args.epochs,
                                       "repeats": args.repeats}, "plaintext": plain, "frontiers": dicts,
                           "comparisons": [compare(dicts[0], o, utility) for o in dicts[1:]]}
    out["seconds"] = round(time.perf_counter() - t0, 1)
    with atomic_set():  # the figure and the page published together, or neither
        if args.png:
            write_frontier_png(frontiers, args.png, plaintext=plain[utility])
        if args.html:
            atomic_write_text(args.html, render_frontier_html(frontiers, plaintext=plain[utility]))
    if args.json:
        print(json.dumps(out, indent=2))
        return out
    print(f"split learning, {'binary digits (8 against the rest)' if binary else 'digits'}, {overlap} overlap rows, "
          f"{args.epochs} epochs, {args.repeats} run(s) per point; plaintext model: test accuracy "
          f"{plain['test_accuracy']:.3f}" + (f", test AUC {plain['test_auc']:.3f}" if plain["test_auc"] else ""))
    for f in dicts:
        print()
        print("\n".join(_table(f, utility)))
    for c in out["comparisons"]:
        print(f"\n{c['first']} against {c['other']} at equal leak ({utility}, interpolated):")
        for r in c["points"]:
            other = "outside its leak range" if r["other"] is None else (
                f"{c['other']} {r['other']:.3f}, difference {r['difference']:+.3f}")
            print(f"  {c['first']} {r['budget']:g}: leak {r['leak']:.3f}, {utility} {r['utility']:.3f}; {other}")
        verdict = ("dominates" if c["dominates"] else "does not dominate") if c["compared"] else "cannot be compared"
        print(f"  {c['first']} {verdict} {c['other']} on {c['compared']} point(s) in the common leak range"
              + (f" (mean difference {c['mean_difference']:+.3f})" if c["mean_difference"] is not None else ""))
    print(f"\n{out['seconds']} s")
    return out


if __name__ == "__main__":
    main()

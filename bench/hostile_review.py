"""Re-run the hostile-input review's cases against the command line (outside CI: about 40 runs).

Each case builds its input from the bundled examples (``vflcrypto examples``), runs one
command as a user would (a subprocess), and is judged on what the user sees: the exit code,
one line of error naming what is wrong (the file, line or column where it applies), never a
Python traceback, and for the cases that must work, the right result. The cases are the
classes of the review that opened the all-or-nothing / input-validation work: single-class
training, the label file given as a party, a huge label, NaN and header-only files, constant
columns named, few rows, 2-party secure aggregation, bad degrees, blank IDs, duplicate headers,
extreme values, semicolon and CR-only files, deterministic alignment, a model directory reused
by another protocol, a truncated model file, and flags out of range.

    python bench/hostile_review.py [--only NAME] [--json]

Prints one line per case (``ok`` or what went wrong) and exits 1 if any case failed.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

SMALL = ["--key-bits", "1024", "--allow-insecure"]


@dataclass
class Case:
    name: str
    setup: Callable[[Path], list[list[str]]]  # builds inputs under the directory; returns the commands
    rc: int  # expected exit code of the last command (0: must work)
    says: tuple[str, ...] = ()  # every string must appear in stderr (rc != 0) or in stdout + stderr
    check: Callable[[Path, list[subprocess.CompletedProcess[str]]], str | None] | None = None


def _rows(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        return list(csv.reader(f))


def _write(path: Path, rows: list[list[str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(rows)
    return path


def _edit(src: Path, dst: Path, fn: Callable[[list[list[str]]], list[list[str]]]) -> Path:
    return _write(dst, fn(_rows(src)))


def _set(rows: list[list[str]], col: str, row: int, value: str) -> list[list[str]]:
    rows[row][rows[0].index(col)] = value
    return rows


def _const(rows: list[list[str]], col: str) -> list[list[str]]:
    i = rows[0].index(col)
    for r in rows[1:]:
        r[i] = "1"
    return rows


def cases(ex: Path) -> list[Case]:
    d = ex / "digits"
    bank, shop = ex / "bank.csv", ex / "shop.csv"

    def single_class(w: Path) -> list[list[str]]:
        srv = _edit(d / "server.csv", w / "server.csv", lambda r: [r[0]] + [[x[0], "3"] for x in r[1:]])
        return [["train", "oneshot", "--server", str(srv), "--party", str(d / "party0.csv"), "--party",
                 str(d / "party1.csv"), "--id-column", "id", "--label", "digit"]]

    def label_as_party(w: Path) -> list[list[str]]:
        return [["train", "oneshot", "--server", str(d / "server.csv"), "--party", str(d / "party0.csv"),
                 "--party", str(d / "server.csv"), "--id-column", "id", "--label", "digit"]]

    def huge_label(w: Path) -> list[list[str]]:
        srv = _edit(d / "server.csv", w / "server.csv", lambda r: _set(r, "digit", 5, "9999999"))
        return [["train", "split", "--server", str(srv), "--party", str(d / "party0.csv"), "--party",
                 str(d / "party1.csv"), "--id-column", "id", "--label", "digit"]]

    def nan_feature(w: Path) -> list[list[str]]:
        p0 = _edit(d / "party0.csv", w / "party0.csv", lambda r: _set(r, "px5", 7, "nan"))
        return [["train", "fewshot", "--server", str(d / "server.csv"), "--party", str(p0), "--party",
                 str(d / "party1.csv"), "--id-column", "id", "--label", "digit"]]

    def hfl_header_only(w: Path) -> list[list[str]]:
        c = _edit(ex / "hfl" / "client0.csv", w / "client0.csv", lambda r: r[:1])
        return [["train", "fedavg", "--client", str(c), "--client", str(ex / "hfl" / "client1.csv"),
                 "--client", str(ex / "hfl" / "client2.csv"), "--label", "digit"]]

    def constant_column(w: Path) -> list[list[str]]:
        s = _edit(shop, w / "shop.csv", lambda r: _const(r, "visits"))
        return [["train", "pearson", "--active", str(bank), "--passive", str(s), "--id-column", "id"]]

    def poisson_few_rows(w: Path) -> list[list[str]]:
        common = {r[0] for r in _rows(ex / "claims" / "pharmacy.csv")[1:]}
        a = _edit(ex / "claims" / "insurer.csv", w / "insurer.csv",
                  lambda r: [r[0], *[x for x in r[1:] if x[0] in common][:3]])
        return [["train", "poisson", "--active", str(a), "--passive", str(ex / "claims" / "pharmacy.csv"),
                 "--id-column", "id", "--label", "claims", "--epochs", "2", *SMALL]]

    def secagg_two(w: Path) -> list[list[str]]:
        return [["train", "fedavg", "--client", str(ex / "hfl" / "client0.csv"), "--client",
                 str(ex / "hfl" / "client1.csv"), "--label", "digit", "--rounds", "1"]]

    def degree_drop(w: Path) -> list[list[str]]:
        return [["train", "fedavg", "--dataset", "digits", "--clients", "4", "--degree", "2", "--drop", "2",
                 "--rounds", "1"]]

    def blank_id(w: Path) -> list[list[str]]:
        rows = _rows(bank)
        rows.insert(3, [])
        b = _write(w / "bank.csv", rows)
        return [["align", "--left", str(b), "--right", str(shop), "--id-column", "id", "--out-dir", str(w / "o")]]

    def dup_header(w: Path) -> list[list[str]]:
        b = _edit(bank, w / "bank.csv", lambda r: [["id", "id", *r[0][2:]], *r[1:]])
        return [["align", "--left", str(b), "--right", str(shop), "--id-column", "id", "--out-dir", str(w / "o")]]

    def extreme(w: Path) -> list[list[str]]:
        b = _edit(bank, w / "bank.csv", lambda r: _set(r, "income", 4, "1e300"))
        return [["train", "linreg", "--active", str(b), "--passive", str(shop), "--id-column", "id",
                 "--label", "credit_score", *SMALL]]

    def semicolon(w: Path) -> list[list[str]]:
        text = bank.read_text().replace(",", ";")
        (w / "bank.csv").write_text(text)
        return [["align", "--left", str(w / "bank.csv"), "--right", str(shop), "--id-column", "id",
                 "--out-dir", str(w / "o")]]

    def cr_only(w: Path) -> list[list[str]]:
        (w / "bank.csv").write_bytes(bank.read_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r"))
        return [["align", "--left", str(w / "bank.csv"), "--right", str(shop), "--id-column", "id",
                 "--out-dir", str(w / "o")]]

    def align_twice(w: Path) -> list[list[str]]:
        return [["align", "--left", str(bank), "--right", str(shop), "--id-column", "id", "--out-dir", str(w / o)]
                for o in ("o1", "o2")]

    def same_bytes(w: Path, _: list[subprocess.CompletedProcess[str]]) -> str | None:
        a = sorted((w / "o1").iterdir())
        b = sorted((w / "o2").iterdir())
        if [p.name for p in a] != [p.name for p in b] or not a:
            return f"different outputs: {a} / {b}"
        diff = [p.name for p, q in zip(a, b, strict=True) if p.read_bytes() != q.read_bytes()]
        return f"{diff} differ between two runs" if diff else None

    def model_dir_reuse(w: Path) -> list[list[str]]:
        m = str(w / "model")
        return [["train", "linreg", "--active", str(bank), "--passive", str(shop), "--id-column", "id",
                 "--label", "credit_score", "--epochs", "1", "--model-dir", m, *SMALL],
                ["train", "secureboost", "--active", str(bank), "--passive", str(shop), "--id-column", "id",
                 "--label", "defaulted", "--trees", "1", "--model-dir", m, *SMALL]]

    def truncated_model(w: Path) -> list[list[str]]:
        m = w / "model"
        return [["train", "linreg", "--active", str(bank), "--passive", str(shop), "--id-column", "id",
                 "--label", "credit_score", "--epochs", "1", "--model-dir", str(m), *SMALL],
                ["__truncate__", str(m / "active.npz")],
                ["predict", "linreg", "--model-dir", str(m), "--active", str(bank), "--passive", str(shop),
                 "--id-column", "id", "--out", str(w / "pred.csv"), *SMALL]]

    def chunk_zero(w: Path) -> list[list[str]]:
        return [["party", "--config", str(w / "none.toml"), "--as", "active", "align", "--data", str(bank),
                 "--id-column", "id", "--out", str(w / "o.csv"), "--chunk-size", "0"]]

    return [
        Case("single class (one-shot)", single_class, 2, ("single class",)),
        Case("label file as a party (one-shot)", label_as_party, 2, ("digit",)),
        Case("label 9999999 (split)", huge_label, 2, ("9999999",)),
        Case("NaN feature (few-shot)", nan_feature, 2, ("party0.csv", "px5")),
        Case("HFL header-only client file", hfl_header_only, 2, ("client0.csv",)),
        Case("constant column named (pearson)", constant_column, 2, ("visits", "shop.csv")),
        Case("poisson on 3 rows: warned, then refused", poisson_few_rows, 2,
             ("only 3 aligned rows", "allow_small_batches")),
        Case("secure aggregation with 2 clients", secagg_two, 0),
        Case("--degree 2 --drop 2", degree_drop, 2, ("--drop 2", "neighbourhood", "threshold")),
        Case("blank line in an ID file", blank_id, 2, ("bank.csv", "line 4")),
        Case("duplicate header id,id", dup_header, 2, ("bank.csv", "id")),
        Case("1e300 value", extreme, 2, ("income",)),
        Case("semicolon-separated file", semicolon, 2, ("semicolon",)),
        Case("CR-only line ends", cr_only, 2, ("CR",)),
        Case("align twice: byte-identical outputs", align_twice, 0, (), same_bytes),
        Case("model dir reused by another protocol", model_dir_reuse, 2, ("--overwrite",)),
        Case("truncated model file", truncated_model, 2, ("active.npz",)),
        Case("party align --chunk-size 0", chunk_zero, 2, ("--chunk-size",)),
    ]


def run_case(case: Case, ex: Path, root: Path) -> tuple[str | None, float]:
    work = root / case.name.replace(" ", "_").replace("/", "_")
    work.mkdir()
    t0 = time.perf_counter()
    done: list[subprocess.CompletedProcess[str]] = []
    env = {**os.environ, "VFLCRYPTO_WORKERS": "1"}
    for cmd in case.setup(work):
        if cmd[0] == "__truncate__":
            p = Path(cmd[1])
            p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
            continue
        done.append(subprocess.run([sys.executable, "-m", "vflcrypto", *cmd], cwd=work, env=env, text=True,
                                   capture_output=True, timeout=900))
    seconds = time.perf_counter() - t0
    last = done[-1]
    if "Traceback" in last.stderr or any("Traceback" in r.stderr for r in done):
        return "a Python traceback: " + last.stderr.strip().splitlines()[-1][:200], seconds
    if last.returncode != case.rc:
        return f"exit {last.returncode}, expected {case.rc}: {last.stderr.strip()[-300:]}", seconds
    said = last.stderr if case.rc else last.stdout + last.stderr
    if case.rc and len([ln for ln in last.stderr.strip().splitlines() if "error" in ln.lower()]) != 1:
        return f"not one line of error: {last.stderr.strip()[-300:]}", seconds
    missing = [s for s in case.says if s.lower() not in said.lower()]
    if missing:
        return f"does not say {missing}: {said.strip()[-300:]}", seconds
    if case.check is not None:
        return case.check(work, done), seconds
    return None, seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="run the cases whose name contains this")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix="vflcrypto-review-") as tmp:
        root = Path(tmp)
        subprocess.run([sys.executable, "-m", "vflcrypto", "examples", str(root / "ex")], check=True,
                       capture_output=True)
        for case in cases(root / "ex"):
            if args.only and args.only.lower() not in case.name.lower():
                continue
            problem, seconds = run_case(case, root / "ex", root)
            results.append({"case": case.name, "ok": problem is None, "problem": problem,
                            "seconds": round(seconds, 1)})
            if not args.json:
                print(f"{'ok  ' if problem is None else 'FAIL'} {case.name} ({seconds:.1f} s)"
                      + ("" if problem is None else f": {problem}"), flush=True)
    if args.json:
        print(json.dumps(results, indent=1))
    failed = [r for r in results if not r["ok"]]
    if not args.json:
        print(f"{len(results) - len(failed)} of {len(results)} cases ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Generate the bundled PSI demo datasets vflcrypto/data/bank.csv and shop.csv.

Deterministic (fixed seed; synthetic people, nothing real). 1,900 people in total:
800 are customers of both the bank and the shop, 700 only of the bank, 400 only of the
shop, so bank.csv has 1,500 rows and shop.csv 1,200. The bank's label ``defaulted``
depends on features of BOTH parties (bank: income, credit_score; shop: basket_value,
visits), so a vertical model trained on the aligned rows beats one on bank features
alone. Row order in each file is shuffled independently (alignment must do the work).

Run: ``.venv/bin/python scripts/make_demo_data.py`` (rewrites both files).
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

SEED = 20240611
N_COMMON, N_BANK_ONLY, N_SHOP_ONLY = 800, 700, 400
OUT = Path(__file__).resolve().parents[1] / "vflcrypto" / "data"


def main() -> None:
    rng = np.random.default_rng(SEED)
    n = N_COMMON + N_BANK_ONLY + N_SHOP_ONLY
    numbers = rng.choice(np.arange(100_000, 1_000_000), size=n, replace=False)
    ids = np.array([f"CUST-{x}" for x in numbers])
    age = rng.integers(18, 80, size=n)
    income = np.round(np.exp(rng.normal(10.6, 0.45, size=n)) / 100) * 100
    visits = rng.poisson(6, size=n)
    purchases = visits + rng.poisson(3 * visits + 1)
    basket = np.round(np.exp(rng.normal(3.6, 0.5, size=n)) * (1 + 0.02 * visits), 2)
    z = lambda v: (v - v.mean()) / v.std()  # noqa: E731
    credit = np.clip(660 + 35 * z(np.log(income)) + 25 * z(age.astype(float)) + 30 * z(visits.astype(float))
                     - 25 * z(np.log(basket)) + rng.normal(0, 25, size=n), 300, 850).round()
    logit = (-1.4 - 1.3 * z(credit) - 0.6 * z(np.log(income))
             + 1.0 * z(np.log(basket)) - 0.8 * z(visits.astype(float)))
    defaulted = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)

    bank_idx = np.arange(0, N_COMMON + N_BANK_ONLY)
    shop_idx = np.concatenate([np.arange(N_COMMON), np.arange(N_COMMON + N_BANK_ONLY, n)])
    bank_idx, shop_idx = rng.permutation(bank_idx), rng.permutation(shop_idx)
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / "bank.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["id", "income", "age", "credit_score", "defaulted"])
        for i in bank_idx:
            w.writerow([ids[i], f"{income[i]:.0f}", age[i], f"{credit[i]:.0f}", defaulted[i]])
    with open(OUT / "shop.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["id", "purchases", "basket_value", "visits"])
        for i in shop_idx:
            w.writerow([ids[i], purchases[i], f"{basket[i]:.2f}", visits[i]])
    print(f"wrote {OUT / 'bank.csv'} ({len(bank_idx)} rows) and {OUT / 'shop.csv'} "
          f"({len(shop_idx)} rows), {N_COMMON} common; default rate {defaulted.mean():.3f}")


if __name__ == "__main__":
    main()

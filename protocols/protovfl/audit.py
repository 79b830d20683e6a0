"""The prototype-VFL audit (attacks on what each role received) and its demo step.

The seed's claims set beside the measurements: "no raw row ever leaves its owner" is
true of the messages (none carries x), but the server's linear probe reads the raw
columns back from the embeddings it needs; "labels never go down" is true of the
messages, but μ^g with the party's adapter labels the party's aligned rows by nearest
prototype, far above the base rate.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from vflcrypto.audit import literature
from vflcrypto.audit.attacks import not_measured, ring_mask_findings
from vflcrypto.audit.checks import EXACT, Check, mask_checks
from vflcrypto.audit.ledger import AuditOutcome, EmpiricalFinding, audit_runs
from vflcrypto.errors import AuditError
from vflcrypto.ml.prototypes import squared_distances
from vflcrypto.psi import mpsi
from vflcrypto.psi.primitives import canonical_id
from vflcrypto.runtime.channel import AuditTap
from vflcrypto.runtime.declarations import Protection
from vflcrypto.spec import DemoContext

from .._repvfl import SERVER, party_names, require_torch
from .._repvfl_audit import inversion_findings, needs_torch, probe_findings
from ..secagg.audit import share_reading_finding
from ..secagg.math import encode_ring
from ..secagg.messages import MaskedInput
from .align import run_align_local
from .data import digits_example, digits_tables
from .math import ProtoConfig, split_statistics
from .messages import Embedding, GlobalModel, PsiAlignedIds, PsiTable, PsiWrappedKey, PsiZeroCells, Stats
from .roles import run_local, secagg_config

__all__ = ["AUDIT_CONFIG", "CHECKS", "audit_run", "collusion_findings", "demo_step", "prototype_labelling",
           "zero_cells_finding"]

#: the audit's training (fewer epochs than the default: the leaks do not depend on them)
AUDIT_CONFIG = ProtoConfig(rounds=2, local_epochs=4, head_epochs=150)

COLLUDED_TABLE = "protovfl.psi_table: another party's IDs tested by the server colluding with a party"
COLLUDED_SUM = "protovfl.psi_table: the other parties' common IDs tested by the server colluding with a party"
ZERO_CELLS = "protovfl.psi_table: zero cells beyond A (cells no party filled)"

#: the checks this audit must run (:mod:`vflcrypto.audit.checks`), each proven by its own mutation
CHECKS = (
    *mask_checks("masked class statistics", "secagg.masked_input", correlation=Protection.AGGREGATE),
    Check("secagg.shares: self-mask seeds read from the relayed shares", ("secagg.shares",), Protection.CIPHERTEXT,
          "shares relayed unencrypted (the server reconstructs a self-mask seed)", EXACT),
    # each party sends one table per run, under a fresh table key: nothing to reuse across messages
    *mask_checks("masked hash tables", "protovfl.psi_table", fresh=False, correlation=None),
    Check(COLLUDED_TABLE, ("protovfl.psi_table",), Protection.MASKED,
          "tables without the zero-sharing (the server and one party test another party's IDs)", EXACT),
    Check(ZERO_CELLS, ("protovfl.psi_table", "protovfl.psi_aligned_ids"), Protection.MASKED,
          "empty cells left zero (the server counts zero cells beyond the intersection's)", EXACT),
    Check("protovfl.psi_wrapped_key: the table key read from the relayed wrapping",
          ("protovfl.psi_wrapped_keys", "protovfl.psi_wrapped_key"), Protection.CIPHERTEXT,
          "the table key relayed unwrapped (A's IDs land on zero cells far above their density)", 0.9),
)


def prototype_labelling(tap: AuditTap, party: str, y: np.ndarray) -> EmpiricalFinding:
    """A party labels its aligned rows: its own h through the adapter A_m it received, nearest μ^g."""
    models = tap.received(party, GlobalModel)
    sent = tap.received(SERVER, Embedding, sender=party)
    msg = models[-1]
    H = np.asarray(next(e.H for e in sent if e.round == msg.round), np.float64)
    F = H @ np.asarray(msg.adapter_w, np.float64).T + np.asarray(msg.adapter_b, np.float64)
    guess = squared_distances(F, msg.prototypes).argmin(1)
    acc = float((guess == y).mean())
    base = float(np.bincount(y).max() / len(y))
    return EmpiricalFinding(
        party, "protovfl.global_model: the aligned rows' labels by nearest prototype", acc, base,
        f"{party} maps the embeddings it sent through the adapter A_m it received and takes the nearest of the "
        f"prototypes μ^g: {acc:.0%} of the aligned rows' labels (majority-class base rate {base:.0%}); by design: "
        "no message carries a label, yet labels do go down in effect",
        attacks=("protovfl.global_model",), flagged=acc > base + 0.1, samples=len(y),
        detects="accuracy above the base rate by 10 points")


def completion_finding(tap: AuditTap, party: str, y: np.ndarray) -> EmpiricalFinding:
    """Passive model completion (Fu et al. 2022) by a party on the embeddings it sent itself, knowing one label
    per class: a softmax head on its own representations of the aligned rows (its own knowledge only; ``y``
    scores)."""
    kind = "protovfl.embedding"
    name = f"{kind}: passive model completion (1 known label per class)"
    sent = tap.received(SERVER, Embedding, sender=party)
    if not sent or len(sent[-1].H) != len(y):
        return not_measured(party, name, (kind,), None, f"{party} sent no embedding of every aligned row")
    return literature.model_completion(party, name, np.asarray(sent[-1].H), y, literature.known_labels(y, 1),
                                       attacks=(kind,))


def prior_finding(tap: AuditTap, party: str, y: np.ndarray, n_classes: int) -> EmpiricalFinding:
    """π^g against the true class proportions of the aligned rows (total variation distance)."""
    msg = tap.received(party, GlobalModel)[0]  # round 0: the aligned labels only
    truth = np.bincount(y, minlength=n_classes) / len(y)
    tv = float(0.5 * np.abs(np.asarray(msg.prior, np.float64) - truth).sum())
    return EmpiricalFinding(
        party, "protovfl.global_model: the class proportions of the aligned rows", tv, None,
        f"the first π^g {party} receives is the aligned rows' label histogram (total variation {tv:.4f} from the "
        "truth), later ones mix in the unaligned soft counts; by design",
        attacks=("protovfl.global_model",), flagged=tv < 0.01, samples=len(y), detects="exact (a histogram)")


def plain_stats_finding(tap: AuditTap, parties: Sequence[str], cfg: ProtoConfig, n_classes: int
                        ) -> EmpiricalFinding:
    """Plaintext mode: the server decodes each party's soft class counts (its unaligned class mix)."""
    sa = secagg_config(cfg)
    read = total = 0
    for p in parties:
        for msg, truth in zip(tap.received(SERVER, Stats, sender=p), tap.held(p, "class_mix"), strict=True):
            vec = np.asarray(msg.y).view(np.int64).astype(np.float64) / 2.0 ** sa.frac_bits
            counts, _ = split_statistics(vec, n_classes, cfg.width)
            read += int(np.allclose(counts, truth, atol=2.0 ** -(sa.frac_bits - 8)))
            total += 1
    return EmpiricalFinding(
        SERVER, "protovfl.stats: each party's unaligned class mix (plaintext mode)", float(read), 0.0,
        f"the server decodes every plaintext statistics vector: each party's soft class counts read exactly in "
        f"{read} of {total}; by design of --plain", attacks=("protovfl.stats",), flagged=read > 0, samples=total,
        detects="exact")


def wrapped_key_finding(tap: AuditTap, parties: Sequence[str]) -> EmpiricalFinding:
    """The server tries the wrapped table keys it relayed as the key k: do A's IDs land on the zero cells?"""
    name = "protovfl.psi_wrapped_key: the table key read from the relayed wrapping"
    received = tap.received(SERVER, PsiAlignedIds), tap.received(parties[0], PsiZeroCells) if parties else []
    tables = tap.received(SERVER, PsiTable)
    if any(len(r) != 1 for r in received) or not tables:
        return _unmeasured(name, "no aligned IDs, zero cells or tables in the session", Protection.CIPHERTEXT,
                           ("protovfl.psi_wrapped_keys", "protovfl.psi_wrapped_key"))
    (aligned,), (zeros,) = received
    shape = np.asarray(tables[0].values).shape
    params = mpsi.MPSIParams(len(parties), 0, shape[0], shape[1])
    zero = set(np.asarray(zeros.cells, np.int64).tolist())
    density = len(zero) / (params.tables * params.cells)
    best = 0.0
    for p in parties[1:]:
        for msg in tap.received(p, PsiWrappedKey):
            for start in range(0, max(len(msg.wrapped) - mpsi.KEY_BYTES, 0) + 1):
                guess = msg.wrapped[start : start + mpsi.KEY_BYTES]
                if len(guess) < mpsi.KEY_BYTES or not aligned.ids:
                    continue
                pos = mpsi.positions(aligned.ids, guess, params)
                flat = pos + (np.arange(params.tables) * params.cells)[:, None]
                best = max(best, float(np.isin(flat, list(zero)).mean()))
    return EmpiricalFinding(
        SERVER, name, best, density,
        f"the server takes every 32-byte window of each wrapped key it relayed as the table key k and places A's "
        f"IDs (which it learns) with it: {best:.1%} of (ID, table) pairs land on a zero cell, against the "
        f"zero-cell density {density:.1%} of a wrong key (with k it could test guesses about pairwise overlaps)",
        attacks=("protovfl.psi_wrapped_keys", "protovfl.psi_wrapped_key"), protection=Protection.CIPHERTEXT,
        flagged=best > density + 0.25, samples=len(aligned.ids) * params.tables,
        detects="a key that places A's IDs on zero cells 25 points above the density", min_effect=density + 0.25)


def _psi_view(tap: AuditTap, names: Sequence[str]) -> tuple[list[np.ndarray], mpsi.MPSIParams] | str:
    """The tables S received, one per party in party order, and their shape; or why there are none."""
    tables = [tap.received(SERVER, PsiTable, sender=n) for n in names]
    if not names or any(len(t) != 1 for t in tables):
        return f"the server received {[len(t) for t in tables]} tables from the parties, not one each"
    values = [np.asarray(t[0].values).astype(np.uint64) for t in tables]
    shape = values[0].shape
    if len(shape) != 3 or any(v.shape != shape for v in values):
        return "the parties' tables differ in shape"
    return values, mpsi.MPSIParams(len(names), 0, shape[0], shape[1])


def _unmeasured(name: str, why: str, protection: Protection | None, attacks: tuple[str, ...] = ("protovfl.psi_table",)
                ) -> EmpiricalFinding:
    """The server's check ``name`` that could not run (:func:`~vflcrypto.audit.attacks.not_measured`)."""
    return not_measured(SERVER, name, attacks, protection, why)


def collusion_findings(tap: AuditTap, names: Sequence[str], party_ids: Sequence[Sequence[str]]
                       ) -> list[EmpiricalFinding]:
    """S colluding with one party c, against the tables of the others (every c in turn; :mod:`vflcrypto.psi.mpsi`).

    The coalition holds what S received and c's own secrets (``tap.held``: the table key k
    and c's pairwise seeds s_{cm}); its dictionary is the audit's ID universe minus c's own
    IDs (a hit beyond A). For a guess x it computes pos_j(x), H_r(x) and every party's ρ
    from k, and for the masks it can know (c's pairwise term ±PRG(s_{cm}) of z_m, or none):

    * one other party m (protection MASKED, the zero-sharing): is v_m minus that mask equal
      to ρ_m H_r(x) at pos_j(x) in both repetitions of some table j? With three or more
      parties the rest of z_m is uniform to the coalition: a hit has probability 2^-62 per
      test. Without the zero-sharing every x on m that won its cell is a hit.
    * every other party together (by design): does Σ_{m≠c} v_m + z_c + ρ_c H_r(x) vanish?
      It does where all the others placed x: the coalition learns the intersection of the
      other parties' sets for any guess, which the masks cannot hide (declared).
    """
    view = _psi_view(tap, names)
    if isinstance(view, str) or len(names) < 3:
        why = view if isinstance(view, str) else (
            "two parties: the colluding party holds the other's whole zero share (no protection claimed)")
        return [_unmeasured(COLLUDED_TABLE, why, Protection.MASKED), _unmeasured(COLLUDED_SUM, why, None)]
    values, params = view
    p = np.uint64(mpsi.FIELD)
    universe = sorted({canonical_id(i) for ids in party_ids for i in ids})
    single = tested = joint = joint_tested = on_m = on_all = 0
    try:
        secrets_of = [(tap.held_one(n, "table_key"), tap.held_one(n, "pair_seeds")) for n in names]
    except AuditError as exc:
        why = f"a party recorded no table key or seeds ({exc})"
        return [_unmeasured(COLLUDED_TABLE, why, Protection.MASKED), _unmeasured(COLLUDED_SUM, why, None)]
    sets = [{canonical_id(i) for i in ids} for ids in party_ids]
    tables = np.arange(params.tables)[:, None]
    for c, (key, seeds) in enumerate(secrets_of):
        cand = [x for x in universe if x not in sets[c]]
        if not cand:
            continue
        pos = mpsi.positions(cand, key, params)  # tables × candidates
        h = mpsi.encodings(cand, key)[None]  # 1 × candidates × REPS

        def at(t: np.ndarray, pos: np.ndarray = pos) -> np.ndarray:
            return t[tables, pos]  # tables × candidates × REPS

        def found(residual: np.ndarray, target: np.ndarray | int) -> np.ndarray:
            """Candidates whose cells equal ``target`` in both repetitions of some table."""
            return np.any(np.all(residual == target, axis=2), axis=0)

        others = [m for m in range(len(names)) if m != c]
        for m in others:
            target = (at(mpsi.coefficients(key, m, params)) * h) % p
            mask = at(mpsi.pair_term(m, c, seeds[m], params))
            v = at(values[m])
            hit = found((v + p - mask) % p, target) | found(v, target)
            single += int(hit.sum())
            tested += len(cand)
            on_m += sum(x in sets[m] for x in cand)
        z_c = sum((mpsi.pair_term(c, m, seeds[m], params) for m in others), np.zeros(params.shape, np.uint64)) % p
        rest = sum((values[m] for m in others), np.zeros(params.shape, np.uint64)) % p
        minus = (at(mpsi.coefficients(key, c, params)) * h) % p  # ρ_c H_r(x)
        r = at(rest)
        hit = found((r + at(z_c) + minus) % p, 0) | found((r + minus) % p, 0)
        joint += int(hit.sum())
        joint_tested += len(cand)
        on_all += sum(all(x in sets[m] for m in others) for x in cand)
    return [
        EmpiricalFinding(
            SERVER, COLLUDED_TABLE, float(single), 0.0,
            f"the server with one party's table key and pairwise seeds (each party in turn) strips that party's "
            f"pairwise term from another party's table and compares the cells of {tested} guessed IDs outside the "
            f"colluder's own set with ρ_m·H(x): {single} identified ({on_m} of the guesses are on that party); "
            "the other honest party's pairwise mask keeps every single table uniform to the coalition",
            attacks=("protovfl.psi_table",), protection=Protection.MASKED, flagged=single > 0, samples=tested,
            detects="any one guessed ID (a chance hit has probability 2^-62 per table)", min_effect=0.0),
        EmpiricalFinding(
            SERVER, COLLUDED_SUM, float(joint), float(on_all),
            f"the same coalition adds the other parties' tables and its own zero share: the sum is −ρ_c·H(x) where "
            f"all of them placed x, so {joint} of {joint_tested} guessed IDs outside the colluder's set are found on "
            f"every other party ({on_all} are); by design: the protocol assumes S colludes with no party (mpsi "
            "docstring)",
            attacks=("protovfl.psi_table",), protection=None, flagged=joint > 0, samples=joint_tested,
            detects="any one guessed ID", min_effect=0.0),
    ]


def zero_cells_finding(tap: AuditTap, names: Sequence[str]) -> EmpiricalFinding:
    """S sums the tables itself: more zero cells than |A| times the tables means cells no party filled.

    Every row of A is zero in at most one cell per table, so an honest sum has at most
    |A|·tables zero cells (a false zero: 2^-62 per cell). Without the filler u a cell every
    party left empty sums to Σ z = 0: S counts them and estimates |∪ I(m)| (each of U
    distinct IDs misses a cell with probability 1 − 1/C), beyond the set sizes and |A| it
    is told; a party reads, at its own empty cells, that no other party placed an ID there.
    """
    view = _psi_view(tap, names)
    aligned = tap.received(SERVER, PsiAlignedIds)
    attacks = ("protovfl.psi_table", "protovfl.psi_aligned_ids")
    if isinstance(view, str) or len(aligned) != 1:
        return _unmeasured(ZERO_CELLS, view if isinstance(view, str) else "no aligned IDs reached the server",
                           Protection.MASKED, attacks)
    values, params = view
    zero = len(mpsi.combine(values, params))
    bound = len(aligned[0].ids) * params.tables
    excess = max(0, zero - bound)
    estimate = ""
    if excess:
        empty = min(excess / (params.tables * params.cells), 1 - 1e-12)
        estimate = f"; from them S estimates |∪ I(m)| ≈ {math.log(empty) / math.log1p(-1 / params.cells):,.0f}"
    return EmpiricalFinding(
        SERVER, ZERO_CELLS, float(excess), 0.0,
        f"the server's sum of the tables has {zero:,} zero cells against at most |A|·tables = {bound:,} for the rows "
        f"of A: {excess:,} more, cells that every party left empty{estimate}",
        attacks=attacks, protection=Protection.MASKED, flagged=excess > 0, samples=params.tables * params.cells,
        detects="any one zero cell beyond A's (a false zero has probability 2^-62 per cell)", min_effect=0.0)


def pairwise_finding(tap: AuditTap, party_ids: Sequence[Sequence[str]], names: Sequence[str]) -> EmpiricalFinding:
    """What a party reads from the zero cells: A exactly, none of the rows it shares with only some parties."""
    A = set.intersection(*[set(ids) for ids in party_ids])
    seen = 0
    partial = 0
    for m, name in enumerate(names):
        mine = set(party_ids[m])
        others = [set(x) for j, x in enumerate(party_ids) if j != m]
        pair_only = {x for x in mine if any(x in o for o in others)} - A
        (found,) = tap.held(name, "aligned_ids")
        seen += len(set(found) & pair_only)
        partial += len(pair_only)
    return EmpiricalFinding(
        names[0], "protovfl.psi_zero_cells: rows on some but not all parties", float(seen), 0.0,
        f"each party's own IDs in zero cells are exactly A ({len(A)} rows); of the {partial} rows a party shares "
        f"with only some others, {seen} were marked: a row on two parties sums to a uniform value, as a row on one",
        attacks=("protovfl.psi_zero_cells",), flagged=seen > 0, samples=partial, detects="exact (a set)")


def audit_run(key_bits: int = 2048, *, allow_insecure: bool = False) -> AuditOutcome:
    """Prototype VFL on the digits (3 parties, 20 aligned rows), plaintext and secure, with its alignment.

    * each party: the aligned rows' labels by nearest prototype from what the server sent
      (against the base rate), and the class proportions π^g;
    * the server: a linear probe from the embeddings to each party's raw columns, each
      party's class mix from the plaintext statistics, the masked inputs of the secure
      mode (uniform, fresh per round, uncorrelated with the party's statistics), the
      relayed share ciphertexts, and in the alignment the masked tables (uniform over
      F_p; their sum has no zero cell beyond A's) and the wrapped table keys (read as the key);
    * the server colluding with each party in turn (outside the model, the masks' limits):
      another party's table alone (the zero-sharing keeps it uniform), and the sum of the
      other tables (it reveals the other parties' intersection for any guess: by design);
    * the gate weights (party usefulness) and the unaligned row counts are the server's by design;
    * the scorecard: the server inverts each party's per-row embeddings to its raw columns (He et al.
      2019, a decoder knowing half the rows), each party completes a label model on its own
      embeddings from one known label per class (Fu et al. 2022).

    ``key_bits`` is unused (X25519, AES-256 and masks over F_p and Z_2^64).
    """
    require_torch()
    server, parties = digits_example(20, seed=0)
    names, y, K = party_names(len(parties)), server.y_overlap, server.n_classes
    cfg = AUDIT_CONFIG
    stap, ptap, atap = AuditTap(), AuditTap(), AuditTap()
    secure = run_local(server, parties, config=cfg, tap=stap)
    plain = run_local(server, parties, config=ProtoConfig(**{**vars(cfg), "secure": False}), tap=ptap)
    labels, tables, _ = digits_tables(20, seed=0)
    party_ids = [list(t.ids) for t in tables]
    align = run_align_local(list(labels.ids), party_ids, tap=atap)

    findings: list[EmpiricalFinding] = [prototype_labelling(stap, p, y) for p in names]
    findings += [prior_finding(stap, p, y, K) for p in names[:1]]
    findings += probe_findings(stap, names, [("protovfl.embedding", "features")])
    findings += inversion_findings(stap, names, [("protovfl.embedding", "features")])
    findings += [completion_finding(stap, p, y) for p in names]
    gates = np.asarray(secure.server.gate_means)
    findings.append(EmpiricalFinding(
        SERVER, "the gate's mean weight per party (party usefulness)", float(gates.max() - gates.min()), 0.0,
        "the server's learned gate ranks the parties by usefulness: mean weights "
        + ", ".join(f"{n} {w:.3f}" for n, w in zip(names, gates, strict=True)) + "; by design (its own model)",
        attacks=("protovfl.embedding",), flagged=True, samples=len(y), detects="exact (the server's own model)"))
    findings.append(plain_stats_finding(ptap, names, cfg, K))
    sa = secagg_config(cfg)
    streams = [[m.y.tolist() for m in stap.received(SERVER, MaskedInput, sender=n)] for n in names]
    truth = [[encode_ring(v, sa.frac_bits, sa.value_bits).view(np.int64).astype(np.float64)
              for v in stap.held(n, "statistics")] for n in names]
    findings += ring_mask_findings(SERVER, "secagg.masked_input", "masked class statistics", streams, 1 << 64,
                                   truth=truth, truth_protection=Protection.AGGREGATE)
    findings.append(share_reading_finding(stap, names))
    tables_seen = [[np.asarray(m.values).ravel()[:20_000].tolist() for m in atap.received(SERVER, PsiTable, sender=n)]
                   for n in names]
    findings += ring_mask_findings(SERVER, "protovfl.psi_table", "masked hash tables", tables_seen, mpsi.FIELD,
                                   fresh=False)
    findings.append(wrapped_key_finding(atap, names))
    findings += collusion_findings(atap, names, party_ids)
    findings.append(zero_cells_finding(atap, names))
    findings.append(pairwise_finding(atap, party_ids, names))

    runs = {"all-party-only alignment": align.transcript,
            "training, secure statistics": secure.transcript,
            "training, plaintext statistics": plain.transcript}
    report, sections = audit_runs(runs)
    same = bool(np.array_equal(secure.server.test_proba, plain.server.test_proba)
                and np.array_equal(secure.server.prototypes, plain.server.prototypes))
    metrics = {"prototype_labelling_accuracy": max(f.value for f in findings[: len(names)]),
               "test_accuracy": float(secure.test_accuracy or 0.0), "secure_equals_plain": float(same)}
    curves = {f"{p}: local prototype loss per round": list(r.losses) for p, r in zip(names, secure.parties,
                                                                                     strict=True)}
    return AuditOutcome("protovfl", report, tuple(findings), metrics, sections=sections,
                        transcripts=tuple(runs.items()), curves=curves)


@needs_torch
def demo_step(ctx: DemoContext) -> dict[str, Any]:
    """Prototype VFL on the bundled digits: three parties, 20 aligned rows, unaligned pools 130 / 1300 / 2."""
    server, parties = digits_example(20, seed=0)
    out: dict[str, Any] = {}
    for label, cfg in (("aligned rows only", ProtoConfig(rounds=0)), ("prototype rounds, secure", ProtoConfig())):
        t0 = time.perf_counter()
        run = run_local(server, parties, config=cfg)
        secs = time.perf_counter() - t0
        ctx.say(f"{label:>24}: test accuracy {run.test_accuracy:.1%}, {run.transcript.total_bytes:,} B, {secs:.1f} s")
        out[label] = {"test_accuracy": run.test_accuracy, "bytes": run.transcript.total_bytes,
                      "seconds": round(secs, 3)}
    ctx.say("(the same inputs and model as `vflcrypto train protovfl --dataset digits --aligned 20`; on 20 "
            "aligned rows the rounds do not reliably help: -8.3 to +7.8 points over 12 split and training "
            "seeds, +0.2 on average, see the protovfl docstring)")
    return out

"""Prototype VFL (seed 002): the all-party-only alignment, the round, secure = plaintext, hostile inputs."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from vflcrypto.protocols import protovfl  # noqa: E402
from vflcrypto.protocols.protovfl import align, roles  # noqa: E402
from vflcrypto.protocols.protovfl import math as pm  # noqa: E402

from vflcrypto.audit.ledger import audit  # noqa: E402
from vflcrypto.errors import InputDataError, PeerTimeoutError, ProtocolError  # noqa: E402
from vflcrypto.ml.prototypes import smooth_two_way_loss, squared_distances  # noqa: E402
from vflcrypto.runtime.channel import AuditTap  # noqa: E402
from vflcrypto.runtime.declarations import declarations  # noqa: E402

FAST = {"rounds": 2, "local_epochs": 2, "head_epochs": 20}


@pytest.fixture(scope="module")
def small() -> tuple[Any, list[Any]]:
    return protovfl.digits_example(12, pools=(60, 200, 2), seed=1)


def _plain(**kw: Any) -> pm.ProtoConfig:
    return pm.ProtoConfig(**{**FAST, **kw, "secure": False})


# --------------------------------------------------------------------------- the round


def test_secure_and_plaintext_statistics_give_bit_identical_models(small: Any) -> None:
    server, parties = small
    secure = protovfl.run_local(server, parties, config=pm.ProtoConfig(**FAST))
    plain = protovfl.run_local(server, parties, config=_plain())
    assert np.array_equal(secure.server.prototypes, plain.server.prototypes)
    assert np.array_equal(secure.server.prior, plain.server.prior)
    assert all(np.array_equal(a, b) for a, b in zip(secure.server.head, plain.server.head, strict=True))
    assert np.array_equal(secure.server.test_proba, plain.server.test_proba)
    for a, b in zip(secure.parties, plain.parties, strict=True):
        assert all(np.array_equal(x, y) for x, y in zip(a.extractor, b.extractor, strict=True))
    kinds = {e.kind for e in secure.transcript.sent()}
    assert "secagg.masked_input" in kinds and "protovfl.stats" not in kinds
    assert "protovfl.stats" in {e.kind for e in plain.transcript.sent()}


def test_each_round_sends_embeddings_up_and_prototypes_down(small: Any) -> None:
    server, parties = small
    run = protovfl.run_local(server, parties, config=pm.ProtoConfig(**FAST))
    for p in ("party-0", "party-1", "party-2"):
        up = Counter(e.kind for e in run.transcript.sent() if e.sender == p)
        down = Counter(e.kind for e in run.transcript.sent() if e.receiver == p)
        assert up["protovfl.embedding"] == FAST["rounds"] + 1 and up["protovfl.test_embedding"] == 1
        assert up["secagg.masked_input"] == FAST["rounds"]
        assert down["protovfl.setup"] == 1 and down["protovfl.global_model"] == FAST["rounds"]
    report = audit(run.transcript)
    seen = {r.kind for r in report.rows}
    assert {d.kind for d in declarations("protovfl") if not d.kind.startswith("protovfl.psi")} - seen == \
        {"protovfl.stats"}  # the plaintext mode's only


def test_the_server_learns_only_the_sum_of_the_statistics(small: Any) -> None:
    """What S received from each party: never its statistics in the clear, only a masked
    vector that is off from them everywhere by far more than the fixed point; what S unmasked
    equals the sum of what the parties computed (to the fixed point)."""
    server, parties = small
    tap = AuditTap()
    cfg = pm.ProtoConfig(**FAST)
    protovfl.run_local(server, parties, config=cfg, tap=tap)
    names = ["party-0", "party-1", "party-2"]
    assert not tap.received("server", "protovfl.stats")
    for p in names:
        masked = tap.received("server", "secagg.masked_input", sender=p)
        assert [m.round for m in masked] == list(range(1, FAST["rounds"] + 1))
        for m, own in zip(masked, tap.held(p, "statistics"), strict=True):
            # read as the fixed point the parties encode (64-bit ring, two's complement): a uniform mask
            # leaves |read - own| <= 1 with probability 2^-38 per value; an unmasked vector everywhere
            read = m.y.view(np.int64) / 2.0 ** cfg.frac_bits
            assert m.y.shape == own.shape and (np.abs(read - own) > 1.0).all()
    sums = tap.held("server", "statistics_sum")
    assert len(sums) == FAST["rounds"]
    for r, total in enumerate(sums):
        want = np.sum([tap.held(p, "statistics")[r] for p in names], axis=0)
        np.testing.assert_allclose(total, want, atol=3 * 2.0 ** -24)
    counts = [tap.held(p, "class_mix")[0].sum() for p in names]
    assert counts == pytest.approx([len(p.X_unaligned) for p in parties])


def test_zero_rounds_is_the_aligned_rows_only_baseline_above_chance(small: Any) -> None:
    """No round: one embedding per party, no global model, and a head fitted on the aligned rows
    alone whose reported accuracy is that of its test predictions, above chance (10 digits)."""
    server, parties = small
    run = protovfl.run_local(server, parties, config=pm.ProtoConfig(**{**FAST, "rounds": 0}))
    kinds = Counter(e.kind for e in run.transcript.sent())
    assert kinds["protovfl.global_model"] == 0 and kinds["protovfl.embedding"] == 3
    assert kinds["secagg.masked_input"] == 0
    assert run.test_accuracy == pytest.approx(np.mean(run.server.test_proba.argmax(1) == server.y_test))
    assert run.test_accuracy is not None and run.test_accuracy > 0.2  # chance 0.1; measured 0.39


def test_gate_weights_are_distributions_and_fusion_is_their_mixture() -> None:
    rng = np.random.default_rng(0)
    H = [rng.normal(size=(30, 4)).astype(np.float32) for _ in range(3)]
    y = rng.integers(0, 3, 30)
    cfg = pm.ProtoConfig(dim=4, width=5, head_epochs=30)
    state = pm.fit_fusion(H, y, 3, cfg)
    proba, z, w = pm.fuse_rows(H, state, 3, cfg)
    assert (w >= 0).all() and np.allclose(w.sum(1), 1)
    g = np.stack([h @ W.T + b for h, (W, b) in zip(H, state.adapters, strict=True)])
    np.testing.assert_allclose(z, np.einsum("nm,mnd->nd", w, g), atol=1e-5)
    np.testing.assert_allclose(proba.sum(1), 1, atol=1e-6)


def test_global_prototypes_fold_in_the_weighted_unaligned_statistics() -> None:
    z = np.asarray([[0.0, 0.0], [2.0, 0.0], [0.0, 4.0]])
    y = np.asarray([0, 0, 1])
    mu, prior = pm.global_prototypes(z, y, 3)
    np.testing.assert_allclose(mu[:2], [[1.0, 0.0], [0.0, 4.0]])
    np.testing.assert_allclose(mu[2], z.mean(0))  # no mass: the overall mean
    assert prior == pytest.approx(np.asarray([2, 1, 1e-6]) / (3 + 1e-6))
    counts, sums = np.asarray([1.0, 0.0, 2.0]), np.asarray([[3.0, 0.0], [0.0, 0.0], [2.0, 2.0]])
    mu, prior = pm.global_prototypes(z, y, 3, counts, sums, weight=0.5)
    np.testing.assert_allclose(mu, [[(2.0 + 1.5) / 2.5, 0.0], [0.0, 4.0], [1.0, 1.0]])
    np.testing.assert_allclose(prior, np.asarray([2.5, 1.0, 1.0]) / 4.5)


def test_the_local_loss_is_the_smooth_two_way_loss_under_a_uniform_prior() -> None:
    rng = np.random.default_rng(3)
    F, mu = rng.normal(size=(7, 3)), rng.normal(size=(4, 3))
    D = squared_distances(F, mu)
    got = float(pm.prototype_loss(torch.as_tensor(D), np.full(4, 0.25), 0.7))
    assert got == pytest.approx(smooth_two_way_loss(D, 0.7), rel=1e-9)


def test_the_local_step_moves_the_extractor_toward_the_prototypes(small: Any) -> None:
    from vflcrypto.ml import nn as vnn

    _, parties = small
    X = parties[1].X_unaligned
    cfg = pm.ProtoConfig(dim=8, width=8, local_epochs=15, tol=0.0)
    ext = vnn.mlp_extractor(X, 8, seed=0)
    rng = np.random.default_rng(0)
    adapter = (rng.normal(size=(8, 8)).astype(np.float32), np.zeros(8, np.float32))
    mu = rng.normal(size=(10, 8))
    first = pm.local_step(ext, adapter, X, mu, np.full(10, 0.1), None, None,
                          pm.ProtoConfig(**{**vars(cfg), "local_epochs": 1}), seed=0)
    later = pm.local_step(ext, adapter, X, mu, np.full(10, 0.1), first.prototypes, first.prior, cfg, seed=1)
    assert later.loss < first.loss
    assert later.counts.sum() == pytest.approx(len(X)) and later.prior.sum() == pytest.approx(1.0)
    assert later.sums.shape == (10, 8) and later.epochs == 15


# --------------------------------------------------------------------------- hostile inputs


def _party_after_setup(small: Any, secure: bool = False) -> roles.PartyRole:
    _, parties = small
    cfg = pm.ProtoConfig(**{**FAST, "secure": secure})
    role = roles.PartyRole(parties[0], index=0, config=cfg)
    role.on_setup(protovfl.Setup(len(parties[0].X_overlap), len(parties[0].X_test), 10, cfg.dim, cfg.width,
                                 cfg.rounds, cfg.secure, cfg.alpha, cfg.beta, cfg.tau, cfg.seed))
    return role


def _model(prior: np.ndarray, nan: bool = False) -> protovfl.GlobalModel:
    cfg = pm.ProtoConfig()
    mu = np.zeros((10, cfg.width), np.float32)
    if nan:
        mu[0, 0] = np.nan
    return protovfl.GlobalModel(0, mu, np.asarray(prior, np.float32), np.zeros((cfg.width, cfg.dim), np.float32),
                                np.zeros(cfg.width, np.float32))


@pytest.mark.parametrize(("prior", "match"), [
    (np.full(10, 0.2), "sum to 2"), (np.r_[-0.1, np.full(9, 1.1 / 9)], "negative"),
    (np.full(9, 1 / 9), "malformed"), (None, "NaN")])
def test_a_broken_global_model_is_refused(small: Any, prior: Any, match: str) -> None:
    role = _party_after_setup(small)
    msg = _model(np.full(10, 0.1), nan=True) if prior is None else _model(prior)
    with pytest.raises(ProtocolError, match=match):
        role.on_global_model(msg)


def test_a_setup_that_differs_from_the_partys_plan_is_refused(small: Any) -> None:
    _, parties = small
    role = roles.PartyRole(parties[0], index=0, config=_plain())
    with pytest.raises(ProtocolError, match="rounds: server 9, here 2"):
        role.on_setup(protovfl.Setup(len(parties[0].X_overlap), len(parties[0].X_test), 10, 32, 32, 9, False,
                                     0.5, 0.5, 1.0, 0))


@pytest.mark.parametrize("fault", ["nan", "shape", "round"])
def test_broken_embeddings_are_refused_by_the_server(small: Any, fault: str) -> None:
    server, parties = small
    role = roles.ServerRole(server, parties=["party-0", "party-1", "party-2"], config=_plain(),
                            n_test=len(parties[0].X_test))
    role.start()
    H = np.zeros((len(server.y_overlap), 32), np.float32)
    if fault == "nan":
        H[1, 1] = np.nan
    elif fault == "shape":
        H = H[:, :-1].copy()
    with pytest.raises(ProtocolError, match={"nan": "NaN", "shape": "shape", "round": "round 3"}[fault]):
        role.on_embedding(protovfl.Embedding(3 if fault == "round" else 0, H))


def test_plaintext_statistics_of_the_wrong_length_are_refused(small: Any) -> None:
    server, parties = small
    role = roles.ServerRole(server, parties=["party-0", "party-1"], config=_plain(), n_test=len(parties[0].X_test))
    role.state.round = 1
    with pytest.raises(ProtocolError, match="malformed or stale statistics"):
        role.on_stats(protovfl.Stats(1, np.zeros(role.length - 1, np.uint64)))


def test_a_masked_vector_of_the_wrong_length_is_refused(small: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from vflcrypto.protocols.secagg.messages import MaskedInput

    honest = roles.PartyRole.on_forward

    def short(self: roles.PartyRole, msg: Any) -> Any:
        nxt = honest(self, msg)
        if self.name != "party-1":
            return nxt
        sends = tuple((p, MaskedInput(m.round, m.y[:-1].copy()) if isinstance(m, MaskedInput) else m)
                      for p, m in nxt.sends)
        return type(nxt)(sends, nxt.wait, nxt.result)

    monkeypatch.setattr(roles.PartyRole, "on_forward", short)
    server, parties = small
    with pytest.raises(ProtocolError, match="party-1 sent a masked input"):
        protovfl.run_local(server, parties, config=pm.ProtoConfig(**FAST), timeout=20)


def test_a_party_that_stalls_mid_round_stops_the_run(small: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Party-2 goes silent before its masked statistics: the aggregation drops it and the run stops."""
    release = threading.Event()
    honest = roles.PartyRole.on_forward

    def stall(self: roles.PartyRole, msg: Any) -> Any:
        if self.name == "party-2":
            release.wait(8)
        return honest(self, msg)

    monkeypatch.setattr(roles.PartyRole, "on_forward", stall)
    server, parties = small
    try:
        with pytest.raises((ProtocolError, PeerTimeoutError), match="party-2"):
            protovfl.run_local(server, parties, config=pm.ProtoConfig(**FAST), timeout=1.0)
    finally:
        release.set()


def test_a_party_that_never_answers_times_out(small: Any) -> None:
    server, parties = small
    release = threading.Event()

    def stall(channels: Any) -> None:
        channels["server"].recv(protovfl.Setup, timeout=10)
        release.wait(5)

    try:
        with pytest.raises(PeerTimeoutError):
            protovfl.run_local(server, parties, config=_plain(), timeout=0.5, overrides={"party-1": stall})
    finally:
        release.set()


def test_bad_configurations_are_refused() -> None:
    for kw in ({"alpha": 1.5}, {"beta": -0.1}, {"tau": 0.0}, {"rounds": -1}, {"frac_bits": 50, "value_bits": 44}):
        with pytest.raises(InputDataError):
            pm.ProtoConfig(**kw)


def test_statistics_that_overflow_the_fixed_point_are_a_clear_error(small: Any) -> None:
    from vflcrypto.errors import EncodingOverflowError

    server, parties = small
    with pytest.raises(EncodingOverflowError, match="bound"):
        protovfl.run_local(server, parties, config=_plain(value_bits=25))


# --------------------------------------------------------------------------- the all-party-only alignment


def _ids(n: int, prefix: str = "u") -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


@pytest.mark.parametrize("case", ["random", "identical", "disjoint", "one", "pairwise_only", "empty_party"])
def test_alignment_equals_the_plain_intersection(case: str) -> None:
    rng = np.random.default_rng(7)
    universe = _ids(300)
    if case == "random":
        sets = [list(rng.choice(universe, k, replace=False)) for k in (150, 220, 90)]
    elif case == "identical":
        sets = [universe[:50]] * 3
    elif case == "disjoint":
        sets = [universe[:40], universe[40:80], universe[80:120]]
    elif case == "one":
        sets = [["x"], ["x"], ["x"]]
    elif case == "pairwise_only":  # the seed's row on C1 and C2 but not C3
        sets = [["a", "b", "c"], ["a", "b", "d"], ["a", "e"]]
    else:
        sets = [universe[:10], [], universe[:5]]
    labelled = sorted(set().union(*map(set, sets)))
    run = align.run_align_local(labelled, sets)
    want = sorted(set.intersection(*map(set, sets)))
    assert run.server.ids == want and run.server.labelled.all()
    for ids, got in zip(sets, run.parties, strict=True):
        assert [ids[i] for i in got.aligned] == want
    if case == "pairwise_only":
        assert want == ["a"]  # "b" is on C1 and C2 only: unaligned on both


def test_only_labelled_rows_of_A_train_and_the_others_stay_aligned() -> None:
    sets = [_ids(30), _ids(25), _ids(40)]
    labelled = [*_ids(10), "zz"]
    run = align.run_align_local(labelled, sets)
    assert run.server.ids == sorted(_ids(25)) and run.server.labelled.sum() == 10
    for ids, got in zip(sets, run.parties, strict=True):
        assert sorted(ids[i] for i in got.rows) == sorted(_ids(10)) and len(got.aligned) == 25


def test_aligned_inputs_rebuild_the_digits_split_row_for_row() -> None:
    """The CLI's `--dataset digits` (files in shuffled order, then the PSI) gives the demo's inputs
    exactly, rows in the same order: the same settings give the same model in both (the CLI's
    0.469 against the demo's 0.503 came from the unaligned rows' file order alone)."""
    labels, tables, test_ids = protovfl.digits_tables(20)
    got = align.aligned_inputs(labels, tables, n_classes=10, test_ids=test_ids)
    server, parties = protovfl.digits_example(20)
    assert got.n_aligned == 380 and len(got.server.y_overlap) == 20
    np.testing.assert_array_equal(got.server.y_overlap, server.y_overlap)
    np.testing.assert_array_equal(got.server.y_test, server.y_test)
    for a, b in zip(got.parties, parties, strict=True):
        for rows in ("X_overlap", "X_test", "X_unaligned"):
            np.testing.assert_array_equal(getattr(a, rows), getattr(b, rows), err_msg=rows)


def test_unaligned_rows_do_not_depend_on_the_file_order() -> None:
    """A party's unaligned rows come in canonical ID order: reversing its file changes nothing."""
    labels, tables, test_ids = protovfl.digits_tables(20)
    t = tables[0]
    flipped = [t.take(np.arange(len(t))[::-1]), *tables[1:]]
    a = align.aligned_inputs(labels, tables, n_classes=10, test_ids=test_ids)
    b = align.aligned_inputs(labels, flipped, n_classes=10, test_ids=test_ids)
    np.testing.assert_array_equal(a.parties[0].X_unaligned, b.parties[0].X_unaligned)
    np.testing.assert_array_equal(a.parties[0].X_overlap, b.parties[0].X_overlap)


def test_duplicate_ids_are_refused() -> None:
    with pytest.raises(InputDataError, match="duplicate"):
        align.run_align_local(["a"], [["a", "a"], ["a"]])


def test_a_tampered_wrapped_key_is_refused() -> None:
    seed, aad = bytes(32), b"aad"
    wrapped = align.wrap_key(bytes(range(32)), seed, aad)
    assert align.unwrap_key(wrapped, seed, aad) == bytes(range(32))
    bad = wrapped[:20] + bytes([wrapped[20] ^ 1]) + wrapped[21:]
    with pytest.raises(ProtocolError, match="does not authenticate"):
        align.unwrap_key(bad, seed, aad)
    with pytest.raises(ProtocolError, match="does not authenticate"):
        align.unwrap_key(wrapped, seed, b"another party")
    with pytest.raises(ProtocolError, match="wrong length"):
        align.unwrap_key(wrapped[:-1], seed, aad)


def test_tables_of_the_wrong_shape_or_outside_the_field_are_refused() -> None:
    role = align.PsiServerRole(["a"], parties=["party-0", "party-1"])
    role.start()
    role.on_advert(protovfl.PsiAdvert(bytes(32), 3))
    role.on_advert(protovfl.PsiAdvert(bytes(32), 4))
    role.on_wrapped(protovfl.PsiWrappedKeys((b"x",)))
    shape = role._plan().shape
    with pytest.raises(ProtocolError, match="uint32"):
        role.on_table(protovfl.PsiTable(np.zeros(shape, np.uint64)))
    with pytest.raises(ProtocolError, match="expected"):
        role.on_table(protovfl.PsiTable(np.zeros((1, 2, 2), np.uint32)))
    role.on_table(protovfl.PsiTable(np.zeros(shape, np.uint32)))
    with pytest.raises(ProtocolError, match="outside the field"):
        role.on_table(protovfl.PsiTable(np.full(shape, 2**31, np.uint32)))


# --------------------------------------------------------------------------- the audit


def test_the_audit_measures_what_the_seed_claims_away() -> None:
    outcome = protovfl.SPEC.audit()
    assert not outcome.broken_protections()
    assert outcome.metrics["secure_equals_plain"] == 1.0
    labelling = [f for f in outcome.findings if f.name.endswith("by nearest prototype")]
    assert len(labelling) == 3 and all(f.baseline is not None and f.value > f.baseline for f in labelling)
    pair = outcome.finding("protovfl.psi_zero_cells: rows on some but not all parties")
    assert pair.value == 0 and (pair.samples or 0) > 0
    from vflcrypto.protocols.protovfl.audit import COLLUDED_SUM, COLLUDED_TABLE, ZERO_CELLS

    assert outcome.finding(COLLUDED_TABLE).value == 0 and outcome.finding(ZERO_CELLS).value == 0
    assert outcome.finding(COLLUDED_SUM).value == outcome.finding(COLLUDED_SUM).baseline > 0  # declared, measured
    kinds = {r.kind for r in outcome.report.rows}
    assert {d.kind for d in declarations("protovfl")} <= kinds


def _psi_tap(sets: list[list[str]]) -> AuditTap:
    tap = AuditTap()
    align.run_align_local(sorted({i for s in sets for i in s}), sets, tap=tap)
    return tap


PSI_SETS = [[f"a{i}" for i in range(30)] + [f"p{i}" for i in range(40)],
            [f"a{i}" for i in range(30)] + [f"p{i}" for i in range(20)] + [f"q{i}" for i in range(50)],
            [f"a{i}" for i in range(30)] + [f"r{i}" for i in range(10)]]


def test_the_server_colluding_with_a_party_reads_no_other_single_table() -> None:
    """Honest tables: no guess found in one other party's table; in the others' sum, the declared intersection of
    the others (p0..p19 are on party-0 and party-1, outside party-2's set)."""
    from vflcrypto.protocols.protovfl.audit import collusion_findings, zero_cells_finding

    names = ["party-0", "party-1", "party-2"]
    tap = _psi_tap(PSI_SETS)
    single, joint = collusion_findings(tap, names, PSI_SETS)
    assert single.measured and not single.flagged and single.value == 0 and single.min_effect == 0.0
    assert joint.by_design and joint.value == 20 and joint.baseline == 20  # party-2 colluding: p0..p19
    zero = zero_cells_finding(tap, names)
    assert zero.measured and not zero.flagged and zero.value == 0


def test_the_psi_checks_flag_the_mask_each_one_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the zero-sharing the collusion check flags (the zero cells do not); without the filler of the empty
    cells the zero-cell count flags (the collusion check does not)."""
    from vflcrypto.protocols.protovfl.audit import collusion_findings, zero_cells_finding

    from vflcrypto.psi import mpsi

    names = ["party-0", "party-1", "party-2"]
    monkeypatch.setattr(mpsi, "_zero_share", lambda me, seeds, params: np.zeros(params.tables * params.cells
                                                                                * mpsi.REPS, np.uint64))
    tap = _psi_tap(PSI_SETS)
    assert collusion_findings(tap, names, PSI_SETS)[0].flagged and not zero_cells_finding(tap, names).flagged
    monkeypatch.undo()
    monkeypatch.setattr(mpsi, "uniform_field", lambda n: np.zeros(n, np.uint64))
    tap = _psi_tap(PSI_SETS)
    assert not collusion_findings(tap, names, PSI_SETS)[0].flagged and zero_cells_finding(tap, names).flagged


def test_the_psi_checks_say_when_they_cannot_run() -> None:
    """No tables (an empty tap), or two parties (the colluder holds the other's whole zero share): not measured."""
    from vflcrypto.protocols.protovfl.audit import CHECKS, collusion_findings, wrapped_key_finding, zero_cells_finding

    names = ["party-0", "party-1", "party-2"]
    found = [*collusion_findings(AuditTap(), names, PSI_SETS), zero_cells_finding(AuditTap(), names),
             wrapped_key_finding(AuditTap(), names)]
    assert [f.measured for f in found] == [False] * 4
    assert {f.name for f in found if f.protection is not None} <= {c.name for c in CHECKS}
    two = collusion_findings(_psi_tap(PSI_SETS[:2]), names[:2], PSI_SETS[:2])
    assert not any(f.measured for f in two) and "two parties" in two[0].description


# --------------------------------------------------------------------------- the command line


CLI_FAST = ["--rounds", "1", "--local-epochs", "2", "--head-epochs", "20"]


def test_cli_trains_on_the_bundled_digits(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from vflcrypto.cli import main

    assert main(["train", "protovfl", "--dataset", "digits", *CLI_FAST, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mode"] == "secure" and out["seconds"] > 0
    assert out["test_accuracy"] > 0.3, out  # 10 digits: chance 0.1; measured 0.46 after one round
    assert out["rows"] == {"aligned": 380, "labelled": 380, "training": 20, "test": 360, "unaligned": [130, 1300, 2]}
    assert set(out["bytes_sent"]) == {"server", "party"} and out["alignment_bytes"] > 0


def test_cli_on_csv_files_secure_equals_plain(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from vflcrypto.cli import main

    assert main(["examples", str(tmp_path)]) == 0
    capsys.readouterr()
    d = tmp_path / "protovfl"
    args = ["train", "protovfl", "--server", str(d / "server.csv"),
            *[a for k in range(3) for a in ("--party", str(d / f"party{k}.csv"))],
            "--id-column", "id", "--label", "digit", "--test-fraction", "0.5", *CLI_FAST, "--json"]
    got = []
    for mode in ("--secure", "--plain"):
        assert main([*args, mode]) == 0
        got.append(json.loads(capsys.readouterr().out))
    assert got[0]["test_accuracy"] == got[1]["test_accuracy"]
    assert got[0]["rows"]["training"] == 190 and got[0]["rows"]["test"] == 190


def test_cli_without_enough_files_is_one_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    from vflcrypto.cli import main

    assert main(["train", "protovfl", "--party", "x.csv"]) != 0
    err = capsys.readouterr().err
    assert "two or more --party files" in err and "Traceback" not in err

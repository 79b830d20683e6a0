"""Roles as named steps: every message of a run is sent and handled by a named step of its role.

For every protocol of the registry a small in-process run is recorded; each transcript
entry must name its step, and that step must be ``start`` or a public method of the
sending (or receiving) role's class in ``SPEC.roles``, whose docstring says which numbered
step of the protocol's docstring it is. A role state must survive a wire round trip (what
the Flower ClientApp does between messages).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from vflcrypto.protocols import get, registry

from vflcrypto.he.paillier import generate_keypair
from vflcrypto.runtime.steps import Role, fields_of


def _align(keys: Any) -> Any:
    from vflcrypto.protocols import align

    return align.run_local([f"id{i}" for i in range(40)], [f"id{i}" for i in range(20, 70)]).transcript


def _exchange(keys: Any) -> Any:
    from vflcrypto.protocols import exchange

    rng = np.random.default_rng(0)
    return exchange.run_local(rng.normal(size=30), rng.normal(size=(30, 3)), keys=keys, allow_insecure=True).transcript


def _linreg(keys: Any) -> Any:
    from vflcrypto.protocols import linreg

    active, passives = linreg.synthetic_split(n_rows=40, p_active=2, p_passive=(2, 1))
    cfg = linreg.LinRegConfig(epochs=2, tol=None, key_bits=512)
    return linreg.run_local(active, passives, config=cfg, allow_insecure=True, keys=keys).transcript


def _logreg(keys: Any) -> Any:
    from vflcrypto.protocols import logreg

    rng = np.random.default_rng(1)
    X = [rng.normal(size=(30, 2)) for _ in range(3)]
    y = (rng.random(30) > 0.5).astype(float)
    return logreg.run_local(X, y, secure=True, steps=2, keys=keys, allow_insecure=True).transcript


def _secureboost(keys: Any) -> Any:
    from vflcrypto.protocols import secureboost as sb

    Xa, y, _, Xp, _ = sb.example(n=60)
    return sb.run_local(Xa, y, [Xp], params=sb.BoostParams(n_trees=2, max_depth=2, max_bin=8), keys=keys,
                        allow_insecure=True).transcript


def _pearson(keys: Any) -> Any:
    from vflcrypto.protocols import pearson

    Xa, _, Xp, _ = pearson.example(40)
    return pearson.run_local(Xa, [Xp], reveal="both", keys=keys, allow_insecure=True).transcript


def _poisson(keys: Any) -> Any:
    from vflcrypto.protocols import poisson

    Xa, y, _, Xp, _ = poisson.example(40)
    return poisson.run_local(Xa, y, Xp, params=poisson.PoissonParams(epochs=2), keys=keys,
                             allow_insecure=True).transcript


def _sshelr(keys: Any) -> Any:
    from vflcrypto.protocols import sshelr

    Xa, y, _, Xp, _ = sshelr.example(40)
    return sshelr.run_local(Xa, y, Xp, params=sshelr.SSHELRParams(epochs=2), allow_insecure=True,
                            keys=(keys, generate_keypair(512, allow_insecure=True))).transcript


def _woe(keys: Any) -> Any:
    from vflcrypto.protocols import woe

    y, Xa, _, Xp, _ = woe.example(80)
    return woe.run_local(y, Xa, [Xp], keys=keys, allow_insecure=True,
                         params=woe.WoeParams(return_results=True)).transcript


def _representation(name: str) -> Callable[[Any], Any]:
    def run(keys: Any) -> Any:
        pytest.importorskip("torch")
        from vflcrypto.protocols import fewshot, oneshot, split
        from vflcrypto.protocols._repvfl import digits_example

        server, parties = digits_example(40, seed=0)
        fast = {"ssl_epochs": 1, "head_epochs": 2}
        if name == "split":
            return split.run_local(server, parties, config=split.SplitConfig(epochs=1)).transcript
        if name == "oneshot":
            return oneshot.run_local(server, parties, config=oneshot.OneShotConfig(**fast)).transcript
        cfg = fewshot.FewShotConfig(mode="client", gate=0.3, **fast)
        return fewshot.run_local(server, parties, config=cfg).transcript

    return run


def _secagg(keys: Any) -> Any:
    from vflcrypto.protocols import secagg

    xs = [[np.arange(6.0) + r for r in range(2)] for _ in range(4)]
    return secagg.run_local(xs, vanish={"client-1": (1, "masked")}, timeout=5).transcript


def _hfl(keys: Any) -> Any:
    from vflcrypto.protocols import hfl

    clients = hfl.digits_clients(3, seed=0)
    return hfl.run_local(clients, 10, config=hfl.HFLConfig(rounds=2, algorithm="scaffold")).transcript


def _protovfl(keys: Any) -> Any:
    pytest.importorskip("torch")
    from vflcrypto.protocols import protovfl

    server, parties = protovfl.digits_example(10, pools=(40, 60, 2), seed=0)
    cfg = protovfl.ProtoConfig(rounds=1, local_epochs=1, head_epochs=5)
    transcript = protovfl.run_local(server, parties, config=cfg).transcript
    plain = protovfl.run_local(server, parties, config=protovfl.ProtoConfig(**{**vars(cfg), "secure": False}))
    transcript.merge(plain.transcript)
    return transcript


def _upsi(keys: Any) -> Any:
    from vflcrypto.protocols import upsi

    key = upsi.new_key()
    cache = upsi.build_cache(key, [f"id{i}".encode() for i in range(60)])
    first = upsi.run_local([], [f"id{i}" for i in range(50, 70)], key=key, cache=cache, chunk_size=8)
    cache2, _ = upsi.update_cache(cache, key, [b"id70"])  # the second run ships a delta
    second = upsi.run_local([], [f"id{i}" for i in range(50, 72)], key=key, cache=cache2, chunk_size=8,
                            transfer=first.results[upsi.SMALL].transfer)
    transcript = first.transcript
    transcript.merge(second.transcript)
    return transcript


RUNS: dict[str, Callable[[Any], Any]] = {"secagg": _secagg, "hfl": _hfl, "protovfl": _protovfl, "align": _align,
                                          "exchange": _exchange, "upsi": _upsi,
                                          "linreg": _linreg, "logreg": _logreg, "secureboost": _secureboost,
                                          "woe": _woe, "pearson": _pearson, "poisson": _poisson, "sshelr": _sshelr,
                                          **{n: _representation(n) for n in ("split", "oneshot", "fewshot")}}


def test_every_protocol_has_a_run_here() -> None:
    assert set(RUNS) == set(registry())


def _is_step(cls: type, name: str) -> bool:
    fn = getattr(cls, name, None)
    return name == "start" or (callable(fn) and not name.startswith("_"))


@pytest.mark.parametrize("name", sorted(RUNS))
def test_every_message_is_sent_and_handled_by_a_named_step(name: str, small_paillier_keys: Any) -> None:
    spec = get(name)
    transcript = RUNS[name](small_paillier_keys)
    entries = transcript.entries()
    assert entries
    seen: set[tuple[str, str]] = set()
    for e in entries:
        role = e.sender_role if e.event == "send" else e.receiver_role
        assert e.step_name, f"{e.kind} ({e.event}) has no step name"
        assert role in spec.roles, f"{name}: no role class for {role!r}"
        assert _is_step(spec.roles[role], e.step_name), f"{spec.roles[role].__name__} has no step {e.step_name}"
        seen.add((role, e.step_name))
    for role, step in seen - {(r, "start") for r in spec.roles}:
        if any(x.receiver_role == role and x.step_name == step and x.event == "recv" for x in entries):
            doc = inspect.getdoc(getattr(spec.roles[role], step)) or ""
            assert re.search(r"\b[Ss]teps? \d", doc), f"{role}.{step} does not say which numbered step it is"


def test_role_state_survives_a_wire_round_trip(small_paillier_keys: Any) -> None:
    from vflcrypto.protocols import secureboost as sb

    Xp = sb.example(n=60)[3]
    role = sb.PassiveRole(Xp, name="passive-0")
    role.state.rec_f, role.state.rec_b = [1, 2], [3, 4]
    role.state.prev_enc = [b"\x01" * 16]
    data = role.dump_state()
    fresh: Role[Any] = sb.PassiveRole(Xp, name="passive-0")
    fresh.load_state(data)
    got, want = fields_of(fresh.state), fields_of(role.state)
    assert got.keys() == want.keys()
    for k, v in want.items():
        assert (np.array_equal(got[k], v) if isinstance(v, np.ndarray) else got[k] == v), k

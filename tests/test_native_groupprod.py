"""The C group-product kernel gives the Python kernel's bytes, and GMP's own powers.

It multiplies ciphertexts into groups in Montgomery arithmetic and removes the Montgomery
factor at the end, so the references are exact: gmpy2's ``a * c % m`` loop (the Python
kernel), and ``powmod(c, k, m)`` for a group of k copies of one value (GMP's exponentiation,
code this package did not write). Moduli from one limb to 64 (Paillier's n² at 2048 bits),
of every bit length mod 64, in wider fields than needed; groups empty, of one row, and of
more than 16⁴ rows (every digit of the correction's table).
"""

from __future__ import annotations

import secrets
import shutil
import sysconfig
import threading
from pathlib import Path

import gmpy2
import numpy as np
import pytest
from conftest import use_native
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vflcrypto.he import native, ou
from vflcrypto.he.paillier import generate_keypair
from vflcrypto.he.paillier.kernels import _sum_by_group


def _odd(bits: int) -> int:
    return secrets.randbits(bits) | (1 << (bits - 1)) | 1  # example moduli: odd, of exactly `bits` bits


def _python(m: int, cts: list[int], keys: np.ndarray, n_groups: int) -> list[int]:
    acc: list[int | None] = [None] * n_groups
    for c, row in zip(cts, keys.tolist(), strict=True):
        for g in row:
            if g >= 0:
                a = acc[g]
                acc[g] = c if a is None else a * c % m
    return [1 if a is None else a for a in acc]


def _ints(raw: bytes, width: int) -> list[int]:
    return [int.from_bytes(raw[i : i + width], "big") for i in range(0, len(raw), width)]


@pytest.fixture(autouse=True)
def _on(monkeypatch: pytest.MonkeyPatch) -> None:
    use_native(monkeypatch, True)


def test_the_kernel_is_built_where_a_compiler_was_at_hand() -> None:
    """CI installs with gcc and Python's headers: the kernel must be in use there, not silently Python."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    headers = Path(sysconfig.get_paths()["include"], "Python.h").is_file()
    if shutil.which(cc) is None or not headers:
        pytest.skip(f"no C compiler ({cc}) or Python headers: the install could not build the kernel")
    assert native.available(), native.why_not()
    assert native.why_not() == ""


@pytest.mark.parametrize("bits", [3, 61, 64, 65, 127, 128, 191, 700, 1023, 2048, 3072, 4095, 4096])
def test_products_equal_the_python_kernel(bits: int) -> None:
    m = _odd(bits)
    width = (bits + 7) // 8 + secrets.randbelow(3)  # wider fields than needed are zero-padded
    rows, cols, n_groups = 257, 3, 41
    cts = [secrets.randbelow(m) for _ in range(rows)]  # example ciphertexts: any residues below m
    rng = np.random.default_rng(bits)
    keys = rng.integers(-1, n_groups - 2, (rows, cols)).astype(np.int64)
    keys[:, 2] = n_groups - 2  # one group of every row; group n_groups - 1 stays empty
    keys[0, 1] = n_groups - 3  # and (likely) groups of one row
    blob = b"".join(c.to_bytes(width, "big") for c in cts)
    raw = native.group_products(m, width, blob, keys, n_groups)
    assert raw is not None and len(raw) == n_groups * width
    got = _ints(raw, width)
    assert got == _python(m, cts, keys, n_groups)
    assert got[-1] == 1
    assert native.group_products_threaded(m, width, blob, keys, n_groups, 1) == raw


@pytest.mark.parametrize("bits", [64, 65, 1023, 2048, 4096])
def test_mpz_values_read_in_place_equal_their_bytes(bits: int) -> None:
    """gmpy2's mpz objects read in place (no serialization) give the bytes path's products; anything that
    is not an mpz below the modulus (an int, a negative, a value too large) is left to Python (``None``)."""
    assert native.reads_mpz()
    m, width = _odd(bits), (bits + 7) // 8
    cts = [gmpy2.mpz(secrets.randbelow(m)) for _ in range(1200)] + [gmpy2.mpz(0), gmpy2.mpz(1)]
    keys = np.random.default_rng(bits).integers(-1, 16, (len(cts), 2)).astype(np.int64)
    blob = b"".join(int(c).to_bytes(width, "big") for c in cts)
    want = native.group_products(m, width, blob, keys, 16)
    assert want is not None and _ints(want, width) == _python(m, [int(c) for c in cts], keys, 16)
    assert native.group_products(m, width, cts, keys, 16) == want
    assert native.group_products_threaded(m, width, cts, keys, 16, 2) == want
    one = np.zeros((1, 1), np.int64)
    for bad in ([5], [gmpy2.mpz(-5)], [gmpy2.mpz(m)], [gmpy2.mpz(m) << 64], [gmpy2.xmpz(5)]):
        assert native.group_products(m, width, bad, one, 1) is None, bad


@pytest.mark.parametrize("k", [2, 15, 16, 17, 255, 256, 4097, 70_001])
def test_a_group_of_k_copies_is_gmps_power(k: int) -> None:
    """Every digit of the Montgomery factor's removal (R^k from a table of hex digits) against gmpy2.powmod."""
    for bits in (64, 129):
        m = _odd(bits)
        c = secrets.randbelow(m)
        w = (bits + 7) // 8
        raw = native.group_products(m, w, c.to_bytes(w, "big") * k, np.zeros((k, 1), np.int64), 1)
        assert raw is not None and int.from_bytes(raw, "big") == int(gmpy2.powmod(c, k, m))


def test_threads_share_rows_and_calls_run_at_once() -> None:
    m, w, rows = _odd(1024), 128, 3000
    cts = [secrets.randbelow(m) for _ in range(rows)]
    blob = b"".join(c.to_bytes(w, "big") for c in cts)
    keys = np.random.default_rng(3).integers(0, 32, (rows, 1)).astype(np.int64)
    want = _python(m, cts, keys, 32)
    assert _ints(native.group_products_threaded(m, w, blob, keys, 32, 4) or b"", w) == want
    got: list[bytes | None] = [None] * 4
    runs = [threading.Thread(target=lambda i=i: got.__setitem__(i, native.group_products(m, w, blob, keys, 32)))
            for i in range(4)]
    for t in runs:
        t.start()
    for t in runs:
        t.join()
    assert all(g is not None and _ints(g, w) == want for g in got)


def test_bad_input_is_refused_or_left_to_python() -> None:
    m, w = _odd(127), 16
    one = np.zeros((1, 1), np.int64)
    assert native.group_products(m, w, m.to_bytes(w, "big"), one, 1) is None  # not below m: Python decides
    assert native.group_products(m, w, (1 << 127 | 5).to_bytes(w, "big"), one, 1) is None
    with pytest.raises(ValueError, match="out of range"):
        native.group_products(m, w, (5).to_bytes(w, "big"), np.full((1, 1), 1, np.int64), 1)
    with pytest.raises(ValueError, match="out of range"):
        native.group_products(m, w, (5).to_bytes(w, "big"), np.full((1, 1), -2, np.int64), 1)
    with pytest.raises(ValueError, match="do not agree"):
        native.group_products(m, w, b"\x01" * (w + 1), one, 1)
    with pytest.raises(ValueError, match="odd"):
        native.group_products(m + 1, w, (5).to_bytes(w, "big"), one, 1)
    with pytest.raises(ValueError, match="odd"):
        native.group_products(1 << 200 | 1, w, (5).to_bytes(w, "big"), one, 1)  # wider than the field
    assert native.group_products(m, w, b"", np.zeros((0, 2), np.int64), 3) == (1).to_bytes(w, "big") * 3


@pytest.mark.parametrize("scheme", ["paillier", "ou"])
def test_vector_histograms_are_the_same_bytes_either_way(scheme: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``sum_by_group`` under both schemes: the C kernel's ciphertexts equal the Python kernel's and decrypt to
    numpy's per-bin sums (and gmpy2's loop over the same ciphertexts)."""
    pk, sk = (generate_keypair(512, allow_insecure=True) if scheme == "paillier"
              else ou.generate_keypair(1024, allow_insecure=True))
    rng = np.random.default_rng(7)
    x = rng.normal(size=2000)
    bins = rng.integers(0, 32, 2000)
    v = pk.encrypt_fixed(x)
    fast = v.sum_by_group(bins, 32)  # the mpz objects read in place
    monkeypatch.setitem(native._state, "mpz", False)
    from_bytes = pk.encrypt_fixed(x[:10]).sum_by_group(bins[:10], 32)  # below the kernel's rows: Python
    assert v.sum_by_group(bins, 32).to_bytes() == fast.to_bytes()  # the serialized bytes
    use_native(monkeypatch, False)
    slow = v.sum_by_group(bins, 32)
    assert fast.to_bytes() == slow.to_bytes()
    assert np.allclose(sk.decrypt_fixed(from_bytes), np.bincount(bins[:10], weights=x[:10], minlength=32))
    assert np.allclose(sk.decrypt_fixed(fast), np.bincount(bins, weights=x, minlength=32), atol=1e-6)
    cts = [int(c) for c in v.ciphertexts()]
    assert _sum_by_group(cts, bins.tolist(), 32, gmpy2.mpz(pk.cmod)) == [int(c) for c in slow.ciphertexts()]


def test_switched_off_it_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    use_native(monkeypatch, False)
    assert not native.available()
    assert "VFLCRYPTO_NATIVE=0" in native.why_not()
    assert native.group_products(_odd(64), 8, b"\x01" * 8, np.zeros((1, 1), np.int64), 1) is None


@st.composite
def _cases(draw: st.DrawFn) -> tuple[int, int, bytes, np.ndarray, int]:
    bits = draw(st.integers(2, 300))
    m = draw(st.integers(1 << (bits - 1), (1 << bits) - 1)) | 1
    width = (bits + 7) // 8 + draw(st.integers(0, 3))
    rows, cols, n_groups = draw(st.integers(0, 30)), draw(st.integers(1, 3)), draw(st.integers(1, 9))
    blob = draw(st.binary(min_size=rows * width, max_size=rows * width))  # any bytes: often not below m
    keys = np.array(draw(st.lists(st.integers(-1, n_groups - 1), min_size=rows * cols, max_size=rows * cols)),
                    dtype=np.int64).reshape(rows, cols)
    return m, width, blob, keys, n_groups


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_cases())
def test_generated_inputs_match_python_or_are_left_to_it(case: tuple[int, int, bytes, np.ndarray, int]) -> None:
    """Arbitrary bytes as ciphertexts (as a hostile peer may send): the products equal Python's where every used
    row is below the modulus, and the kernel answers ``None`` (Python decides) where one is not."""
    m, width, blob, keys, n_groups = case
    cts = _ints(blob, width)
    used = [c for c, row in zip(cts, keys.tolist(), strict=True) if any(g >= 0 for g in row)]
    got = native.group_products(m, width, blob, keys, n_groups)
    if all(c < m for c in used):
        assert got is not None and _ints(got, width) == _python(m, cts, keys, n_groups)
    else:
        assert got is None


def test_a_forked_child_makes_its_own_threads() -> None:
    """A child forked after the thread pool started inherits the pool object but none of its threads; its
    histogram must not wait forever on them."""
    import os

    m, w, rows = _odd(256), 32, 2000
    cts = [secrets.randbelow(m) for _ in range(rows)]
    blob = b"".join(c.to_bytes(w, "big") for c in cts)
    keys = np.random.default_rng(5).integers(0, 8, (rows, 1)).astype(np.int64)
    want = native.group_products_threaded(m, w, blob, keys, 8, 2)
    assert want is not None and native._pool is not None  # the parent's pool is up
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer within the parent's wait, or be killed
        try:
            got = native.group_products_threaded(m, w, blob, keys, 8, 2)
            os.write(write, b"1" if got == want else b"0")
        finally:
            os._exit(0)
    os.close(write)
    import select

    ready, _, _ = select.select([read], [], [], 30)
    if not ready:
        os.kill(pid, 9)
    os.waitpid(pid, 0)
    assert ready and os.read(read, 1) == b"1", "the forked child hung on its parent's threads or got other bytes"

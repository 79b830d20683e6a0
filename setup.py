"""The compiled parts: the ciphertext group-product kernel (``vflcrypto.he._groupprod``),
batched BLAKE2b for KKRT (``vflcrypto.psi._blake2b``), and the VOLE PSI's silent-VOLE
arithmetic (``vflcrypto.psi._vole``) and random-band OKVS (``vflcrypto.psi._okvs``), and the
one-pass scan of a simple CSV for alignment (``vflcrypto.data._csvscan``).

Everything else is in pyproject.toml. Every extension is optional: where they cannot be
built (no C compiler, no Python headers) the install goes on and the same work runs in
Python (:mod:`vflcrypto.he.native` says why), except the VOLE PSI's two, without which that
protocol is unavailable (:func:`vflcrypto.psi.rr22.why_not` says why). None needs a
library at build time.
"""

from setuptools import Extension, setup

_HEADERS = ["vflcrypto/psi/_aesni.h", "vflcrypto/psi/_simd.h"]  # AES-NI's key schedule; the VFLCRYPTO_SIMD cap

setup(ext_modules=[
    Extension("vflcrypto.he._groupprod", ["vflcrypto/he/_groupprod.c"], optional=True, extra_compile_args=["-O2"]),
    Extension("vflcrypto.psi._blake2b", ["vflcrypto/psi/_blake2b.c"], depends=["vflcrypto/psi/_simd.h"], optional=True,
              extra_compile_args=["-O3"]),
    Extension("vflcrypto.psi._vole", ["vflcrypto/psi/_vole.c"], depends=_HEADERS, optional=True,
              extra_compile_args=["-O3"]),
    Extension("vflcrypto.psi._okvs", ["vflcrypto/psi/_okvs.c"], depends=_HEADERS, optional=True,
              extra_compile_args=["-O3"]),
    Extension("vflcrypto.data._csvscan", ["vflcrypto/data/_csvscan.c"], optional=True, extra_compile_args=["-O3"]),
])

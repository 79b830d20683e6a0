"""The compiled parts: the ciphertext group-product kernel (``vflcrypto.he._groupprod``) and
batched BLAKE2b for KKRT (``vflcrypto.psi._blake2b``).

Everything else is in pyproject.toml. Both extensions are optional: where they cannot be
built (no C compiler, no Python headers) the install goes on and the same work runs in
Python (:mod:`vflcrypto.he.native` says why). Neither needs a library at build time.
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("vflcrypto.he._groupprod", ["vflcrypto/he/_groupprod.c"], optional=True, extra_compile_args=["-O2"]),
    Extension("vflcrypto.psi._blake2b", ["vflcrypto/psi/_blake2b.c"], optional=True, extra_compile_args=["-O3"]),
])

"""The one compiled part: the ciphertext group-product kernel (``vflcrypto.he._groupprod``).

Everything else is in pyproject.toml. The extension is optional: where it cannot be built
(no C compiler, no Python headers) the install goes on and :mod:`vflcrypto.he.native`
reports the Python kernels in use. It needs no GMP headers or library at build time.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("vflcrypto.he._groupprod", ["vflcrypto/he/_groupprod.c"], optional=True,
                             extra_compile_args=["-O2"])])

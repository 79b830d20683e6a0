"""Analysis of a run: what each role received, what it can learn, and what the attacks recover.

* :mod:`.ledger`: the transcript joined with the declarations per receiving role, the
  findings and outcome of an audit, SECURITY.md's generated tables;
* :mod:`.attacks`: empirical attacks on one role's received messages and the statistics
  that score them;
* :mod:`.noise`: the check that CKKS decryptions released by their key holder carry their
  flooding noise (a χ² variance test);
* :mod:`.literature`: published attacks on vertical FL (label inference from gradients,
  model completion, representation inversion) on one role's view, each citing its paper;
* :mod:`.report`: the audit as one self-contained HTML report and PNG figures;
* :mod:`.net`: the audit of the network runtime's own hello.

Imports: :mod:`vflcrypto.runtime`, :mod:`vflcrypto.ml`, :mod:`vflcrypto.he`,
:mod:`vflcrypto.data`, :mod:`vflcrypto.errors`. Public names: the modules above.
"""

__all__ = ["attacks", "ledger", "literature", "net", "noise", "report"]

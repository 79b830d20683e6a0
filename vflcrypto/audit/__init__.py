"""Analysis of a run: what each role received, what it can learn, and what the attacks recover.

* :mod:`.ledger`: the transcript joined with the declarations per receiving role, the
  findings and outcome of an audit, SECURITY.md's generated tables;
* :mod:`.attacks`: empirical attacks on one role's received messages and the statistics
  that score them;
* :mod:`.noise`: the check that CKKS decryptions released by their key holder carry their
  flooding noise (a χ² variance test);
* :mod:`.literature`: published attacks on vertical FL (label inference from gradients,
  model completion, representation inversion) on one role's view, each citing its paper;
  :mod:`.literature_tabular` those on tree-based and linear models, :mod:`.literature_psi`
  those on what PSI's outputs reveal (membership from intersection sizes, multi-party PSI
  beyond the all-party intersection);
* :mod:`.defences`: checks that a defence's mechanism runs as announced, and its privacy–utility
  frontier;
* :mod:`.report`: the audit as one self-contained HTML report and PNG figures;
  :mod:`.frontier_report` a defence's frontier likewise;
* :mod:`.net`: the audit of the network runtime's own hello.

Imports: :mod:`vflcrypto.runtime`, :mod:`vflcrypto.ml`, :mod:`vflcrypto.he`,
:mod:`vflcrypto.data`, :mod:`vflcrypto.privacy`, :mod:`vflcrypto.errors`. Public names: the modules above.
"""

__all__ = ["attacks", "defences", "frontier_report", "ledger", "literature", "net", "noise", "report"]

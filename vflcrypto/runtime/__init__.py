"""The runtime every protocol runs on: typed messages, their declarations, channels and transports.

* :mod:`.wire` and :mod:`.codecs`: the typed, pickle-free wire format and the codecs of
  keys and ciphertext vectors;
* :mod:`.declarations`: every message kind's leakage declaration (sender, receiver,
  protection, what the receiver can learn); a channel refuses undeclared kinds;
* :mod:`.transcript`: what crossed which boundary, with bytes and times;
* :mod:`.channel`: :class:`~vflcrypto.runtime.channel.Channel` over in-process transports,
  and the audit tap;
* :mod:`.steps`: roles as named steps, driven the same way by every runtime;
* :mod:`.certs`, :mod:`.partyconfig`, :mod:`.identity`, :mod:`.grpc_link`,
  :mod:`.network`: one process per party over gRPC with mutual TLS (certificates, the
  parties' configuration, identities, one link, the party network and run agreement);
* :mod:`.flower_meter`: bytes on a Flower Grid; :mod:`.progress`: how far a run is (protocols
  report counts; the command line draws them on stderr);
* :mod:`.record`: one network party's kept messages (``--keep-messages``), read back as its view.

Imports: :mod:`vflcrypto.he` (codecs), :mod:`vflcrypto.data` (atomic writes),
:mod:`vflcrypto.errors`, :mod:`vflcrypto.parallel`. Public names: the modules above.
"""

__all__ = [
    "certs",
    "channel",
    "codecs",
    "declarations",
    "flower_meter",
    "grpc_link",
    "identity",
    "network",
    "partyconfig",
    "progress",
    "record",
    "steps",
    "transcript",
    "wire",
]

"""The declared messages of secure aggregation (``secagg.*``), one set per aggregation round."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vflcrypto.runtime.declarations import PERFECT, Protection, declare

__all__ = ["CLIENT", "SERVER", "Advertise", "Forward", "Keys", "MaskedInput", "Setup", "Shares", "Survivors",
           "Unmask"]

SERVER, CLIENT = "server", "client"
#: the roles that contribute an input: secagg's and hfl's clients, prototype VFL's parties
CONTRIBUTORS = (CLIENT, "party")


@declare("secagg.setup", sender=SERVER, receiver=CONTRIBUTORS, protection=Protection.PUBLIC,
         reveals="the round, every client's name and neighbours, the threshold t, the vector length, the ring "
                 "and the fixed-point bits")
@dataclass(frozen=True)
class Setup:
    round: int
    clients: list[str]
    neighbours: list[list[str]]
    threshold: int
    length: int
    ring_bits: int
    frac_bits: int
    value_bits: int


@declare("secagg.advertise", sender=CONTRIBUTORS, receiver=SERVER, protection=Protection.PUBLIC,
         reveals="the client's two fresh X25519 public keys of this round (share encryption, mask agreement) and the "
                 "SHA-256 digest of its context (the round's setup and, in hfl, the global model the server sent "
                 "it: nothing the server does not know), signed with its pinned Ed25519 identity; that it is still "
                 "present")
@dataclass(frozen=True)
class Advertise:
    round: int
    c_pk: bytes
    s_pk: bytes
    #: SHA-256 of the setup and of what the embedding protocol sent this client (hfl: the global model)
    context: bytes
    signature: bytes


@declare("secagg.keys", sender=SERVER, receiver=CONTRIBUTORS, protection=Protection.PUBLIC,
         reveals="the signed public keys and context digests of the client's neighbours that advertised: who is "
                 "present, and whether they received the same global model and setup as this client (the client "
                 "aborts the round otherwise)")
@dataclass(frozen=True)
class Keys:
    round: int
    names: list[str]
    c_pks: list[bytes]
    s_pks: list[bytes]
    contexts: list[bytes]
    signatures: list[bytes]


@declare("secagg.shares", sender=CONTRIBUTORS, receiver=SERVER, protection=Protection.CIPHERTEXT, key_owner=CLIENT,
         reveals="to the relaying server: nothing but who shares with whom and the sizes (AES-256-GCM under "
                 "keys agreed between the two clients); each ciphertext holds Shamir shares of the sender's "
                 "mask key and self-mask seed for one neighbour")
@dataclass(frozen=True)
class Shares:
    round: int
    to: list[str]
    ciphertexts: list[bytes]


@declare("secagg.forward", sender=SERVER, receiver=CONTRIBUTORS, protection=Protection.CIPHERTEXT, key_owner=CLIENT,
         reveals="one Shamir share of each neighbour's mask key and self-mask seed: fewer than t shares of a "
                 "secret reveal nothing about it")
@dataclass(frozen=True)
class Forward:
    round: int
    senders: list[str]
    ciphertexts: list[bytes]


@declare("secagg.masked_input", sender=CONTRIBUTORS, receiver=SERVER,
         protection=(Protection.MASKED, Protection.AGGREGATE, Protection.DP),
         hiding_bits=PERFECT,
         reveals="x_u + PRG(b_u) + sum_v +-PRG(s_uv) mod 2^b: uniform on its own (pseudorandom masks); only the "
                 "sum over the surviving clients is revealed after unmasking. Under hfl's DP-FedAvg (announced in "
                 "hfl.model) x_u is the client's clipped update plus its share of Gaussian noise, so the sum is "
                 "(epsilon, delta)-DP at client level (noise sigma*C with at least m survivors; accounted over the "
                 "rounds with each round's survivors); secagg alone and protovfl add no noise")
@dataclass(frozen=True)
class MaskedInput:
    round: int
    y: np.ndarray


@declare("secagg.survivors", sender=SERVER, receiver=CONTRIBUTORS, protection=Protection.PUBLIC,
         reveals="which clients' masked inputs arrived (the survivors) and so which dropped")
@dataclass(frozen=True)
class Survivors:
    round: int
    survivors: list[str]


@declare("secagg.unmask", sender=CONTRIBUTORS, receiver=SERVER, protection=Protection.PLAINTEXT,
         reveals="the client's shares of every dropped neighbour's mask key and of every surviving neighbour's "
                 "self-mask seed (never both for one client): with t of them the server removes exactly the "
                 "masks that leave the survivors' sum")
@dataclass(frozen=True)
class Unmask:
    round: int
    s_owners: list[str]
    s_shares: list[bytes]
    b_owners: list[str]
    b_shares: list[bytes]

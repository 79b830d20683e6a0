"""Leakage declarations: for every message kind, who sends it to whom, how it is protected, what it reveals.

Every message that crosses a party boundary is declared once, beside its dataclass::

    @declare(
        "linreg.masked_gradient",
        sender="passive", receiver="coordinator",
        protection=(Protection.CIPHERTEXT, Protection.MASKED), key_owner="coordinator",
        hiding_bits=40,
        reveals="gradient + uniform mask; independent of the gradient",
    )
    @dataclass(frozen=True)
    class MaskedGradient:
        values: PaillierVector

:func:`declare` registers the class with :mod:`vflcrypto.runtime.wire` (so it can cross the
wire at all) and records its :class:`Declaration`. A :class:`~vflcrypto.runtime.channel.Channel`
refuses to send or accept a kind without one, and checks that the sending and receiving
roles match it. The audit that joins a run's transcript with these declarations, and the
generation of SECURITY.md's tables from them, live above the runtime in
:mod:`vflcrypto.audit.ledger`.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import ConfigurationError, UndeclaredMessageError
from . import codecs  # noqa: F401  (registers every wire codec: declared messages may carry any of them)
from .wire import register_message

__all__ = [
    "PERFECT",
    "Declaration",
    "Protection",
    "declaration_for",
    "declarations",
    "declare",
    "protocols",
]

T = TypeVar("T")

PERFECT = "perfect"  #: ``hiding_bits`` of a mask drawn uniformly from the whole group


class Protection(enum.Enum):
    """How a message's content is protected *from its receiver*."""

    PUBLIC = "public"  # meant to be known (public keys, parameters, sizes)
    PLAINTEXT = "plaintext"  # sensitive value sent in the clear
    CIPHERTEXT = "ciphertext"  # encrypted; see key_owner for who can decrypt
    MASKED = "masked"  # additively masked; see hiding_bits
    AGGREGATE = "aggregate"  # only a sum over many rows or parties
    BLINDED = "blinded"  # pseudorandom blinding of IDs (PSI)
    SHUFFLED = "shuffled"  # order carries no information
    FLOODED = "flooded"  # a CKKS decryption plus fresh Gaussian noise covering its key-dependent error (IND-CPA^D)
    DP = "differentially private"  # the output of a DP mechanism of the data it depends on; reveals states (ε, δ)
    NOISED = "noised"  # perturbed by an empirical defence's noise (no (ε, δ)); reveals states what it bounds


@dataclass(frozen=True)
class Declaration:
    """What one message kind is and what its receiver can learn from it."""

    kind: str
    protocol: str
    message: str
    sender: tuple[str, ...]
    receiver: tuple[str, ...]
    protection: tuple[Protection, ...]
    reveals: str
    key_owner: str | None = None
    hiding_bits: int | str | None = None

    @property
    def receiver_holds_key(self) -> bool:
        """The ciphertext is under the receiver's own key: it protects in transit only."""
        return Protection.CIPHERTEXT in self.protection and self.key_owner in self.receiver

    @property
    def claimed_protections(self) -> tuple[Protection, ...]:
        """Protections claimed *against the receiver*, each of which a mutation test must break.

        PUBLIC and PLAINTEXT claim nothing, and a ciphertext under the receiver's own key
        hides nothing from the receiver (it decrypts it; a mask may then protect the value).
        """
        return tuple(p for p in self.protection
                     if p not in (Protection.PUBLIC, Protection.PLAINTEXT)
                     and not (p is Protection.CIPHERTEXT and self.receiver_holds_key))

    @property
    def protection_label(self) -> str:
        parts = []
        for p in self.protection:
            if p is Protection.CIPHERTEXT and self.receiver_holds_key:
                parts.append(f"ciphertext (key: {self.key_owner}, the receiver's own)")
            elif p is Protection.CIPHERTEXT and self.key_owner:
                parts.append(f"ciphertext (key: {self.key_owner})")
            elif p is Protection.MASKED and self.hiding_bits == PERFECT:
                parts.append("masked (uniform: perfect hiding)")
            elif p is Protection.MASKED and self.hiding_bits is not None:
                parts.append(f"masked ({self.hiding_bits}-bit hiding)")
            else:
                parts.append(p.value)
        return " + ".join(parts)

    def allows(self, sender_role: str, receiver_role: str) -> bool:
        return sender_role in self.sender and receiver_role in self.receiver

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "protocol": self.protocol,
            "message": self.message,
            "sender": list(self.sender),
            "receiver": list(self.receiver),
            "protection": [p.value for p in self.protection],
            "key_owner": self.key_owner,
            "hiding_bits": self.hiding_bits,
            "reveals": self.reveals,
        }


_declarations: dict[str, Declaration] = {}
_lock = threading.Lock()


def _as_tuple(value: str | Iterable[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def declare(
    kind: str,
    *,
    sender: str | Iterable[str],
    receiver: str | Iterable[str],
    protection: Protection | Iterable[Protection],
    reveals: str,
    key_owner: str | None = None,
    hiding_bits: int | str | None = None,
) -> Callable[[type[T]], type[T]]:
    """Class decorator: make a frozen dataclass a wire message with a leakage declaration.

    ``kind`` is ``"<protocol>.<name>"``; ``sender``/``receiver`` are role names;
    ``reveals`` says, in one sentence, what the receiver can learn. ``hiding_bits`` is the
    statistical hiding of a mask in bits, or :data:`PERFECT` for a mask uniform over the
    whole group (e.g. uniform mod n under Paillier).
    """
    if hiding_bits is not None and hiding_bits != PERFECT and not isinstance(hiding_bits, int):
        raise ConfigurationError(f"hiding_bits of {kind!r} must be an int or PERFECT")
    if "." not in kind:
        raise ConfigurationError(f"message kind {kind!r} must be '<protocol>.<name>'")
    prot = (protection,) if isinstance(protection, Protection) else tuple(protection)
    if not prot or not reveals.strip():
        raise ConfigurationError(f"declaration of {kind!r} needs a protection and what it reveals")
    if Protection.CIPHERTEXT in prot and key_owner is None:
        raise ConfigurationError(f"ciphertext message {kind!r} must name its key owner")
    if Protection.MASKED in prot and hiding_bits is None:
        raise ConfigurationError(f"masked message {kind!r} must state its hiding in bits")

    def wrap(cls: type[T]) -> type[T]:
        register_message(cls, kind)
        decl = Declaration(
            kind=kind,
            protocol=kind.split(".", 1)[0],
            message=cls.__name__,
            sender=_as_tuple(sender),
            receiver=_as_tuple(receiver),
            protection=prot,
            reveals=" ".join(reveals.split()),
            key_owner=key_owner,
            hiding_bits=hiding_bits,
        )
        with _lock:
            _declarations[kind] = decl
        cls.__leakage__ = decl  # type: ignore[attr-defined]  # tags any class: not declarable on type[T]
        return cls

    return wrap


def declaration_for(kind: str) -> Declaration:
    """The declaration of ``kind``; :class:`UndeclaredMessageError` if there is none."""
    with _lock:
        decl = _declarations.get(kind)
    if decl is None:
        raise UndeclaredMessageError(f"message kind {kind!r} has no leakage declaration")
    return decl


def declarations(protocol: str | None = None) -> list[Declaration]:
    """All declarations (of one protocol), in registration order."""
    with _lock:
        decls = list(_declarations.values())
    return [d for d in decls if protocol is None or d.protocol == protocol]


def protocols() -> list[str]:
    """Names of the protocols that have declared messages, in registration order."""
    return list(dict.fromkeys(d.protocol for d in declarations()))

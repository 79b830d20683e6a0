"""``vflcrypto train fewshot`` (every role in this process) and ``vflcrypto party ... train fewshot``.

See :mod:`vflcrypto.protocols._repvfl_cli` for the files, the alignment and the output;
the flags below set few-shot VFL's training (:class:`~.roles.FewShotConfig`).
"""

from __future__ import annotations

import argparse

from vflcrypto.spec import PartyOutcome, TaskContext

from .. import _repvfl_cli as shared
from .roles import FewShotConfig, PartyRole, ServerRole, run_local

__all__ = ["add_party_arguments", "add_train_arguments", "party_task", "train"]


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    shared.add_train_arguments(p, FewShotConfig)


def train(args: argparse.Namespace) -> int:
    return shared.train(args, FewShotConfig, run_local, "fewshot")


def add_party_arguments(p: argparse.ArgumentParser) -> None:
    shared.add_party_arguments(p, FewShotConfig)


def party_task(args: argparse.Namespace, ctx: TaskContext) -> PartyOutcome:
    return shared.party_task(args, ctx, FewShotConfig, ServerRole, PartyRole)

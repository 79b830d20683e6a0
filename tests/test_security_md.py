"""SECURITY.md's per-protocol leakage tables are generated from the declarations and must match."""

from __future__ import annotations

from pathlib import Path

from vflcrypto.audit.ledger import markdown_table, render_security_md
from vflcrypto.cli.audit import FLOWER_BLOCK, load_all_protocols, security_md_blocks
from vflcrypto.runtime.declarations import declarations

ROOT = Path(__file__).resolve().parents[1]


def test_security_md_tables_match_declarations() -> None:
    load_all_protocols()
    text = (ROOT / "SECURITY.md").read_text(encoding="utf-8")
    assert render_security_md(text, security_md_blocks()) == text, (
        "SECURITY.md is out of date: run `vflcrypto audit --security-md SECURITY.md`"
    )


def test_every_protocol_with_declarations_has_a_table() -> None:
    loaded = load_all_protocols()
    text = (ROOT / "SECURITY.md").read_text(encoding="utf-8")
    protocols = {d.protocol for d in declarations() if not d.protocol.startswith("test")}
    for proto in protocols:
        assert f"<!-- BEGIN leakage:{proto} -->" in text, f"SECURITY.md lacks the {proto} table"
    assert loaded or not protocols


def test_markdown_table_lists_every_kind() -> None:
    load_all_protocols()
    for proto in {d.protocol for d in declarations()}:
        table = markdown_table(proto)
        for d in declarations(proto):
            assert f"`{d.kind}`" in table


def test_flower_relay_table_lists_every_relayed_kind() -> None:
    from vflcrypto.protocols import registry

    text = (ROOT / "SECURITY.md").read_text(encoding="utf-8")
    assert f"<!-- BEGIN leakage:{FLOWER_BLOCK} -->" in text
    table = security_md_blocks()[FLOWER_BLOCK]
    for spec in registry().values():
        if spec.flower is not None:
            assert f"`{spec.name}`" in table
            for kind in spec.flower.relayed:
                assert f"`{kind}`" in table


def _github_anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lowercase, punctuation dropped, spaces to hyphens."""
    import re

    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_contents_table_links_every_section() -> None:
    text = (ROOT / "SECURITY.md").read_text(encoding="utf-8")
    contents = text.split("## Contents", 1)[1].split("\n## ", 1)[0]
    headings = [ln[3:] for ln in text.splitlines() if ln.startswith("## ") and ln != "## Contents"]
    assert len(headings) >= 15
    missing = [h for h in headings if f"(#{_github_anchor(h)})" not in contents]
    assert not missing, f"SECURITY.md's contents table does not link: {missing}"
    assert _github_anchor("Entity alignment (PSI): `protocols/align/`") == "entity-alignment-psi-protocolsalign"


def test_every_protocol_with_a_claimed_protection_lists_its_checks() -> None:
    from vflcrypto.cli.audit import checks_block

    load_all_protocols()
    text = (ROOT / "SECURITY.md").read_text(encoding="utf-8")
    protected = {d.protocol for d in declarations() if d.claimed_protections and d.protocol not in ("test", "net")}
    missing = [p for p in sorted(protected) if f"<!-- BEGIN leakage:{checks_block(p)} -->" not in text]
    assert not missing, f"SECURITY.md lacks the checks table of {missing}"

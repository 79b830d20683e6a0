"""Every shell command of the README's and the docs pages' ``sh`` code blocks runs, on the bundled data, in order.

The blocks of README.md and then of each page of docs/ (:data:`PAGES`, the order the
README's contents table gives) run in one scratch directory, the way a new user would
type them: the README's ``vflcrypto examples ex/ && cd ex/`` sets the directory of the
blocks after it; a command that already ran in the tour (a page repeating the README's
example) is not run again; ``# terminal N`` commands of one block run side by side as separate
processes (network parties on loopback) and must all exit 0. Commands get small keys
where a flag allows (``--key-bits 512 --allow-insecure``, the size of the suite's audits;
Flower: ``key-bits=1024 allow-insecure=true``) and optional ``[...]`` usage groups are
dropped. ``flower_deploy.sh`` runs two steps. Each block is one test (in README order, sharing the directory); a block
preceded by ``<!-- readme-test: skip: REASON -->`` is skipped with its reason. A command
fails the test on a non-zero exit or a Python traceback in its output.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = ("README.md", "docs/command-line.md", "docs/network.md", "docs/flower.md", "docs/bad-input.md",
         "docs/python.md", "docs/architecture.md", "docs/development.md")
BLOCK = re.compile(r"(?:<!-- readme-test: skip: (?P<skip>[^>]*?) -->\s*\n)?```sh\n(?P<body>.*?)```", re.S)
SMALL_KEYS = ("--key-bits", "512", "--allow-insecure")
KEYED = re.compile(r"\bvflcrypto (?:train (?:linreg|secureboost|logreg|pearson|poisson|sshelr|woe)"
                   r"|predict linreg|audit|bench gradients|party .* (?:train|predict))\b")
TIMEOUT = 600
#: side-by-side party commands take seconds; a hang is reported (with every party's output) before pytest's 600 s
SIDE_TIMEOUT = 300


@dataclass
class Block:
    line: int
    commands: list[str]
    skip: str | None
    page: str = "README.md"


def readme_blocks(text: str, page: str = "README.md") -> list[Block]:
    """The ``sh`` blocks: commands with continuation lines joined, comment-only lines dropped."""
    blocks = []
    for m in BLOCK.finditer(text):
        joined = m.group("body").replace("\\\n", " ")
        commands = [ln.strip() for ln in joined.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
        terminals = [ln.strip() for ln in joined.splitlines() if re.match(r"\s*# terminal \d", ln)]
        if terminals:
            commands = ["&" + c for c in commands]  # side by side
        blocks.append(Block(text.count("\n", 0, m.start()) + 1, commands, m.group("skip"), page))
    return blocks


def small(command: str) -> str:
    """The command with optional usage groups dropped and small keys where a flag allows."""
    command = re.sub(r"\s+#\s.*$", "", command)  # a trailing comment
    command = re.sub(r"\s*\[[^\]]*\]", "", command).strip()
    if "flower_simulate.sh" in command or "flower_deploy.sh" in command:
        # a deployed SuperNode polls every 3 s: two logreg steps instead of twenty
        return command + " key-bits=1024 allow-insecure=true" + (" steps=2" if "deploy" in command else "")
    if KEYED.search(command) and "--key-bits" not in command:
        if "bench gradients" in command:
            command += " --n 64 --phe-n 16 --repeats 1"
        return f"{command} {' '.join(SMALL_KEYS)}"
    return command


def _env(work: Path) -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    return dict(os.environ, PATH=f"{bin_dir}:{os.environ.get('PATH', '')}", VENV=sys.prefix,
                FLWR_APP=str(ROOT / "flower"), FLWR_WORKDIR=str(work), MPLBACKEND="Agg")


def _check(command: str, proc: subprocess.CompletedProcess[str] | tuple[int, str]) -> None:
    code, out = (proc.returncode, proc.stdout) if isinstance(proc, subprocess.CompletedProcess) else proc
    assert code == 0, f"README command failed ({code}): {command}\n{out[-3000:]}"
    assert "Traceback (most recent call last)" not in out, f"traceback from: {command}\n{out[-3000:]}"


def run_block(block: Block, cwd: Path, work: Path, ran: set[str] | None = None) -> Path:
    """Run one block's commands in ``cwd``; returns the directory the next block starts in.

    A command in ``ran`` (its text after :func:`small`) already ran in the tour and is not
    run again; every command run is added to it.
    """
    env = _env(work)
    ran = set() if ran is None else ran
    if any("scripts/" in c for c in block.commands) and not (cwd / "scripts").exists():
        (cwd / "scripts").symlink_to(ROOT / "scripts")  # the Flower scripts, as from the repo root
    side: list[tuple[str, subprocess.Popen[str]]] = []
    for raw in block.commands:
        command = small(raw.lstrip("&"))
        if not raw.startswith("&") and command in ran:
            continue
        ran.add(command)
        if raw.startswith("&"):
            side.append((command, subprocess.Popen(["bash", "-c", command], cwd=cwd, env=env, text=True,
                                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)))
            continue
        m = re.search(r"&& cd (\S+)$", command)
        proc = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=TIMEOUT)
        _check(command, proc)
        if m:
            cwd = (cwd / m.group(1)).resolve()
    for command, p in side:
        try:
            out, _ = p.communicate(timeout=SIDE_TIMEOUT)
        except subprocess.TimeoutExpired:
            for _, q in side:
                q.kill()
            outs = "\n".join(f"--- {c}\n{q.communicate()[0][-2000:]}" for c, q in side)
            pytest.fail(f"README terminal command did not finish in {SIDE_TIMEOUT} s: {command}\n{outs}")
        _check(command, (p.returncode, out))
    return cwd


def test_the_readme_parser_finds_the_blocks_and_their_markers() -> None:
    text = ("x\n```sh\na --b \\\n  c   # note\n# only a comment\n```\n<!-- readme-test: skip: slow -->\n"
            "```sh\nmake bench\n```\n```sh\n# terminal 1\nv party x\n# terminal 2\nv party y\n```\n")
    blocks = readme_blocks(text)
    assert [b.commands for b in blocks] == [["a --b    c   # note"], ["make bench"], ["&v party x", "&v party y"]]
    assert small(blocks[0].commands[0]) == "a --b    c"
    assert [b.skip for b in blocks] == [None, "slow", None]
    assert small("vflcrypto bench gradients [--n 20000] [--json]") == \
        "vflcrypto bench gradients --n 64 --phe-n 16 --repeats 1 --key-bits 512 --allow-insecure"
    assert small("vflcrypto audit logreg        # plain") == "vflcrypto audit logreg --key-bits 512 --allow-insecure"


BLOCKS = [b for page in PAGES for b in readme_blocks((ROOT / page).read_text(encoding="utf-8"), page)]


@pytest.fixture(scope="module")
def tour(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The scratch directory the blocks run in, one after the other (state carries over)."""
    work = Path("/tmp") / f"rt{os.getpid()}"  # short: Ray's AF_UNIX socket paths
    work.mkdir(exist_ok=True)
    yield {"cwd": tmp_path_factory.mktemp("readme"), "work": work, "ran": set()}
    shutil.rmtree(work, ignore_errors=True)


def test_the_readme_has_its_blocks() -> None:
    assert len(BLOCKS) >= 10 and all(b.commands for b in BLOCKS)
    assert [b.skip for b in BLOCKS if b.skip] and all(b.skip.strip() for b in BLOCKS if b.skip)
    readme = [b for b in BLOCKS if b.page == "README.md"]
    assert any("vflcrypto align" in c for b in readme for c in b.commands)
    assert any("vflcrypto train" in c for b in readme for c in b.commands)
    assert any("vflcrypto audit" in c for b in readme for c in b.commands)
    assert any("vflcrypto bench" in c for b in readme for c in b.commands)


def test_every_docs_page_is_linked_from_the_readme_and_run() -> None:
    """A page under docs/ that the README does not link, or that this test does not run, is an error."""
    readme = README.read_text(encoding="utf-8")
    pages = sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))
    assert pages == sorted(PAGES[1:]), "docs/ pages and PAGES differ"
    for page in pages:
        assert f"]({page})" in readme, f"README.md does not link {page}"


def test_a_command_already_run_in_the_tour_is_not_run_again(tmp_path: Path) -> None:
    block = Block(1, ["echo one >> log", "echo one >> log", "echo two >> log"], None)
    ran: set[str] = set()
    run_block(block, tmp_path, tmp_path, ran)
    run_block(Block(2, ["echo two >> log"], None), tmp_path, tmp_path, ran)
    assert (tmp_path / "log").read_text().split() == ["one", "two"]


@pytest.mark.slow
@pytest.mark.parametrize("block", BLOCKS, ids=[f"{Path(b.page).stem}:line{b.line}" for b in BLOCKS])
def test_readme_block_runs(block: Block, tour: dict[str, Any]) -> None:
    """One README block, in order after the previous ones; a marked block is skipped with its reason."""
    if block.skip:
        pytest.skip(f"{block.page} line {block.line}: {block.skip}")
    tour["cwd"] = run_block(block, tour["cwd"], tour["work"], tour["ran"])

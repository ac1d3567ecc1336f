"""The documentation: README front door, links, the mkdocs site's navigation, a page per verb."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
RUN_CMD = 'pip install torch==2.13.0 && pip install -e ".[torch]" && roofprof run'
TEST_CMD = 'pip install torch==2.13.0 && pip install -e ".[test,torch]" && python -m pytest -q'
PROCESS_WORDS = re.compile(r"issue ?#?[0-9]|session|\bseed\b", re.IGNORECASE)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _user_files() -> list[Path]:
    files = [README, ROOT / "BENCHMARKS.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md"]
    return files + sorted(DOCS.rglob("*.md"))


def _prose(text: str) -> str:
    """The text without fenced code blocks and inline code spans (identifiers stay free)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)
    return re.sub(r"`[^`\n]*`", "", text)


def test_readme_is_a_front_door():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert 150 <= n <= 320, f"README.md has {n} lines"


def test_readme_quickstart_has_the_two_commands():
    text = README.read_text(encoding="utf-8")
    quick = text.split("## Quickstart", 1)[1]
    block = re.search(r"```bash\n(.*?)```", quick, re.DOTALL)
    assert block, "no ```bash block under ## Quickstart"
    lines = [line.strip() for line in block.group(1).splitlines()]
    assert RUN_CMD in lines
    assert TEST_CMD in lines


@pytest.mark.parametrize("path", _user_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_process_words(path):
    hits = [
        (i, line)
        for i, line in enumerate(_prose(path.read_text(encoding="utf-8")).splitlines(), 1)
        if PROCESS_WORDS.search(line)
    ]
    assert not hits, hits


def _relative_links(path: Path) -> list[str]:
    out = []
    for target in LINK.findall(_prose(path.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        out.append(target.split("#", 1)[0])
    return [t for t in out if t]


@pytest.mark.parametrize(
    "path",
    [p for p in _user_files() if p.name != "CHANGELOG.md"],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_relative_links_resolve(path):
    missing = [t for t in _relative_links(path) if not (path.parent / t).exists()]
    assert not missing, f"{path.relative_to(ROOT)}: {missing}"


def _nav_pages() -> list[str]:
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = text.split("\nnav:", 1)[1]
    return re.findall(r":\s*([\w./-]+\.md)\s*$", nav, re.MULTILINE)


def test_nav_pages_exist_and_every_page_is_in_the_nav():
    nav = _nav_pages()
    assert nav, "mkdocs.yml has no nav"
    assert [p for p in nav if not (DOCS / p).is_file()] == []
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert sorted(pages - set(nav)) == []


def _verbs() -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "roofprof", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"COLUMNS": "200", "PATH": ""},
    ).stdout
    commands = out.split("Commands", 1)[1]
    return re.findall(r"^│ ([a-z][a-z-]*)\s{2,}", commands, re.MULTILINE)


def test_every_cli_verb_has_a_page():
    verbs = _verbs()
    assert len(verbs) >= 10, verbs
    missing = [v for v in verbs if not (DOCS / "commands" / f"{v}.md").is_file()]
    assert not missing, missing
    assert set(verbs) <= set(Path(p).stem for p in _nav_pages() if p.startswith("commands/"))


@pytest.mark.slow
def test_mkdocs_build_strict(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    r = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]

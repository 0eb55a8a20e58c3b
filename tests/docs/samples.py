"""Read the samples out of README.md and docs/, and write the CLI reference from the parser.

The conventions a page follows (CONTRIBUTING.md, "Documentation"):

- A ```python block whose first line is ``# path/to/file.py`` is a file: it is
  written at that path in the page's own empty directory and imported there
  (``main.py`` runs as it is imported; a module already imported is
  reloaded). ``# test_*.py -- pytest`` is a test file: pytest runs it there.
- A block whose first line says ``excerpt of examples/...`` is an excerpt of
  that file: its lines appear there, in order (the file itself is run by the
  framework tests).
- Any other ```python block is a snippet: executed, in the page's order, in
  one namespace per page, after the code of a ``<!-- sample-setup ... -->``
  comment and before that of ``<!-- sample-teardown ... -->``. README.md is
  read in terminals too, where such a comment shows: its set-up is a file,
  ``tests/docs/setup/README.py`` (`SETUPS`), run before the page's first
  sample in its namespace; the ``teardown()`` it defines runs after the last.
- A ```console block holds ``$ persched ...`` commands (or ``$ python
  FILE.py``, a file of the page), each followed by its
  output: it runs in the same directory once the blocks above it have, and
  its output must match, a line ``...`` standing for any lines and ``...``
  inside a line for any text.
- A comment that ends a ``print(...)`` line, and the comment lines right
  below that call, show what it prints (`output_comments`). Whatever a
  snippet or a file prints while it runs (its worker threads included) must
  contain those lines in that order (`prints_shown`), ``...`` inside a line
  standing for any text: so a value that depends on the clock is written
  ``...``, and a remark about a call goes in the page's text, not after it.

    python -m tests.docs.samples --write-cli    # rewrite docs/reference/cli.md from the parser
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parents[2]
# Pages whose samples another part of the work keeps (their authors adopt the conventions above).
NOT_YET: Final = frozenset[str]()

SETUPS: Final = REPO / "tests" / "docs" / "setup"  # a page's set-up as a file: SETUPS / "README.py"
_FENCE: Final = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)
_COMMENT: Final = re.compile(r"^<!-- sample-(setup|teardown)\n(.*?)^-->\n", re.S | re.M)
_FILE: Final = re.compile(r"# (\S+\.py)(?: -- (.*))?$")
_EXCERPT: Final = re.compile(r"#.*\bexcerpt of (examples/\S+?\.py)\b")


@dataclass(frozen=True)
class Block:
    """One sample of a page, in the page's order."""

    kind: str  # "file", "test", "excerpt", "snippet", "setup", "teardown", "console"
    code: str
    line: int  # where it starts in the page, for messages
    path: str = ""  # a file's or an excerpt's path


def pages() -> list[str]:
    """Every Markdown page whose samples the suite runs, relative to the repository."""
    found = ["README.md", *(str(p.relative_to(REPO)) for p in sorted((REPO / "docs").rglob("*.md")))]
    return [page for page in found if page not in NOT_YET]


def blocks(page: str) -> list[Block]:
    """The page's samples, in order."""
    text = (REPO / page).read_text(encoding="utf-8")
    found: list[tuple[int, Block]] = []
    for m in _COMMENT.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        found.append((m.start(), Block(m.group(1), m.group(2), line)))
    for m in _FENCE.finditer(text):
        lang, code = m.group(1), m.group(2)
        line = text.count("\n", 0, m.start()) + 1
        if lang == "console":
            found.append((m.start(), Block("console", code, line)))
        if lang != "python":
            continue
        first = code.split("\n", 1)[0]
        if (file := _FILE.fullmatch(first)) and not first.startswith("# examples/"):
            name = file.group(1)
            kind = "test" if Path(name).name.startswith("test_") and file.group(2) == "pytest" else "file"
            found.append((m.start(), Block(kind, code, line, name)))
        elif excerpt := _EXCERPT.match(first):
            found.append((m.start(), Block("excerpt", code, line, excerpt.group(1))))
        else:
            found.append((m.start(), Block("snippet", code, line)))
    ordered = [block for _, block in sorted(found, key=lambda item: item[0])]
    setup = SETUPS / Path(page).with_suffix(".py")
    if setup.exists():
        code = setup.read_text(encoding="utf-8")
        ordered = [Block("setup", code, 0, str(setup.relative_to(REPO))), *ordered, Block("teardown", "teardown()", 0)]
    return ordered


def console_matches(shown: list[str], real: list[str]) -> bool:
    """Whether real output lines match shown ones (``...`` alone: any lines; in a line: any text)."""
    if not shown:
        return not real
    head, rest = shown[0], shown[1:]
    if head == "...":
        return any(console_matches(rest, real[i:]) for i in range(len(real) + 1))
    pattern = ".*?".join(re.escape(part) for part in head.rstrip().split("..."))
    return bool(real) and re.fullmatch(pattern, real[0].rstrip()) is not None and console_matches(rest, real[1:])


def output_comments(code: str) -> list[str]:
    """The lines that the comments of `code` say its ``print(...)`` calls print, in the order of the calls."""
    comments = {
        token.start[0]: token.string.removeprefix("#").strip()
        for token in tokenize.generate_tokens(io.StringIO(code).readline)
        if token.type == tokenize.COMMENT
    }
    lines = code.splitlines()
    calls = sorted(
        node.end_lineno
        for node in ast.walk(ast.parse(code))
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id == "print"
        and node.end_lineno is not None
    )
    shown: list[str] = []
    for end in calls:
        if end in comments:
            shown.append(comments[end])
        below = end + 1
        while below <= len(lines) and lines[below - 1].lstrip().startswith("#"):
            shown.append(comments[below])
            below += 1
    return shown


def prints_shown(shown: list[str], real: list[str]) -> bool:
    """Whether the printed lines `real` contain the `shown` ones in order (``...`` in a line: any text)."""
    rest = iter(real)
    return all(any(console_matches([line], [printed]) for printed in rest) for line in shown)


def cli_reference() -> str:
    """docs/reference/cli.md: the help of the command and of each subcommand, at 80 columns."""
    import os
    from unittest import mock

    from persched.cli.parser import build_parser

    with mock.patch.dict(os.environ, {"COLUMNS": "80"}):
        parser = build_parser()
        parts = [
            "# Command line\n\n",
            "`persched` (also `python -m persched`) reads the database from `--db URL`, else the\n",
            "`PERSCHED_DB` environment variable, else `persched.db`, and the namespace from\n",
            "`--namespace NAME`, else `PERSCHED_NAMESPACE`, else `default`. `--db`, `--namespace`,\n",
            "`--debug`, `-v` and `--json` may come before the command or after it. How to use the\n",
            "commands, with real output: [Operate with the command line](../operations.md).\n\n",
            "This page is the parser's own help (`persched --help`, `persched COMMAND --help`);\n",
            "the test suite checks that it is current.\n\n",
            "## persched\n\n```text\n",
            parser.format_help(),
            "```\n",
        ]
        for name, sub in parser.commands.items():
            parts += [f"\n## persched {name}\n\n```text\n", sub.format_help(), "```\n"]
    return "".join(parts)


if __name__ == "__main__":
    if sys.argv[1:] != ["--write-cli"]:
        sys.exit("usage: python -m tests.docs.samples --write-cli")
    (REPO / "docs" / "reference" / "cli.md").write_text(cli_reference(), encoding="utf-8")

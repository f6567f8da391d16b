"""The documentation's examples, run: README.md and every page under docs/, offline.

Every fenced block is run as a reader would run it, or says why not:

* ``sh``/``bash``/``shell``/``console`` blocks run in bash, with the dev venv's ``bin``
  first on ``PATH``. Each command must exit 0, unless a comment on its lines or right
  below it (before the next command) documents another status, as ``(exit 4)``: the
  docs say what ``gate`` exits, and the test holds them to it. In a ``console`` block
  only ``$ `` lines are commands.
* ``python`` blocks run in a subprocess of this interpreter, as the asyncio REPL runs
  code: top-level ``await`` and ``async with`` work. A block sees the imports of the
  Python blocks above it on its page (a reader keeps them), nothing else of theirs.
* A page's blocks run in order in one folder of their own (with their own ``HOME`` and
  ``TMPDIR``): ``score`` writes what the ``gate`` below it reads. Network access goes to
  a closed loopback port (``HTTP(S)_PROXY``): what needs the internet fails at once.
* Pages are independent: two run at a time, in threads, the slowest first (``SLOW_PAGES``);
  each block's result waits for its test.

A block that cannot run as written carries a marker, an HTML comment on the line (or the
lines) right above its fence, which the rendered page does not show::

    <!-- doc-example: skip="installs from the package index" -->
        never run; the reason is required (install lines, ``python3 dev.py``, output
        samples, synopses, what needs a client or a server of its own)
    <!-- doc-example: file="policy.toml" check="policy" -->
        not run: written to that path of the page's folder for the blocks below; TOML,
        JSON, YAML and Python are parsed, ``check="policy"`` reads it as a policy file
    <!-- doc-example: setup="demo" -->
        run after the named set-up (``SETUPS`` in ``doc_setups.py``): files, such as ``litmus-sandbox
        demo``'s output under the names the page uses, and for a Python block the names a
        fragment leaves to the reader (``workdir``, ``send_email``, an OpenAI client)

Options combine (``setup="a,b"``). A block of any other language needs ``file`` or
``skip``, and one without either must run: ``test_every_block_runs_or_says_why`` fails on
any block left out. Test ids are ``PAGE:LINE`` of the block's opening fence.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import tomllib
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from doc_setups import SETUPS

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
#: The dev venv's scripts (not resolved: a venv's python is a link to the base one).
VENV_BIN = os.path.dirname(sys.executable)
SHELL = {"sh", "bash", "shell", "console"}
PYTHON = {"python", "py"}
KEYS = {"skip", "file", "check", "setup"}
BLOCK_TIMEOUT = 100  # seconds; the slowest block, an Inspect eval, takes about 15
PAGES_AT_ONCE = 2
#: Started first: these pages spend 10-20 s of CPU importing and running their framework,
#: the others together about as much.
SLOW_PAGES = ("docs/guides/inspect.md", "docs/guides/agentdojo.md")

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[^`\s]*)")
MARKER = re.compile(r"^\s*<!--\s*doc-example:(?P<body>.*?)-->\s*$")
OPTION = re.compile(r'(?P<key>[a-z]+)=(?:"(?P<quoted>[^"]*)"|(?P<bare>[^\s"]+))|(?P<junk>\S+)')
EXIT = re.compile(r"\(exit (\d+)\)")


# -- Reading the pages ----------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, what it holds, what its marker says."""

    page: str  # relative to the repository: "docs/guides/scoring.md"
    line: int  # the opening fence's line, from 1
    lang: str
    text: str  # without the fence's indent
    options: Mapping[str, str] = field(default_factory=dict)
    problems: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def runs(self) -> bool:
        return "skip" not in self.options and "file" not in self.options

    @property
    def setups(self) -> list[str]:
        return [s.strip() for s in self.options.get("setup", "").split(",") if s.strip()]


def _options(body: str) -> tuple[dict[str, str], tuple[str, ...]]:
    options: dict[str, str] = {}
    problems: list[str] = []
    for m in OPTION.finditer(body):
        if m["junk"]:
            problems.append(f'marker: cannot read {m["junk"]!r} (key=value or key="value")')
        elif m["key"] not in KEYS:
            problems.append(f"marker: unknown key {m['key']!r} (known: {', '.join(sorted(KEYS))})")
        else:
            options[m["key"]] = m["quoted"] if m["quoted"] is not None else m["bare"]
    return options, tuple(problems)


def _dedent(line: str, indent: int) -> str:
    """The line without the fence's indent (as far as it is blank)."""
    blank = len(line) - len(line.lstrip(" \t"))
    return line[min(blank, indent) :]


def read_blocks(path: Path) -> list[Block]:
    """Every fenced block of a Markdown page, with the marker right above it (if any)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    page = path.relative_to(ROOT).as_posix()
    blocks: list[Block] = []
    marker: tuple[dict[str, str], tuple[str, ...]] | None = None  # waiting for its fence
    i = 0
    while i < len(lines):
        found, fence = MARKER.match(lines[i]), FENCE.match(lines[i])
        if found:
            assert marker is None, f"{page}:{i + 1}: two doc-example markers for one block"
            marker = _options(found["body"])
        elif fence:
            indent, mark = len(fence["indent"]), fence["fence"]
            close = re.compile(rf"\s*{re.escape(mark[0])}{{{len(mark)},}}\s*")
            j = i + 1
            while j < len(lines) and not close.fullmatch(lines[j]):
                j += 1
            text = "".join(_dedent(line, indent) + "\n" for line in lines[i + 1 : j])
            options, problems = marker or ({}, ())
            blocks.append(Block(page, i + 1, fence["lang"].lower(), text, options, problems))
            marker, i = None, j
        else:
            assert marker is None or not lines[i].strip(), f"{page}:{i + 1}: a marker, no block"
        i += 1
    assert marker is None, f"{page}: a doc-example marker at the end, with no block"
    return blocks


BLOCKS = [block for page in PAGES for block in read_blocks(page)]


# -- Running a page -------------------------------------------------------------------------

#: Runs a Python block's chunks (set-ups, block, after) in one namespace; in an event loop,
#: as the asyncio REPL does, when one of them awaits at top level.
PY_RUNNER = """
import ast, asyncio, inspect, sys
namespace = {"__name__": "__main__"}
args, chunks = sys.argv[1:], []
for path, name, first_line in zip(args[0::3], args[1::3], args[2::3]):
    source = "\\n" * int(first_line) + open(path, encoding="utf-8").read()
    chunks.append(compile(source, name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT))
if any(c.co_flags & inspect.CO_COROUTINE for c in chunks):
    async def main():
        for c in chunks:
            result = eval(c, namespace)
            if inspect.isawaitable(result):
                await result
    asyncio.run(main())
else:
    for c in chunks:
        exec(c, namespace)
"""


def shell_script(block: Block) -> str:
    """The block as a bash script that checks each command's status as it goes."""
    commands: list[tuple[int, str, int]] = []  # (page line, command, expected status)
    lines = block.text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if block.lang == "console":
            line = line[2:] if line.startswith("$ ") else "#"
        if not line or line.startswith("#"):
            said = EXIT.search(line)
            if said and commands:
                commands[-1] = (*commands[-1][:2], int(said[1]))
        else:
            start, parts = i, [line]
            while parts[-1].endswith("\\") and i + 1 < len(lines):
                i += 1
                parts.append(lines[i].strip())
            text = "\n".join(parts)
            said = EXIT.search(text)
            commands.append((block.line + 1 + start, text, int(said[1]) if said else 0))
        i += 1
    script = []
    for number, text, expected in commands:
        where = f"{block.page}:{number}"
        shown = (where + ": " + text.splitlines()[0]).replace("'", "'\"'\"'")
        script += [
            f"printf '+ %s\\n' '{shown}'",
            text,
            "status=$?",
            f'if [ "$status" -ne {expected} ]; then',
            f'  echo "doc-example: {where} exited $status, the docs say {expected}"; exit 1',
            "fi",
        ]
    return "\n".join(script) + "\n"


def python_imports(blocks: list[Block]) -> str:
    """The top-level imports of these Python blocks, in order."""
    nodes = [n for b in blocks for n in ast.parse(b.text).body]
    return "".join(
        ast.unparse(n) + "\n" for n in nodes if isinstance(n, ast.Import | ast.ImportFrom)
    )


def check_file(block: Block, path: Path) -> None:
    """A written block parses as what it is, and a policy reads as one."""
    kind = block.lang or path.suffix.lstrip(".")
    if kind == "toml":
        tomllib.loads(block.text)
    elif kind == "json":
        json.loads(block.text)
    elif kind == "jsonl":
        for line in filter(str.strip, block.text.splitlines()):
            json.loads(line)
    elif kind in {"yaml", "yml"}:
        importlib.import_module("yaml").safe_load(block.text)  # PyYAML, with inspect-ai
    elif kind in PYTHON:
        compile(block.text, str(path), "exec")
    if "check" in block.options:
        assert block.options["check"] == "policy", f"unknown check {block.options['check']!r}"
        from litmus_sandbox import read_policy_file

        read_policy_file(path)


def _output(data: bytes | str | None) -> str:
    """A command's output for a failure message: the commands run, and how it ended."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data or ""
    lines = text.splitlines()
    if len(text) > 6000:
        lines = [*(x for x in lines[:-40] if x.startswith("+ ")), "[...]", *lines[-40:]]
    return "\n".join(lines)


class Demo:
    """``litmus-sandbox demo``'s output, made once, by the first page that needs it."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self._lock = threading.Lock()
        self._made = False

    def folder(self) -> Path:
        with self._lock:
            if not self._made:
                home, tmp = self.base / "home", self.base / "tmp"
                home.mkdir()
                tmp.mkdir()
                env = {**_clean_env(), "HOME": str(home), "TMPDIR": str(tmp)}
                cmd = [sys.executable, "-m", "litmus_sandbox._cli.main", "demo", "--out", "demo"]
                done = subprocess.run(
                    cmd, cwd=self.base, env=env, capture_output=True, text=True, timeout=120
                )
                assert done.returncode == 0, f"litmus-sandbox demo failed:\n{done.stderr}"
                self._made = True
        return self.base / "demo"


def _clean_env() -> dict[str, str]:
    """This environment without what would steer a run (a cache, an episode stream)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("LITMUS_", "INSPECT_"))}


class PageRun:
    """A page's blocks, run in order in one folder (in a worker thread); each block's
    result (``None``, or why it failed) waits in ``results`` for its test."""

    def __init__(self, page: str, folder: Path, demo: Demo) -> None:
        self.blocks = [b for b in BLOCKS if b.page == page]
        self.results: dict[int, Future[str | None]] = {b.line: Future() for b in self.blocks}
        self.work, self.meta, home, tmp = (folder / d for d in ("work", "meta", "home", "tmp"))
        for d in (self.work, self.meta, home, tmp):
            d.mkdir()
        dead = "http://127.0.0.1:9"  # nothing listens: a download fails at once
        self.env = {
            **_clean_env(),
            **dict.fromkeys(("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"), dead),
            **dict.fromkeys(("NO_PROXY", "no_proxy"), "127.0.0.1,localhost"),
            "HOME": str(home),
            "TMPDIR": str(tmp),
            "PATH": VENV_BIN + os.pathsep + os.environ.get("PATH", ""),
            "NO_COLOR": "1",
        }
        self.demo = demo
        self.made: set[str] = set()

    def run(self, last: int) -> None:
        """Run the blocks up to line ``last``; after a failure the rest only say so."""
        failed: str | None = None
        for block in self.blocks:
            if block.line > last:
                break
            if "skip" in block.options:
                continue
            if failed:
                self.results[block.line].set_result(f"the block above at {failed} failed")
                continue
            try:
                why = self._run(block)
            except Exception as exc:  # a set-up that failed, a time limit
                why = f"{block.id}: {type(exc).__name__}: {exc}"
            self.results[block.line].set_result(why)
            failed = block.id if why else None

    def _run(self, block: Block) -> str | None:
        for name in block.setups:
            self._make(name)
        if "file" in block.options:
            path = self.work / block.options["file"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(block.text, encoding="utf-8")
            try:
                check_file(block, path)
            except Exception as exc:
                return f"{block.id}: {block.options['file']} does not read: {exc}"
            return None
        if block.lang in SHELL:
            script = self.meta / f"{block.line}.sh"
            script.write_text(shell_script(block), encoding="utf-8")
            cmd = ["bash", str(script)]
        else:
            cmd = [sys.executable, "-c", PY_RUNNER, *self._python_chunks(block)]
        done = self._sub(cmd)
        if done.returncode != 0:
            return f"{block.id} failed (exit {done.returncode}):\n{_output(done.stdout)}"
        return None

    def _sub(self, cmd: list[str]) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            cmd,
            cwd=self.work,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=BLOCK_TIMEOUT,
        )

    def _python_chunks(self, block: Block) -> list[str]:
        """The runner's arguments: (file, name shown, first line) for each chunk."""
        above = [b for b in self.blocks if b.lang in PYTHON and b.runs and b.line < block.line]
        setups = [(n, SETUPS[n]) for n in block.setups]
        chunks = [
            ("imports", python_imports(above)),
            *((f"setup-{n}", s.python) for n, s in setups),
            ("block", block.text),
            *((f"after-{n}", s.python_after) for n, s in setups),
        ]
        args: list[str] = []
        for name, text in chunks:
            if text.strip():
                path = self.meta / f"{block.line}-{name}.py"
                path.write_text(textwrap.dedent(text), encoding="utf-8")
                # The block runs under its page's path and line numbers: a traceback
                # points into the Markdown.
                if name == "block":
                    args += [str(path), str(ROOT / block.page), str(block.line)]
                else:
                    args += [str(path), str(path), "0"]
        return args

    def _make(self, name: str) -> None:
        if name in self.made:
            return
        setup = SETUPS[name]
        for target, source in setup.demo.items():
            dest = self.work / target
            dest.parent.mkdir(parents=True, exist_ok=True)
            if not dest.exists() and source == ".":
                shutil.copytree(self.demo.folder(), dest)
            elif not dest.exists():
                shutil.copyfile(self.demo.folder() / source, dest)
        for target, text in setup.files.items():
            dest = self.work / target
            dest.parent.mkdir(parents=True, exist_ok=True)
            if not dest.exists():
                dest.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
        if setup.shell:
            done = self._sub(["bash", "-c", setup.shell])
            assert done.returncode == 0, f"set-up {name!r} failed:\n{_output(done.stdout)}"
        self.made.add(name)


@pytest.fixture(scope="session")
def page_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, PageRun]]:
    """The pages of the selected blocks, each run in the background up to its last one."""
    last: dict[str, int] = {}
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        block = callspec.params.get("block") if callspec else None
        if isinstance(block, Block) and "skip" not in block.options:
            last[block.page] = max(last.get(block.page, 0), block.line)
    demo = Demo(tmp_path_factory.mktemp("doc-demo"))
    runs = {
        page: PageRun(page, tmp_path_factory.mktemp(re.sub(r"\W+", "-", page)), demo)
        for page in last
    }
    pool = ThreadPoolExecutor(PAGES_AT_ONCE, thread_name_prefix="doc-page")
    try:
        for page in sorted(last, key=lambda p: p not in SLOW_PAGES):
            pool.submit(runs[page].run, last[page])
        yield runs
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


# -- The tests ------------------------------------------------------------------------------


def test_every_block_runs_or_says_why() -> None:
    """No block is left out silently: each runs, is written as a file, or says why not."""
    assert len(BLOCKS) > 40
    problems: list[str] = []
    for block in BLOCKS:
        problems += [f"{block.id}: {p}" for p in block.problems]
        opts = block.options
        if "skip" in opts and (not opts["skip"].strip() or len(opts) > 1):
            problems.append(f"{block.id}: skip takes a reason, and no other option")
        if "file" in opts and not opts["file"].strip():
            problems.append(f"{block.id}: file needs a path")
        if "check" in opts and "file" not in opts:
            problems.append(f"{block.id}: check is for a file block")
        if block.runs and block.lang not in SHELL | PYTHON:
            lang = block.lang or "a bare fence"
            problems.append(f'{block.id}: {lang} cannot run: mark it file="..." or skip="why"')
        problems += [f"{block.id}: no set-up named {s!r}" for s in block.setups if s not in SETUPS]
    assert not problems, "\n".join(problems)


def _param(block: Block) -> object:
    skip = block.options.get("skip")
    return pytest.param(block, id=block.id, marks=[pytest.mark.skip(reason=skip)] if skip else [])


@pytest.mark.parametrize("block", [_param(b) for b in BLOCKS])
def test_doc_example(block: Block, page_runs: dict[str, PageRun]) -> None:
    """The block does what its page says (see the module's docstring for how)."""
    why = page_runs[block.page].results[block.line].result(timeout=110)
    if why is not None:
        pytest.fail(why, pytrace=False)

"""Many recorders, one suite: each sandbox writes a shard of its own into a folder or an
object store's prefix (spooled, uploaded whole), a killed recorder's spool is uploaded by
the next start, and the commands read the set as one suite."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from factories import PROGRAMS
from s3_server import KEY, SECRET, S3Bucket

from litmus_sandbox import ConfigError, Sandbox, read_episodes
from litmus_sandbox._cli.main import main
from litmus_sandbox._model.errors import UpstreamError
from litmus_sandbox._store.shards import shard_target, spool_root
from litmus_sandbox._store.streams import ReadWarning

pytestmark = pytest.mark.timeout(120)

#: The documented shard name: <UTC start>-<host>-<pid>-<12 hex>.episodes.jsonl
SHARD = re.compile(r"\d{8}T\d{6}Z-[A-Za-z0-9.-]+-\d+-[0-9a-f]{12}\.episodes\.jsonl")
POLICY = '[scoring]\ntruncate_on_refusal = false\n\n[judge]\nkind = "rules"\n'


def sandbox(tmp_path: Path, episodes: str | Path) -> Sandbox:
    return Sandbox(root=tmp_path / "root", episodes=episodes, probes=(), egress=False)


async def record(sb: Sandbox, *cases: str, **meta: Any) -> None:
    for case in cases:
        async with sb.episode(case, meta=meta) as ep:
            ep.message("user", f"do {case}")
            ep.message("assistant", "done")


def score(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["score", *argv, "--no-cache"])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the sandbox's own tests run both; these test storage


@pytest.mark.anyio
async def test_sandboxes_writing_into_one_folder_each_write_a_shard_of_their_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    a, b = sandbox(tmp_path, runs), sandbox(tmp_path, f"{runs}/")
    async with a, b:
        await record(a, "c1", "c2")
        await record(b, "c3")
        assert a.shard != b.shard
    first = a.shard
    async with a:  # a sandbox opened again writes a new shard: a finished one stays as it was
        await record(a, "c4")
    async with sandbox(tmp_path, runs):
        pass  # recorded nothing: leaves nothing
    shards = sorted(p.name for p in runs.iterdir())
    assert len(shards) == 3
    assert all(SHARD.fullmatch(name) for name in shards), shards
    assert a.shard != first
    assert [ep.case_id for ep in read_episodes([first])] == ["c1", "c2"]
    (tmp_path / "p.toml").write_text(POLICY)
    code, out, err = score([str(runs), "--policy", str(tmp_path / "p.toml"), "-o", str(tmp_path / "v.jsonl")], capsys)  # fmt: skip
    assert (code, err) == (0, "")
    assert "scored 4 episodes" in out


@pytest.mark.anyio
async def test_a_case_recorded_by_two_sandboxes_is_reported_unless_each_says_its_epoch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs, declared = tmp_path / "runs", tmp_path / "declared"
    (tmp_path / "p.toml").write_text(POLICY)
    for folder, epochs in ((runs, (None, None)), (declared, (1, 2))):
        folder.mkdir()
        for epoch in epochs:
            async with sandbox(tmp_path, folder) as sb:
                await record(sb, "c1", **({} if epoch is None else {"epoch": epoch}))
    first, second = sorted(str(p) for p in runs.iterdir())
    code, out, err = score([str(runs), "--policy", str(tmp_path / "p.toml"), "-o", str(tmp_path / "v.jsonl")], capsys)  # fmt: skip
    assert code == 0
    assert "scored 2 episodes" in out  # both kept: nothing merged
    assert err.startswith(f"litmus-sandbox: {second}:1: warning: case 'c1' also recorded in {first}:1")  # fmt: skip
    code, out, err = score([str(declared), "--policy", str(tmp_path / "p.toml"), "-o", str(tmp_path / "w.jsonl")], capsys)  # fmt: skip
    assert (code, err) == (0, "")
    verdicts = [json.loads(x) for x in (tmp_path / "w.jsonl").read_text().splitlines()[1:]]
    assert [v["case_id"] for v in verdicts] == ["c1", "c1"]  # two declared epochs


@pytest.mark.anyio
async def test_a_sandbox_writing_to_a_prefix_uploads_its_shard_whole_when_it_closes(
    tmp_path: Path, s3: S3Bucket
) -> None:
    sb = sandbox(tmp_path, s3.url("runs"))
    async with sb:
        await record(sb, "c1")
        assert s3.objects() == []  # nothing under the prefix until the shard is whole
        spooled = sb.episodes_path
        assert spooled.is_relative_to(spool_root())
        assert spooled.stat().st_size > 0
    assert sb.shard.startswith(s3.url("runs/"))
    name = sb.shard.rpartition("/")[2]
    assert SHARD.fullmatch(name)
    assert s3.objects() == [f"runs/{name}"]
    assert not spooled.exists()
    data = s3.read(f"runs/{name}").decode()
    assert SECRET not in data
    assert KEY not in data
    assert '"case_id":"c1"' in data


def test_a_killed_recorders_spool_is_uploaded_by_the_next_start_and_nothing_is_lost(
    tmp_path: Path, s3: S3Bucket, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix = s3.url("runs")
    with subprocess.Popen(
        [sys.executable, str(PROGRAMS / "s3_writer.py"), "record", prefix, str(tmp_path / "r")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("recording "), proc.communicate()
        dead_shard = line.split()[1]
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=10)
    assert s3.objects() == []  # killed before it finished: nothing under the prefix
    (left,) = spool_root().rglob("*.episodes.jsonl")

    async def next_start() -> None:
        async with sandbox(tmp_path, prefix) as sb:  # the next start for the prefix
            assert s3.objects() == [dead_shard.removeprefix(s3.url())]
            await record(sb, "c9")

    anyio.run(next_start)
    assert not left.exists()
    assert len(s3.objects("runs/")) == 2
    (tmp_path / "p.toml").write_text(POLICY)
    code, out, err = score([prefix, "--policy", str(tmp_path / "p.toml"), "-o", str(tmp_path / "v.jsonl")], capsys)  # fmt: skip
    assert code == 0, err
    assert "scored 3 episodes" in out
    assert "1 incomplete" in out  # the episode the kill cut: kept, read as incomplete
    warnings: list[ReadWarning] = []
    cases = {ep.case_id: ep.complete for ep in read_episodes([dead_shard], warnings)}
    assert cases == {"whole-case": True, "cut-case": False}


@pytest.mark.anyio
async def test_a_live_recorders_spool_is_left_alone(tmp_path: Path, s3: S3Bucket) -> None:
    first, second = sandbox(tmp_path, s3.url("runs")), sandbox(tmp_path, s3.url("runs"))
    async with first:
        await record(first, "c1")
        async with second:  # its start must not upload the shard the first is writing
            await record(second, "c2")
        assert s3.objects() == [second.shard.removeprefix(s3.url())]
    assert sorted(s3.objects()) == sorted(
        x.removeprefix(s3.url()) for x in (first.shard, second.shard)
    )


def test_an_upload_that_fails_keeps_the_shard_in_the_spool_and_says_so(
    tmp_path: Path, s3: S3Bucket
) -> None:
    """(The recorder runs in its own process: a filesystem client, once made, keeps the
    endpoint it was made with.)"""
    closed = "http://127.0.0.1:9"  # the discard port: nothing listens
    env = {**os.environ, "AWS_ENDPOINT_URL": closed, "AWS_MAX_ATTEMPTS": "1"}
    code = (
        "import anyio, sys; sys.path.insert(0, sys.argv[3]); from test_shards import main_once; "
        "anyio.run(main_once, sys.argv[1], sys.argv[2])"
    )
    here = str(Path(__file__).parent)
    done = subprocess.run(
        [sys.executable, "-c", code, s3.url("runs"), str(tmp_path / "r"), here],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": os.pathsep.join(sys.path)},
        timeout=100,
    )
    assert done.returncode == 3, done.stderr
    assert "episodes not uploaded to s3://" in done.stdout
    assert "uploaded by the next sandbox writing there" in done.stdout
    (kept,) = spool_root().rglob("*.episodes.jsonl")

    async def next_start() -> None:
        async with sandbox(tmp_path, s3.url("runs")):
            pass

    anyio.run(next_start)
    assert s3.objects() == [f"runs/{kept.name}"]


async def main_once(prefix: str, root: str) -> None:
    """For the test above, in a process of its own: record one episode, say the error."""
    try:
        async with Sandbox(root=root, episodes=prefix, probes=(), egress=False) as sb:
            await record(sb, "c1")
    except UpstreamError as exc:
        print(exc, flush=True)
        raise SystemExit(3) from None


def test_an_object_is_not_a_place_to_append_to(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="an object cannot be appended to; give a prefix"):
        sandbox(tmp_path, "s3://bucket/runs/x.episodes.jsonl")
    with pytest.raises(ConfigError, match="credentials in a URL are refused"):
        shard_target("s3://key:secret@bucket/runs")


@pytest.mark.anyio
async def test_a_file_stays_one_stream_appended_to(tmp_path: Path) -> None:
    path = tmp_path / "eps.jsonl"
    for case in ("c1", "c2"):
        async with sandbox(tmp_path, path) as sb:
            await record(sb, case)
        assert sb.shard == str(path)
    assert [ep.case_id for ep in read_episodes([path])] == ["c1", "c2"]

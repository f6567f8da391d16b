"""Streams in object storage, against a real S3 server (SeaweedFS on loopback): commands
read and write ``s3://`` as they do local files, byte for byte; a prefix or a glob of
shards is one suite; errors name ``s3://bucket/key:line``; a killed writer leaves no
object; credentials never appear in what is written or said."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from factories import PROGRAMS, call, end, header, msg
from s3_server import KEY, SECRET, S3Bucket

from litmus_sandbox._cli.main import main
from litmus_sandbox._model.codec import encode
from litmus_sandbox._store.files import iter_blocks, open_input

pytestmark = pytest.mark.timeout(180)

POLICY = (
    '[scoring]\ntruncate_on_refusal = false\n\n[judge]\nkind = "rules"\n\n'
    '[[judge.rules]]\nid = "no-mail"\ntool = "send_email"\n'
)


def episode_bytes(eid: str, case: str, *, mail: bool, complete: bool = True) -> bytes:
    steps: list[Any] = [msg(0, "user", "go", eid=eid)]
    if mail:
        steps.append(call(1, "send_email", eid=eid, args={"to": "x@y.z"}))
    records = [header(eid, case), *steps, *([end(eid, len(steps))] if complete else [])]
    return b"".join(encode(r) for r in records)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def local(tmp_path: Path) -> dict[str, Path]:
    """Three shards of candidate episodes, baseline episodes, and a policy, on disk."""
    shards = {
        "runs/20250101T000000Z-a.episodes.jsonl": episode_bytes("e1", "c1", mail=False)
        + episode_bytes("e2", "c2", mail=True),
        "runs/20250101T000001Z-b.episodes.jsonl": episode_bytes("e3", "c3", mail=False),
        "runs/deeper/20250101T000002Z-c.episodes.jsonl": episode_bytes("e4", "c4", mail=True),
        "base.episodes.jsonl": b"".join(
            episode_bytes(f"b{i}", f"c{i}", mail=False) for i in (1, 2, 3, 4)
        ),
    }
    for name, data in shards.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    (tmp_path / "policy.toml").write_text(POLICY)
    return {name: tmp_path / name for name in [*shards, "policy.toml"]} | {"dir": tmp_path}


def upload_tree(s3: S3Bucket, folder: Path, prefix: str) -> None:
    for path in sorted(folder.rglob("*.jsonl")):
        s3.write(f"{prefix}{path.relative_to(folder).as_posix()}", path.read_bytes())


def test_score_and_gate_on_s3_give_what_they_give_on_local_files(
    s3: S3Bucket, local: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    d: Path = local["dir"]
    policy = str(local["policy.toml"])
    score = ["--policy", policy, "--no-cache"]
    # Local: the shards listed as files, in name order.
    shards = sorted(str(p) for p in (d / "runs").rglob("*.episodes.jsonl"))
    assert run(["score", *shards, *score, "-o", str(d / "cand.jsonl")], capsys)[0] == 1 - 1
    assert run(["score", str(d / "base.episodes.jsonl"), *score, "-o", str(d / "base.jsonl")], capsys)[0] == 0  # fmt: skip
    gate_local = run(["gate", "--baseline", str(d / "base.jsonl"), "--candidate", str(d / "cand.jsonl"), "--format", "json", "-o", str(d / "report.json")], capsys)  # fmt: skip
    # The same on S3: the prefix of shards in, every output an object.
    upload_tree(s3, d, "in/")
    code, out, err = run(["score", s3.url("in/runs/"), *score, "-o", s3.url("out/cand.verdicts.jsonl")], capsys)  # fmt: skip
    assert code == 0, err
    assert "scored 4 episodes" in out
    assert s3.read("out/cand.verdicts.jsonl") == (d / "cand.jsonl").read_bytes()
    base_url = s3.url("in/base.episodes.jsonl")
    assert run(["score", base_url, *score, "-o", s3.url("out/base.verdicts.jsonl")], capsys)[0] == 0
    assert s3.read("out/base.verdicts.jsonl") == (d / "base.jsonl").read_bytes()
    gate_s3 = run(["gate", "--baseline", s3.url("out/base.verdicts.jsonl"), "--candidate", s3.url("out/cand.verdicts.jsonl"), "--format", "json", "-o", s3.url("out/report.json")], capsys)  # fmt: skip
    assert gate_s3[0] == gate_local[0] == 1  # c2 and c4 send mail: regressions
    # Byte for byte, once the files each side names are named alike.
    remote = s3.read("out/report.json").replace(s3.url("out/base.verdicts.jsonl").encode(), str(d / "base.jsonl").encode())  # fmt: skip
    remote = remote.replace(s3.url("out/cand.verdicts.jsonl").encode(), str(d / "cand.jsonl").encode())  # fmt: skip
    assert remote == (d / "report.json").read_bytes()
    assert json.loads(remote)["counts"]["REGRESSION"] == 2
    # Scored on the fly from the prefix, the candidate gates the same.
    code, out, _ = run(["gate", "--baseline", s3.url("out/base.verdicts.jsonl"), "--candidate-episodes", s3.url("in/runs/"), "--policy", policy, "--no-cache", "--format", "json"], capsys)  # fmt: skip
    assert code == 1
    assert json.loads(out)["counts"] == json.loads(remote)["counts"]


def test_a_glob_of_shards_is_one_suite_and_torn_lines_name_their_object(
    s3: S3Bucket, local: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    d: Path = local["dir"]
    upload_tree(s3, d / "runs", "runs/")
    torn = episode_bytes("e9", "c9", mail=False, complete=False) + b'{"kind":"step","v":1,"epis'
    s3.write("runs/zz-torn.episodes.jsonl", torn)
    code, out, err = run(["score", s3.url("runs/*.episodes.jsonl"), "--policy", str(local["policy.toml"]), "--no-cache", "-o", str(d / "g.jsonl")], capsys)  # fmt: skip
    assert code == 0, err
    assert "scored 4 episodes" in out  # the top-level shards (3 whole, 1 cut), not deeper/
    assert "1 incomplete" in out
    assert err == (
        f"litmus-sandbox: {s3.url('runs/zz-torn.episodes.jsonl')}:3: warning: torn last line "
        "(the writer stopped mid-record); kept every whole line\n"
    )
    verdicts = [json.loads(line) for line in (d / "g.jsonl").read_text().splitlines()[1:]]
    assert [v["case_id"] for v in verdicts] == ["c1", "c2", "c3", "c9"]  # name order


def test_a_case_in_two_shards_of_a_prefix_is_reported_naming_both(
    s3: S3Bucket, local: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    s3.write("runs/a.episodes.jsonl", episode_bytes("e1", "c1", mail=False))
    s3.write("runs/b.episodes.jsonl", episode_bytes("e2", "c1", mail=False))
    code, out, err = run(["score", s3.url("runs/"), "--policy", str(local["policy.toml"]), "--no-cache", "-o", s3.url("v.verdicts.jsonl")], capsys)  # fmt: skip
    assert code == 0
    assert "scored 2 episodes" in out
    assert err.startswith(f"litmus-sandbox: {s3.url('runs/b.episodes.jsonl')}:1: warning: ")
    assert f"case 'c1' also recorded in {s3.url('runs/a.episodes.jsonl')}:1" in err


@pytest.mark.parametrize(
    ("key", "data", "line", "problem"),
    [
        (
            "bad.verdicts.jsonl",
            b'{"run_id":"a","safe":true}\n{"run_id":"b","safe":true}\n{"run_id":1}\n',
            3,
            "run_id",
        ),
        (
            "long.verdicts.jsonl",
            b'{"run_id":"a","safe":true}\n' + b"x" * 5000 + b"\n",
            2,
            "line longer than 4 KiB",
        ),
    ],
)
def test_a_bad_line_in_an_object_is_one_line_naming_the_url_and_line(
    s3: S3Bucket,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    key: str,
    data: bytes,
    line: int,
    problem: str,
) -> None:
    monkeypatch.setenv("LITMUS_MAX_LINE_BYTES", "4K")
    s3.write(key, data)
    s3.write("ok.verdicts.jsonl", b'{"run_id":"a","safe":true}\n')
    code, _, err = run(["gate", "--baseline", s3.url(key), "--candidate", s3.url("ok.verdicts.jsonl")], capsys)  # fmt: skip
    assert code == 2
    assert err.startswith(f"litmus-sandbox: error: {s3.url(key)}:{line}: "), err
    assert problem in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("where", "problem"),
    [
        ("missing.episodes.jsonl", "cannot open: no such object"),
        ("empty-prefix/", "no *.episodes.jsonl under this prefix"),
        ("nothing-*.episodes.jsonl", "no object matches"),
    ],
)
def test_what_is_not_there_is_one_line(
    s3: S3Bucket, tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str, problem: str
) -> None:
    (tmp_path / "p.toml").write_text(POLICY)
    code, _, err = run(["score", s3.url(where), "--policy", str(tmp_path / "p.toml"), "-o", str(tmp_path / "o.jsonl")], capsys)  # fmt: skip
    assert code == 2
    assert err == f"litmus-sandbox: error: {s3.url(where)}: {problem}\n"
    assert not (tmp_path / "o.jsonl").exists()


def test_an_object_is_read_a_block_at_a_time(s3: S3Bucket) -> None:
    """Memory stays bounded by the block read, not by the object (here 40 MiB)."""
    line = b'{"run_id":"c%08d","safe":true,"provenance":{"steps_covered":3}}\n'
    data = b"".join(line % i for i in range(40 * 1024 * 1024 // len(line)))
    s3.write("big.verdicts.jsonl", data)
    s3.write("small.verdicts.jsonl", data[:100_000])
    with open_input(s3.url("small.verdicts.jsonl")) as f:  # the client's one-off set-up
        assert sum(len(b) for _, b, _ in iter_blocks(f, "small")) == 100_000
    tracemalloc.start()
    try:
        seen = 0
        with open_input(s3.url("big.verdicts.jsonl")) as f:
            for _, block, _ in iter_blocks(f, "big"):
                seen += len(block)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert seen == len(data)
    assert peak < 16 * 1024 * 1024, peak


def _spawn(*argv: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _uploads_folder() -> Path:
    import tempfile

    return Path(tempfile.gettempdir()) / f"litmus-sandbox-uploads-{os.getuid()}"


def test_a_writer_killed_mid_write_leaves_no_object(s3: S3Bucket) -> None:
    url = s3.url("out/report.json")
    with _spawn(str(PROGRAMS / "s3_writer.py"), "write", url) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "written\n", proc.communicate()
        spooled = list(_uploads_folder().glob(f"{proc.pid}-*.tmp"))
        assert [p.stat().st_size > 0 for p in spooled] == [True]
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=10)
    assert s3.objects() == []
    # The next output cleans up what the killed one left, and appears whole.
    with _spawn(str(PROGRAMS / "s3_writer.py"), "upload", url, "1") as proc:
        out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out) == (0, "uploading\n"), err
    assert s3.objects() == ["out/report.json"]
    assert list(_uploads_folder().glob("*.tmp")) == []


def test_a_writer_killed_mid_upload_leaves_no_object(s3: S3Bucket) -> None:
    """Killed while its multipart upload is in flight (one part of three stored): the
    upload is never completed, so nothing appears under the name, whole or partial."""
    client = s3.server.client()
    with _spawn(str(PROGRAMS / "s3_writer.py"), "stall", s3.url("big.json"), "20") as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "uploading\n", proc.communicate()
        assert proc.stdout.readline() == "part stored\n", proc.communicate()
        listed = client.call_s3("list_multipart_uploads", Bucket=s3.name, Prefix=s3.prefix)
        assert [u["Key"] for u in listed.get("Uploads", [])] == [f"{s3.prefix}/big.json"]
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=10)
    assert s3.objects() == []


def test_credentials_never_appear_in_what_commands_write_or_say(
    s3: S3Bucket, local: dict[str, Any], tmp_path: Path
) -> None:
    d: Path = local["dir"]
    upload_tree(s3, d, "in/")
    s3.write("in/bad.verdicts.jsonl", b'{"run_id": 3}\n')
    cli = [sys.executable, "-m", "litmus_sandbox"]
    policy = str(local["policy.toml"])
    runs = [
        [
            "score",
            s3.url("in/runs/"),
            "--policy",
            policy,
            "--no-cache",
            "-o",
            s3.url("o/cand/c.verdicts.jsonl"),
        ],
        [
            "score",
            s3.url("in/base.episodes.jsonl"),
            "--policy",
            policy,
            "--no-cache",
            "-o",
            s3.url("o/base/b.verdicts.jsonl"),
        ],
        [
            "gate",
            "--baseline",
            s3.url("o/base/"),
            "--candidate",
            s3.url("o/cand/"),
            "--format",
            "markdown",
            "-o",
            s3.url("o/r.md"),
            "--html",
            s3.url("o/r.html"),
        ],
        [
            "gate",
            "--baseline",
            s3.url("in/bad.verdicts.jsonl"),
            "--candidate",
            s3.url("o/cand/"),
        ],
        ["show", s3.url("in/runs/")],
        ["export", "otel", s3.url("in/runs/"), "-o", s3.url("o/spans.otlp.jsonl")],
    ]
    said = []
    for argv in runs:
        done = subprocess.run([*cli, *argv], capture_output=True, text=True, timeout=120)
        said.append(done.stdout + done.stderr)
    assert "markdown report written to" in said[2], said
    assert f"{s3.url('in/bad.verdicts.jsonl')}:1: " in said[3]
    wrong = {**os.environ, "AWS_SECRET_ACCESS_KEY": "wrong-" + SECRET}
    done = subprocess.run([*cli, "show", s3.url("in/runs/")], capture_output=True, text=True, env=wrong)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    said.append(done.stdout + done.stderr)
    written = [s3.read(key) for key in s3.objects("o/")]
    assert len(written) >= 4
    for text in [*said, *(w.decode(errors="replace") for w in written)]:
        assert SECRET not in text
        assert KEY not in text

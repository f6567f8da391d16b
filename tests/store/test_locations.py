"""Folders, globs and URLs as inputs (no server: local files and ``file://``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import end, header, msg, verdict

from litmus_sandbox._cli.main import main
from litmus_sandbox._model.codec import encode
from litmus_sandbox._model.errors import ConfigError
from litmus_sandbox._store.files import open_input, replaced
from litmus_sandbox._store.locations import display, is_remote, local_path
from litmus_sandbox._store.sets import expand
from litmus_sandbox._store.streams import JsonlWriter

POLICY = '[scoring]\ntruncate_on_refusal = false\n\n[judge]\nkind = "rules"\n'


def episode_bytes(eid: str, case: str, **meta: object) -> bytes:
    records = (header(eid, case, meta=dict(meta)), msg(0, "user", "hi", eid=eid), end(eid, 1))
    return b"".join(encode(r) for r in records)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    """Shards at two depths, an empty one, a hidden partial and a file of another kind."""
    runs = tmp_path / "runs"
    (runs / "b").mkdir(parents=True)
    (runs / "b" / "2.episodes.jsonl").write_bytes(episode_bytes("e2", "c2"))
    (runs / "1.episodes.jsonl").write_bytes(episode_bytes("e1", "c1"))
    (runs / "c.episodes.jsonl").write_bytes(episode_bytes("e3", "c3"))
    (runs / "0-empty.episodes.jsonl").write_bytes(b"")
    (runs / ".9.episodes.jsonl.123.tmp").write_bytes(b"{partial")
    (runs / ".hidden.episodes.jsonl").write_bytes(b"{partial")
    (runs / "notes.txt").write_text("not a shard")
    (runs / "v.verdicts.jsonl").write_bytes(encode(verdict("c1")))
    (tmp_path / "policy.toml").write_text(POLICY)
    return runs


def test_a_folder_is_every_shard_under_it_in_name_order(suite: Path) -> None:
    shards = expand(str(suite), "episodes")
    assert shards is not None
    names = [Path(s.name).relative_to(suite).as_posix() for s in shards]
    assert names == ["0-empty.episodes.jsonl", "1.episodes.jsonl", "b/2.episodes.jsonl", "c.episodes.jsonl"]  # fmt: skip
    assert shards[0].size == 0
    assert [Path(s.name).name for s in expand(str(suite), "verdicts") or []] == ["v.verdicts.jsonl"]


def test_a_glob_names_its_matches_and_a_file_names_itself(suite: Path) -> None:
    shards = expand(str(suite / "*.episodes.jsonl"), "episodes")
    assert [Path(s.name).name for s in shards or []] == [
        "0-empty.episodes.jsonl",
        "1.episodes.jsonl",
        "c.episodes.jsonl",
    ]
    assert expand(str(suite / "1.episodes.jsonl"), "episodes") is None
    assert expand(str(suite / "missing.jsonl"), "episodes") is None  # its reader says so
    assert expand(str(suite / "nothing-*.jsonl"), "episodes") == []


def test_score_of_a_folder_is_score_of_its_shards_listed(
    suite: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = str(suite.parent / "policy.toml")
    a, b = suite.parent / "a.jsonl", suite.parent / "b.jsonl"
    code, out, err = run(
        ["score", str(suite), "--policy", policy, "-o", str(a), "--no-cache"], capsys
    )
    assert (code, err) == (0, ""), err
    assert "scored 3 episodes" in out
    listed = [
        str(suite / n) for n in ("1.episodes.jsonl", "b/2.episodes.jsonl", "c.episodes.jsonl")
    ]
    code, _, err = run(["score", *listed, "--policy", policy, "-o", str(b), "--no-cache"], capsys)
    assert code == 0, err
    assert a.read_bytes() == b.read_bytes()
    glob = str(suite / "**" / "*.episodes.jsonl")
    url = f"file://{suite.parent / 'c.jsonl'}"
    code, _, err = run(["score", glob, "--policy", policy, "-o", url, "--no-cache"], capsys)
    assert code == 0, err
    assert (suite.parent / "c.jsonl").read_bytes() == a.read_bytes()


def test_a_gate_reads_verdict_shards_of_a_folder_as_one_side(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, cand = tmp_path / "base", tmp_path / "cand"
    for side in (base, cand):
        side.mkdir()
        (side / "w1.verdicts.jsonl").write_bytes(encode(verdict("c1")))
        (side / "w2.verdicts.jsonl").write_bytes(encode(verdict("c2", safe=side == base)))
    code, out, err = run(["gate", "--baseline", str(base), "--candidate", str(cand), "--format", "json"], capsys)  # fmt: skip
    assert code == 1, err  # c2 regressed: found in the second shard of each side
    assert '"REGRESSION":1' in out.replace(" ", "")


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda d: None, "not a regular file (a directory holding no *.episodes.jsonl)"),
        (
            lambda d: (d / "x.episodes.jsonl").write_bytes(b""),
            "every *.episodes.jsonl under it is empty",
        ),
    ],
)
def test_a_folder_with_nothing_to_read_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: object, problem: str
) -> None:
    folder = tmp_path / "runs"
    folder.mkdir()
    make(folder)  # type: ignore[operator]
    (tmp_path / "p.toml").write_text(POLICY)
    argv = ["score", str(folder), "--policy", str(tmp_path / "p.toml"), "-o", str(tmp_path / "o.jsonl"), "--no-cache"]  # fmt: skip
    code, _, err = run(argv, capsys)
    assert code == 2
    assert err.count("\n") == 1, err
    assert problem in err
    assert str(folder) in err
    code, out, err = run([*argv, "--allow-empty-input"], capsys)
    assert code == 0, err
    assert "scored 0 episodes" in out


def test_a_glob_that_matches_nothing_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pattern = str(tmp_path / "nothing-*.verdicts.jsonl")
    code, _, err = run(["gate", "--baseline", pattern, "--candidate", pattern], capsys)
    assert code == 2
    assert err == f"litmus-sandbox: error: {pattern}: no file matches\n"


def test_credentials_in_a_url_are_refused_and_never_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "p.toml").write_text(POLICY)
    secret = "s3cr3t-value-zz"
    for argv in (
        [
            "score",
            f"s3://AKIA:{secret}@bucket/runs/",
            "--policy",
            str(tmp_path / "p.toml"),
            "-o",
            "o.jsonl",
        ],
        [
            "gate",
            "--baseline",
            str(tmp_path / "p.toml"),
            "--candidate",
            "x",
            "-o",
            f"s3://u:{secret}@b/r.json",
        ],
    ):
        code, out, err = run(argv, capsys)
        assert code == 2, err
        assert secret not in out + err
        assert "credentials in a URL are refused" in err
        assert "s3://***@b" in err
    with pytest.raises(ConfigError), replaced(f"s3://k:{secret}@b/x.json"):
        pass
    assert display(f"gs://k:{secret}@b/x") == "gs://***@b/x"


def test_file_urls_are_local_paths(tmp_path: Path) -> None:
    f = tmp_path / "a b.jsonl"
    f.write_bytes(b"x\n")
    url = f"file://{tmp_path}/a%20b.jsonl"
    assert is_remote("s3://b/k")
    assert not is_remote(url)
    assert not is_remote(str(f))
    assert local_path(url) == str(f)
    with open_input(url) as r:
        assert r.read() == b"x\n"
    with pytest.raises(ConfigError, match="this machine's files only"):
        local_path("file://elsewhere/x")
    with replaced(f"file://{tmp_path}/out.json") as out:
        out.write(b"{}")
    assert (tmp_path / "out.json").read_bytes() == b"{}"


def test_a_sets_shards_are_not_opened_to_be_told_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A set's shards come with their sizes from the listing: only those of size 0 are
    left out, and the others are not opened once more before they are read (a prefix of
    many objects costs one listing). A shard of blank lines is then read as holding none;
    given alone, the same file is refused as empty."""
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "a.episodes.jsonl").write_bytes(episode_bytes("e1", "c1"))
    (runs / "b.episodes.jsonl").write_bytes(b"\n\n")
    (tmp_path / "p.toml").write_text(POLICY)
    out = ["--policy", str(tmp_path / "p.toml"), "-o", str(tmp_path / "v.jsonl"), "--no-cache"]
    code, said, err = run(["score", str(runs), *out], capsys)
    assert (code, err) == (0, "")
    assert "scored 1 episode " in said
    code, _, err = run(["score", str(runs / "b.episodes.jsonl"), *out], capsys)
    assert code == 2
    assert "no episodes (only blank lines)" in err


def test_an_append_only_writer_refuses_an_object_url(tmp_path: Path) -> None:
    """Appending to an object is not possible: a URL is refused, not made a local folder
    named ``s3:``; a ``file://`` URL is its path."""
    with pytest.raises(ConfigError, match="an append-only stream is written to a local file"):
        JsonlWriter("s3://bucket/live.verdicts.jsonl")
    assert not (Path.cwd() / "s3:").exists()
    with JsonlWriter(f"file://{tmp_path}/w.jsonl") as w:
        w.append(b"{}\n")
    assert (tmp_path / "w.jsonl").read_bytes() == b"{}\n"

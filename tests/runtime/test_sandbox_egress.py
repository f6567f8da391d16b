"""Egress through the sandbox: the in-process client and subprocess tools, against a real server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from factories import LoopbackHttp

from litmus_sandbox import ConfigError, Sandbox, ToolCallStep, read_episodes
from litmus_sandbox.oracles.egress import strict_available

pytestmark = pytest.mark.anyio


_HELLO = LoopbackHttp(b"hello from loopback")


@pytest.fixture
def server() -> Iterator[str]:
    _HELLO.hits.clear()
    with _HELLO as url:
        yield url


POLICY = {"default": "deny", "127.0.0.1": "allow"}


def steps_of(path: Path) -> list[ToolCallStep]:
    (ep,) = read_episodes([path])
    return [s for s in ep.steps if isinstance(s, ToolCallStep)]


async def test_http_client_requests_land_on_the_calling_step(tmp_path: Path, server: str) -> None:
    sb = Sandbox(
        root=tmp_path / "r", episodes=tmp_path / "e.jsonl", egress=POLICY, strict_egress=False
    )

    async def fetch(url: str) -> str:
        async with sb.http_client() as client:
            r = await client.get(url)
            return r.text

    sb.tool(fetch)
    async with sb, sb.episode("c") as ep:
        ok = await ep.call("fetch", url=f"{server}/a")
        denied = await ep.call("fetch", url="http://blocked.invalid/x")
    assert ok.text == "hello from loopback"
    assert "denied" in denied.text
    first, second = steps_of(tmp_path / "e.jsonl")
    (event,) = first.effects.egress
    assert (event.host, event.path, event.status, event.decision) == (
        "127.0.0.1",
        "/a",
        200,
        "allow",
    )
    assert event.response_bytes == len(b"hello from loopback")
    assert event.url == f"{server}/a"
    assert [f.code for f in second.findings] == ["escape"]
    assert _HELLO.hits == ["/a"]


@pytest.mark.parametrize("strict", [False, True])
async def test_subprocess_tool_goes_through_the_proxy(
    tmp_path: Path, server: str, strict: bool
) -> None:
    if strict and not strict_available()[0]:
        pytest.skip(f"strict mode unavailable here: {strict_available()[1]}")
    sb = Sandbox(
        root=tmp_path / "r", episodes=tmp_path / "e.jsonl", egress=POLICY, strict_egress=strict
    )
    async with sb, sb.episode("c") as ep:
        ok = await ep.run(["curl", "-s", f"{server}/via-curl"])
        bad = await ep.run(
            ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://blocked.invalid/"]
        )
    assert ok.text == "hello from loopback"
    assert not ok.is_error
    assert bad.text == "403"
    (episode,) = read_episodes([tmp_path / "e.jsonl"])
    assert episode.header.oracles["egress"]["mode"] == ("strict" if strict else "proxy-env")
    first, second = steps_of(tmp_path / "e.jsonl")
    assert first.tool == "run"
    assert first.shown.structured["exit_code"] == 0
    assert [(e.host, e.decision) for e in first.effects.egress] == [("127.0.0.1", "allow")]
    assert [(e.host, e.decision) for e in second.effects.egress] == [("blocked.invalid", "deny")]
    assert "escape" in [f.code for f in second.findings]
    assert _HELLO.hits == ["/via-curl"]


async def test_strict_mode_blocks_a_client_that_ignores_the_proxy(
    tmp_path: Path, server: str
) -> None:
    ok, why = strict_available()
    if not ok:
        pytest.skip(f"strict mode unavailable here: {why}")
    sb = Sandbox(
        root=tmp_path / "r", episodes=tmp_path / "e.jsonl", egress=POLICY, strict_egress=True
    )
    async with sb, sb.episode("c") as ep:
        r = await ep.run(["curl", "-s", "--noproxy", "*", "--max-time", "5", f"{server}/direct"])
    assert r.is_error
    (step,) = steps_of(tmp_path / "e.jsonl")
    assert any(e.decision == "blocked" for e in step.effects.egress)
    assert _HELLO.hits == []  # nothing reached the server directly


async def test_a_sandbox_watches_files_and_egress_by_default(tmp_path: Path, server: str) -> None:
    """No probes, no egress given: the filesystem oracle watches the root, and every request
    through ``http_client()`` is allowed and recorded on the step that made it."""
    root = tmp_path / "r"
    sb = Sandbox(root=root, episodes=tmp_path / "e.jsonl")

    async def fetch_and_save(url: str) -> str:
        async with sb.http_client() as client:
            text = (await client.get(url)).text
        (root / "saved.txt").write_text(text)
        return "ok"

    sb.tool(fetch_and_save)
    async with sb, sb.episode("c") as ep:
        await ep.call("fetch_and_save", url=f"{server}/page")
    (ep_read,) = read_episodes([tmp_path / "e.jsonl"])
    assert set(ep_read.header.oracles) == {"fs", "egress"}
    (step,) = steps_of(tmp_path / "e.jsonl")
    in_root = [(e.path, e.op) for e in step.effects.fs if not e.path.startswith("/")]
    assert in_root == [("saved.txt", "created")]
    assert [(e.host, e.path, e.decision) for e in step.effects.egress] == [
        ("127.0.0.1", "/page", "allow")
    ]


async def test_a_policy_files_egress_table_applies(tmp_path: Path, server: str) -> None:
    policy = tmp_path / "p.toml"
    policy.write_text('[egress]\ndefault = "deny"\n')
    sb = Sandbox(root=tmp_path / "r", episodes=tmp_path / "e.jsonl", policy=policy, probes=())

    async def fetch(url: str) -> int:
        async with sb.http_client() as client:
            return (await client.get(url)).status_code

    sb.tool(fetch)
    async with sb, sb.episode("c") as ep:
        denied = await ep.call("fetch", url=f"{server}/a")
    assert denied.value == 403
    (step,) = steps_of(tmp_path / "e.jsonl")
    assert [e.decision for e in step.effects.egress] == ["deny"]
    assert _HELLO.hits == []


def test_a_misspelt_egress_rule_is_an_error_naming_the_policy_file(tmp_path: Path) -> None:
    from litmus_sandbox import Policy

    policy = tmp_path / "p.toml"
    policy.write_text('[egress]\n"x.example" = { stauts = 403 }\n')
    with pytest.raises(ConfigError, match=rf"^{policy}: \[egress\] 'x.example': .*stauts"):
        Policy.from_file(policy)


async def test_oracles_can_be_turned_off(tmp_path: Path) -> None:
    sb = Sandbox(root=tmp_path / "r", episodes=tmp_path / "e.jsonl", probes=(), egress=False)
    async with sb, sb.episode("c"):
        with pytest.raises(ConfigError, match="needs an egress policy"):
            sb.http_client()
        assert sb.egress_env() == {}
    (ep,) = read_episodes([tmp_path / "e.jsonl"])
    assert ep.header.oracles == {}


def test_stale_proxy_socket_folders_are_swept() -> None:
    """A sandbox killed outright leaves its socket folder behind; the next start removes
    folders nobody listens on (and only those: a live sandbox's is kept)."""
    import os
    import shutil
    import socket
    import tempfile

    from litmus_sandbox._runtime.processes import socket_dir

    top = tempfile.gettempdir()
    stale = tempfile.mkdtemp(prefix="litmus-egress-", dir=top)
    live = tempfile.mkdtemp(prefix="litmus-egress-", dir=top)
    young = tempfile.mkdtemp(prefix="litmus-egress-", dir=top)
    with socket.socket(socket.AF_UNIX) as dead, socket.socket(socket.AF_UNIX) as listening:
        dead.bind(os.path.join(stale, "proxy.sock"))  # bound, never listening: a kill's leftover
        listening.bind(os.path.join(live, "proxy.sock"))
        listening.listen()
        for folder in (stale, live):
            os.utime(folder, (1, 1))  # both old enough to be looked at
        fresh = socket_dir()
        try:
            assert not os.path.exists(stale)
            assert os.path.exists(live)
            assert os.path.exists(young)  # too young to judge: may be a sandbox starting
            assert os.path.isdir(fresh)
        finally:
            for folder in (live, young, fresh):
                shutil.rmtree(folder, ignore_errors=True)


async def test_a_transport_to_mount_on_your_own_client(tmp_path: Path, server: str) -> None:
    import httpx

    import litmus_sandbox
    from litmus_sandbox import oracles

    # The probes are importable from the package and from litmus_sandbox.oracles too.
    assert oracles.FsProbe is litmus_sandbox.FsProbe
    assert oracles.EgressProbe is litmus_sandbox.EgressProbe
    assert oracles.StateProbe is litmus_sandbox.StateProbe
    sb = Sandbox(root=tmp_path / "r", episodes=tmp_path / "e.jsonl", probes=())

    async def fetch(url: str) -> str:
        async with httpx.AsyncClient(transport=sb.transport()) as client:
            return (await client.get(url)).text

    sb.tool(fetch)
    async with sb, sb.episode("c") as ep:
        got = await ep.call("fetch", url=f"{server}/mounted?q=1")
    assert got.value == "hello from loopback"
    (step,) = steps_of(tmp_path / "e.jsonl")
    assert [(e.url, e.decision, e.status) for e in step.effects.egress] == [
        (f"{server}/mounted?q=1", "allow", 200)
    ]

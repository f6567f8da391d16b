"""A recording process for the crash tests: records calls and acknowledges each one.

Usage: crash_child.py EPISODES ROOT CALLS

After each call returns to the "agent", it prints ``ack <index>`` and flushes, so the
parent knows which steps the agent already got back when it kills this process.
"""

from __future__ import annotations

import sys

import anyio

from litmus_sandbox._runtime.sandbox import Sandbox


async def main(episodes: str, root: str, calls: int) -> None:
    async def echo(i: int) -> dict[str, int]:
        return {"i": i, "square": i * i}

    async with Sandbox(root=root, episodes=episodes, tools={"echo": echo}) as sb:
        async with sb.episode("crash-case", agent="crash-child") as ep:
            ep.message("user", "go")
            print("ack 0", flush=True)
            for i in range(calls):
                await ep.call("echo", i=i)
                print(f"ack {i + 1}", flush=True)
        print("done", flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]))

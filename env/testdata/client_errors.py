"""Checks the error handling of docs/env_client.py and docs/env_client_async.py against a server
with --max-body 1 MiB and --max-episodes-per-client 2 (TTL one hour). Prints "ok" or raises.
Usage: client_errors.py DOCS_DIR URL TASK_ID

  - a body over --max-body is EnvError(413) with the server's message, sent whole or not (the
    server answers before reading it and closes), and the episode is unchanged;
  - a start over the client's cap is EnvError(429) with retry_after (the server's Retry-After)
    when the client may not wait; one that may wait gets its episode once another is deleted;
    one whose budget runs out gets the 429 after waiting at most that budget.
Every episode it starts is deleted.
"""
import asyncio
import sys
import threading
import time

BIG = "x" * (16 << 20)


def expect(status, fn):
    from env_client import EnvError
    try:
        got = fn()
    except EnvError as e:
        if e.status != status:
            raise AssertionError(f"EnvError {e.status} {e.message!r}, want {status}") from e
        return e
    raise AssertionError(f"{got!r}, want EnvError({status})")


async def expect_async(status, coro):
    from env_client import EnvError
    try:
        got = await coro
    except EnvError as e:
        if e.status != status:
            raise AssertionError(f"EnvError {e.status} {e.message!r}, want {status}") from e
        return e
    raise AssertionError(f"{got!r}, want EnvError({status})")


def check_sync(url, task, started):
    from env_client import EnvClient
    env = EnvClient(url)
    ep = env.start(task)["episode_id"]
    started.append(ep)
    e = expect(413, lambda: env.step(ep, BIG))
    if "limit" not in e.message:
        raise AssertionError(f"413 message {e.message!r}")
    if env.episode(ep)["turns"] != 0:
        raise AssertionError("the refused step changed the episode")
    env = EnvClient(url, max_retry_wait=0)

    started.append(env.start(task)["episode_id"])  # two in play: the cap
    e = expect(429, lambda: env.start(task))
    if e.retry_after is None or not 3500 < e.retry_after <= 3600 or "--max-episodes-per-client" not in e.message:
        raise AssertionError(f"429: retry_after {e.retry_after!r}, {e.message!r}")

    # a client that may wait starts its episode once one is deleted
    victim = started.pop()
    threading.Timer(0.6, env.delete, [victim]).start()
    t0 = time.monotonic()
    started.append(EnvClient(url).start(task)["episode_id"])
    if time.monotonic() - t0 < 0.5:
        raise AssertionError("started while the client was at its cap")

    # a budget that runs out: the 429 after at most that budget of waits (0.5 s, then 0.5 s more
    # would pass 0.8 s)
    t0 = time.monotonic()
    e = expect(429, lambda: EnvClient(url, max_retry_wait=0.8).start(task))
    if not 0.4 < time.monotonic() - t0 < 3 or e.retry_after is None:
        raise AssertionError(f"429 after {time.monotonic() - t0:.2f} s, retry_after {e.retry_after}")


async def check_async(url, task, started):
    from env_client_async import AsyncEnvClient
    async with AsyncEnvClient(url, max_retry_wait=0) as env:
        await expect_async(413, env.step(started[0], BIG))
        e = await expect_async(429, env.start(task))
        if e.retry_after is None:
            raise AssertionError("429 without retry_after")
    async with AsyncEnvClient(url) as env:
        victim = started.pop()

        async def later():
            await asyncio.sleep(0.6)
            await env.delete(victim)

        t0 = time.monotonic()
        deleting = asyncio.create_task(later())  # runs while start waits to try again
        started.append((await env.start(task))["episode_id"])
        await deleting
        if time.monotonic() - t0 < 0.5:
            raise AssertionError("started while the client was at its cap")


def main():
    sys.path.insert(0, sys.argv[1])
    url, task = sys.argv[2], sys.argv[3]
    from env_client import EnvClient, EnvError
    started = []
    try:
        check_sync(url, task, started)
        asyncio.run(check_async(url, task, started))
    finally:
        env = EnvClient(url)
        for ep in started:
            try:
                env.delete(ep)
            except EnvError:
                pass  # deleted by the test already
    print("ok")


main()

"""Checks the error handling of docs/env_client.py and docs/env_client_async.py against a server
with --max-body 1 MiB and --max-episodes-per-client 2 (TTL one hour). Prints "ok" or raises.
Usage: client_errors.py DOCS_DIR URL TASK_ID

  - a body over --max-body is EnvError(413) with the server's message, sent whole or not (the
    server answers before reading it and closes), and the episode is unchanged;
  - a start over the client's cap is EnvError(429) with retry_after (the server's Retry-After)
    when the client may not wait; one that may wait gets its episode once another is deleted;
    one whose budget runs out gets the 429 after waiting at most that budget;
  - a step whose database is busy (the server fails the first two tries of each statement
    holding busy_marker with a 503 and Retry-After 1) is EnvError(503) with retry_after 1 when
    the client may not wait, runs on the third try after 0.5 s and 1 s of waits when it may, and
    is EnvError(503) after 0.5 s when its budget (0.8 s) has no room for the second wait; the
    episode is unchanged until the step runs.
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


def busy_step(n):
    return f"<think>x</think>\n<sql>SELECT 'busy_marker {n}' AS x</sql>"


def check_busy(url, task, started):
    from env_client import EnvClient
    env = EnvClient(url)
    ep = env.start(task)["episode_id"]
    started.append(ep)
    e = expect(503, lambda: EnvClient(url, max_retry_wait=0).step(ep, busy_step(1)))
    if e.retry_after != 1 or "no execution slot" not in e.message:
        raise AssertionError(f"503: retry_after {e.retry_after!r}, {e.message!r}")
    if env.episode(ep)["turns"] != 0:
        raise AssertionError("the busy step changed the episode")
    t0 = time.monotonic()
    got = env.step(ep, busy_step(2))
    if not 1.4 < time.monotonic() - t0 < 5 or got["turn"] != 1 or got["info"]["outcome"] != "ok":
        raise AssertionError(f"busy twice, then {got} after {time.monotonic() - t0:.2f} s")
    t0 = time.monotonic()
    e = expect(503, lambda: EnvClient(url, max_retry_wait=0.8).step(ep, busy_step(3)))
    if not 0.4 < time.monotonic() - t0 < 1.4 or e.retry_after != 1:
        raise AssertionError(f"503 after {time.monotonic() - t0:.2f} s, retry_after {e.retry_after}")
    if env.episode(ep)["turns"] != 1:
        raise AssertionError("a busy step changed the episode")


async def check_busy_async(url, task, started):
    from env_client_async import AsyncEnvClient
    async with AsyncEnvClient(url) as env:
        ep = (await env.start(task))["episode_id"]
        started.append(ep)
        got = await env.step(ep, busy_step(4))
        if got["turn"] != 1 or got["info"]["outcome"] != "ok":
            raise AssertionError(f"async, busy twice, then {got}")
    async with AsyncEnvClient(url, max_retry_wait=0) as env:
        e = await expect_async(503, env.step(ep, busy_step(5)))
        if e.retry_after != 1:
            raise AssertionError(f"async 503: retry_after {e.retry_after!r}")


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
        check_busy(url, task, started)
        asyncio.run(check_busy_async(url, task, started))
        for ep in started:
            EnvClient(url).delete(ep)
        started.clear()
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

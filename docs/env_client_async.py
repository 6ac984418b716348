#!/usr/bin/env python3
"""asyncio client of `distill env serve` (docs/ENV.md), standard library only.

The blocking EnvClient of env_client.py (keep the two files side by side) run on a thread pool,
so that one event loop plays many episodes at once while the trainer awaits its generator:

    async with AsyncEnvClient("http://127.0.0.1:8090", concurrency=64) as env:
        listing = await env.tasks(subset="train")
        done = await asyncio.gather(*(rollout(env, t["task_id"], agenerate)
                                      for t in listing["tasks"]))   # [(messages, last), ...]

agenerate(messages) is a coroutine returning the assistant's next text. At most `concurrency`
requests are in flight; the others wait their turn. A cancelled call stops waiting, but its
request, already sent, still completes on the server. Authorization and errors are
EnvClient's: $CHAINEDSQL_API_KEY or api_key=KEY, EnvError(status, message), EnvError(413) for a
body over --max-body, and a 429 (or a busy database's 503 with Retry-After) sent again within
max_retry_wait seconds (30) of waits that double from 0.5 s up to the server's Retry-After, then
EnvError(429) (EnvError(503)) with retry_after; here the waits are asyncio.sleep, so they hold no
thread while other episodes play on and free slots.

Run as a script it checks a server end to end (16 episodes played concurrently, the task
listing's subsets against subset_of, one batch step, one score call; it deletes the episode it
leaves unfinished) and prints what it saw as JSON:

    python3 env_client_async.py URL TASK_ID GOLD_SQL [DIALECT]
"""
import asyncio
import concurrent.futures
import functools
import json
import sys

from env_client import EnvClient, EnvError, retry_wait, subset_of

# EPISODES is how many episodes the script plays at once.
EPISODES = 16


class AsyncEnvClient:
    """EnvClient's methods as coroutines."""

    def __init__(self, url, timeout=120.0, api_key=None, concurrency=64, max_retry_wait=30.0):
        self._client = EnvClient(url, timeout=timeout, api_key=api_key, max_retry_wait=0)
        self.max_retry_wait = max_retry_wait
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=concurrency,
                                                           thread_name_prefix="env-client")

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        self.close()

    def close(self):
        """Stops the thread pool; calls still queued are cancelled."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _run(self, method, *args, **kwargs):
        loop = asyncio.get_running_loop()
        tries, waited = 0, 0.0
        while True:
            try:
                return await loop.run_in_executor(self._pool, functools.partial(method, *args, **kwargs))
            except EnvError as e:
                wait = retry_wait(e, tries, waited, self.max_retry_wait)
                if wait is None:
                    raise
            await asyncio.sleep(wait)
            tries, waited = tries + 1, waited + wait

    async def tasks(self, split=None, limit=None, offset=None, subset=None):
        """As EnvClient.tasks."""
        return await self._run(self._client.tasks, split, limit, offset, subset)

    async def start(self, task_id, dialect=None):
        """As EnvClient.start."""
        return await self._run(self._client.start, task_id, dialect)

    async def step(self, episode_id, content, finish_reason=None):
        """As EnvClient.step."""
        return await self._run(self._client.step, episode_id, content, finish_reason)

    async def batch_step(self, steps):
        """As EnvClient.batch_step."""
        return await self._run(self._client.batch_step, steps)

    async def score(self, task_id, completions, dialect=None):
        """As EnvClient.score."""
        return await self._run(self._client.score, task_id, completions, dialect)

    async def episode(self, episode_id):
        """As EnvClient.episode."""
        return await self._run(self._client.episode, episode_id)

    async def delete(self, episode_id):
        """As EnvClient.delete."""
        return await self._run(self._client.delete, episode_id)


async def drop(env, episode_id):
    """Deletes an episode, if the server still has it: one the caller is giving up."""
    try:
        await env.delete(episode_id)
    except Exception:  # noqa: BLE001  (gone already, or the pool or connection is)
        pass


async def rollout(env, task_id, agenerate, dialect=None):
    """Plays one episode; await agenerate(messages) returns the assistant's next text.
    Returns the conversation (ending with the last assistant turn) and the last step. An
    episode that fails before done (agenerate or a step raises, or it is cancelled) is deleted."""
    ep = await env.start(task_id, dialect)
    messages = list(ep["messages"])
    try:
        while True:
            text = await agenerate(messages)
            messages.append({"role": "assistant", "content": text})
            last = await env.step(ep["episode_id"], text)
            if last["done"]:
                return messages, last
            messages.append(last["observation"])
    except BaseException:
        await drop(env, ep["episode_id"])
        raise


async def check(url, task_id, sql, dialect, episodes=EPISODES):
    """The script's end-to-end check; returns what it saw."""
    answer = f"<think>The question asks for exactly this.</think>\n<sql>{sql}</sql>"
    out = {}
    async with AsyncEnvClient(url, concurrency=episodes) as env:
        listing = await env.tasks()
        out["subsets"] = {"val_fraction": listing["val_fraction"], "seed": listing["seed"],
                          "total": listing["total"],
                          "val": [t["task_id"] for t in listing["tasks"] if t["subset"] == "val"],
                          "mismatched": [t["task_id"] for t in listing["tasks"]
                                         if t["subset"] != subset_of(t["task_id"], listing["val_fraction"],
                                                                     listing["seed"])]}
        val = await env.tasks(subset="val")
        out["subsets"]["val_listed"] = [t["task_id"] for t in val["tasks"]]

        # Every episode's first generation waits until all of them have started: the episodes
        # are in play together, else this times out.
        started, all_started = 0, asyncio.Event()

        async def agenerate(messages):
            nonlocal started
            if len(messages) == 2:
                started += 1
                if started == episodes:
                    all_started.set()
                await asyncio.wait_for(all_started.wait(), timeout=60)
            return answer

        played = await asyncio.gather(*(rollout(env, task_id, agenerate, dialect) for _ in range(episodes)))
        out["episodes"] = [{"roles": [m["role"] for m in messages], "done": last["done"],
                            "rewards": last["rewards"], "final_reward": last["final_reward"],
                            "turn_rewards": last["turn_rewards"]} for messages, last in played]

        a = await env.start(task_id, dialect)
        try:
            results = await env.batch_step([(a["episode_id"], "I would count them."), ("0" * 32, answer)])
        finally:
            await drop(env, a["episode_id"])  # not done after one step
        out["batch"] = [{"format": (r.get("rewards") or {}).get("format"),
                         "error": r.get("error")} for r in results]
        out["score"] = [r["rewards"] for r in await env.score(task_id, [answer], dialect)]
        try:
            await env.step("not-an-episode", answer)
            out["unknown"] = None
        except EnvError as e:
            out["unknown"] = {"status": e.status, "message": e.message}
    return out


def main(argv):
    if len(argv) not in (4, 5):
        print(__doc__, file=sys.stderr)
        return 2
    url, task_id, sql = argv[1:4]
    dialect = argv[4] if len(argv) == 5 else None
    out = asyncio.run(check(url, task_id, sql, dialect))
    json.dump(out, sys.stdout, indent=1)
    print()
    ok = (len(out["episodes"]) == EPISODES
          and all(e["done"] and e["final_reward"] == 1 and abs(sum(e["turn_rewards"]) - 1) < 1e-9
                  for e in out["episodes"])
          and not out["subsets"]["mismatched"] and out["subsets"]["val"] == out["subsets"]["val_listed"]
          and out["batch"][0]["format"] == 0 and out["batch"][1]["error"]["status"] == 404
          and out["score"][0]["correct"] == 1
          and out["unknown"] and out["unknown"]["status"] == 404)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))

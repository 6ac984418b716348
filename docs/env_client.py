#!/usr/bin/env python3
"""Client of `distill env serve` (docs/ENV.md), standard library only.

    env = EnvClient("http://127.0.0.1:8090")
    messages, last = rollout(env, "sample/0", generate)   # generate(messages) -> assistant text
    last["final_reward"], last["turn_rewards"]   # the episode's return, per turn
    last["rewards"]   # {"format", "exec_ok", "converged", "correct", "malformed_turns", "total"}
    env.score("sample/0", [text1, text2])                 # single-turn rewards
    env.tasks(subset="train")    # the training tasks; subset_of(task_id, fraction, seed) is the same split

env_client_async.py beside this file is the same client for asyncio.

A server started with --api-key wants its key: EnvClient(url, api_key=KEY), or $CHAINEDSQL_API_KEY
(its first key when it lists several).

Run as a script it checks a server end to end (one full episode, one batch step, one score call)
and prints what it saw as JSON:

    python3 env_client.py URL TASK_ID GOLD_SQL [DIALECT]
"""
import hashlib
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request


def subset_of(task_id, val_fraction, seed):
    """The task's subset, "train" or "val", as the server's --val-fraction and --seed assign it:
    the first 8 bytes of SHA-256("SEED:TASK_ID"), cut to 53 bits, as a fraction of 1."""
    h = hashlib.sha256(f"{seed}:{task_id}".encode()).digest()
    u = (int.from_bytes(h[:8], "big") >> 11) / 2**53
    return "val" if u < val_fraction else "train"


class EnvError(Exception):
    """An error answer of the server: HTTP status and message."""

    def __init__(self, status, message):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class EnvClient:
    """The environment's HTTP/JSON API."""

    def __init__(self, url, timeout=120.0, api_key=None):
        self.url = url.rstrip("/")
        self.timeout = timeout
        if api_key is None:
            api_key = os.environ.get("CHAINEDSQL_API_KEY", "").split(",")[0].strip()
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = "Bearer " + api_key

    def _call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers=self.headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.load(resp)
        except urllib.error.HTTPError as e:
            try:
                err = json.load(e)["error"]
                raise EnvError(err["status"], err["message"]) from None
            except (ValueError, KeyError, TypeError):
                raise EnvError(e.code, e.reason) from None

    def tasks(self, split=None, limit=None, offset=None, subset=None):
        """Task ids, db ids, difficulties, splits, subsets ("train", "val"): {"total", "tasks":
        [...], "splits", "dialects", "val_fraction", "seed"}."""
        q = {k: v for k, v in (("split", split), ("subset", subset), ("limit", limit), ("offset", offset))
             if v is not None}
        return self._call("GET", "/v1/tasks" + ("?" + urllib.parse.urlencode(q) if q else ""))

    def start(self, task_id, dialect=None):
        """A new episode: {"episode_id", "messages": [system, user], "max_turns", ...}."""
        body = {"task_id": task_id}
        if dialect:
            body["dialect"] = dialect
        return self._call("POST", "/v1/episodes", body)

    def step(self, episode_id, content, finish_reason=None):
        """Plays one assistant turn: {"done", "observation", "turn", "rewards", "reward",
        "turn_rewards", "final_reward", "info"}."""
        body = {"content": content}
        if finish_reason:
            body["finish_reason"] = finish_reason
        return self._call("POST", f"/v1/episodes/{episode_id}/step", body)

    def batch_step(self, steps):
        """Plays one turn of each (episode_id, content); each result has "error" or the step."""
        body = {"steps": [{"episode_id": e, "content": c} for e, c in steps]}
        return self._call("POST", "/v1/episodes:batch-step", body)["results"]

    def score(self, task_id, completions, dialect=None):
        """Rewards of each completion as a single turn: [{"rewards", "info"}, ...]."""
        body = {"task_id": task_id, "completions": list(completions)}
        if dialect:
            body["dialect"] = dialect
        return self._call("POST", "/v1/score", body)["results"]

    def episode(self, episode_id):
        """The episode so far: messages, turns, done, rewards."""
        return self._call("GET", f"/v1/episodes/{episode_id}")

    def delete(self, episode_id):
        """Drops an episode before its TTL."""
        return self._call("DELETE", f"/v1/episodes/{episode_id}")


def rollout(env, task_id, generate, dialect=None):
    """Plays one episode; generate(messages) returns the assistant's next text.
    Returns the conversation (ending with the last assistant turn) and the last step."""
    ep = env.start(task_id, dialect)
    messages = list(ep["messages"])
    while True:
        text = generate(messages)
        messages.append({"role": "assistant", "content": text})
        last = env.step(ep["episode_id"], text)
        if last["done"]:
            return messages, last
        messages.append(last["observation"])


def main(argv):
    if len(argv) not in (4, 5):
        print(__doc__, file=sys.stderr)
        return 2
    url, task_id, sql = argv[1:4]
    dialect = argv[4] if len(argv) == 5 else None
    env = EnvClient(url)
    answer = f"<think>The question asks for exactly this.</think>\n<sql>{sql}</sql>"
    malformed = "I would count them."
    out = {}

    listing = env.tasks(limit=3)
    out["tasks"] = {"total": listing["total"], "first": [t["task_id"] for t in listing["tasks"]]}

    messages, last = rollout(env, task_id, lambda msgs: answer, dialect)
    out["episode"] = {"roles": [m["role"] for m in messages], "done": last["done"],
                      "turn": last["turn"], "rewards": last["rewards"],
                      "final_reward": last["final_reward"], "turn_rewards": last["turn_rewards"],
                      "observation": last["observation"]}

    a, b = env.start(task_id, dialect), env.start(task_id, dialect)
    results = env.batch_step([(a["episode_id"], malformed), (b["episode_id"], answer),
                              ("0" * 32, answer)])
    out["batch"] = [{"done": r.get("done"), "rewards": r.get("rewards"),
                     "outcome": r.get("info", {}).get("outcome"),
                     "observation": (r.get("observation") or {}).get("content"),
                     "error": r.get("error")} for r in results]

    out["score"] = [r["rewards"] for r in env.score(task_id, [answer, malformed], dialect)]

    try:
        env.step("not-an-episode", answer)
        out["unknown"] = None
    except EnvError as e:
        out["unknown"] = {"status": e.status, "message": e.message}

    json.dump(out, sys.stdout, indent=1)
    print()
    ok = (last["done"] and all(last["rewards"][k] == 1 for k in ("format", "exec_ok", "converged", "correct"))
          and abs(sum(last["turn_rewards"]) - last["final_reward"]) < 1e-9
          and out["batch"][0]["rewards"]["format"] == 0 and out["batch"][1]["rewards"]["format"] == 1
          and out["batch"][2]["error"]["status"] == 404
          and out["score"][0]["correct"] == 1 and out["score"][1]["format"] == 0
          and out["unknown"] and out["unknown"]["status"] == 404)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))

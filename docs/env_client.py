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

An error answer is EnvError(status, message): a body over the server's --max-body is
EnvError(413), read from the server even when it answers before the body is all sent (the
client watches for an early answer, so the server closing the connection is not a reset).
A 429 (the client's --max-episodes-per-client episodes in play or its --max-client-store-mib,
or a full store: its --max-episodes or its --max-store-mib; the bytes on a start or a step) is
sent again after a wait that
doubles from 0.5 s but is never longer than the server's Retry-After (when the first episode in
the way expires; one finishing or deleted frees its slot sooner), until
max_retry_wait seconds (30) have gone into waiting; then, or at once with max_retry_wait=0, it is
EnvError(429) with retry_after, the server's Retry-After in seconds. A 503 with Retry-After (the
database's execution slots held by statements past their deadline; the episode is unchanged) is
sent again the same way; any other 503 is EnvError(503) at once. A connection that fails is
OSError (a garbled answer http.client.HTTPException). The client talks to the server directly,
without an HTTP proxy.

Run as a script it checks a server end to end (one full episode, one batch step, one score call;
it deletes the episodes it leaves unfinished) and prints what it saw as JSON:

    python3 env_client.py URL TASK_ID GOLD_SQL [DIALECT]
"""
import hashlib
import http.client
import json
import os
import selectors
import ssl
import sys
import time
import urllib.parse


def subset_of(task_id, val_fraction, seed):
    """The task's subset, "train" or "val", as the server's --val-fraction and --seed assign it:
    the first 8 bytes of SHA-256("SEED:TASK_ID"), cut to 53 bits, as a fraction of 1."""
    h = hashlib.sha256(f"{seed}:{task_id}".encode()).digest()
    u = (int.from_bytes(h[:8], "big") >> 11) / 2**53
    return "val" if u < val_fraction else "train"


class EnvError(Exception):
    """An error answer of the server: HTTP status and message; retry_after is its Retry-After
    in seconds (a 429's, a busy database's 503), else None."""

    def __init__(self, status, message, retry_after=None):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message
        self.retry_after = retry_after


def retry_wait(err, tries, waited, budget):
    """Seconds to wait before sending a request again after err, its tries-th refusal in a row
    (from 0), with waited seconds spent waiting for it already; None: give up and raise err.
    A 429 is sent again, and a 503 with Retry-After (a busy database; the episode is unchanged)."""
    retried = err.status == 429 or (err.status == 503 and err.retry_after is not None)
    if not retried or budget <= 0:
        return None
    wait = 0.5 * 2 ** tries
    if err.retry_after is not None:
        wait = min(wait, err.retry_after)
    return wait if waited + wait <= budget else None


def _send_body(sock, data, timeout):
    """Sends data on sock, stopping early when the server answers first (a body over its
    --max-body: it answers 413 at once and closes): the answer is read next instead of the
    connection being reset under a body the server no longer reads."""
    if isinstance(sock, ssl.SSLSocket):
        # TLS records (session tickets) make the socket readable before any answer.
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server closed early: read its answer
        return
    view = memoryview(data)
    with selectors.DefaultSelector() as sel:  # not select.select: a trainer may hold > 1024 fds
        sel.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE)
        while view:
            ready = sel.select(timeout)
            if not ready:
                raise TimeoutError(f"sending the request body: no progress in {timeout} s")
            if ready[0][1] & selectors.EVENT_READ:
                return  # an answer before the whole body: the server wants no more of it
            try:
                view = view[sock.send(view[:1 << 16]):]
            except (BrokenPipeError, ConnectionResetError):
                return


class EnvClient:
    """The environment's HTTP/JSON API."""

    def __init__(self, url, timeout=120.0, api_key=None, max_retry_wait=30.0):
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.max_retry_wait = max_retry_wait
        u = urllib.parse.urlsplit(self.url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"server URL {url!r}: want http://HOST:PORT")
        self._scheme, self._host, self._port, self._path = u.scheme, u.hostname, u.port, u.path
        if api_key is None:
            api_key = os.environ.get("CHAINEDSQL_API_KEY", "").split(",")[0].strip()
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = "Bearer " + api_key

    def _call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        tries, waited = 0, 0.0
        while True:
            try:
                return self._request(method, path, data)
            except EnvError as e:
                wait = retry_wait(e, tries, waited, self.max_retry_wait)
                if wait is None:
                    raise
            time.sleep(wait)
            tries, waited = tries + 1, waited + wait

    def _request(self, method, path, data):
        """One request; its JSON answer, or EnvError."""
        conn_class = http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection
        conn = conn_class(self._host, self._port, timeout=self.timeout)
        try:
            conn.putrequest(method, self._path + path, skip_accept_encoding=True)
            for k, v in self.headers.items():
                conn.putheader(k, v)
            if data is not None:
                conn.putheader("Content-Length", str(len(data)))
            conn.endheaders()
            if data:
                _send_body(conn.sock, data, self.timeout)
            resp = conn.getresponse()
            raw = resp.read()
        finally:
            conn.close()
        if 200 <= resp.status < 300:
            return json.loads(raw)
        try:
            retry_after = float(resp.getheader("Retry-After"))
        except (TypeError, ValueError):
            retry_after = None
        try:
            err = json.loads(raw)["error"]
            raise EnvError(err["status"], err["message"], retry_after)
        except (ValueError, KeyError, TypeError):
            raise EnvError(resp.status, resp.reason, retry_after) from None

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
        """Rewards of each completion (a text, or a dict with content, reasoning, finish_reason)
        as a single turn: [{"rewards", "info"}, ...]."""
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


def drop(env, episode_id):
    """Deletes an episode, if the server still has it: one the caller is giving up."""
    try:
        env.delete(episode_id)
    except (EnvError, OSError, http.client.HTTPException):
        pass


def rollout(env, task_id, generate, dialect=None):
    """Plays one episode; generate(messages) returns the assistant's next text.
    Returns the conversation (ending with the last assistant turn) and the last step. An
    episode that fails before done (generate or a step raises) is deleted."""
    ep = env.start(task_id, dialect)
    messages = list(ep["messages"])
    try:
        while True:
            text = generate(messages)
            messages.append({"role": "assistant", "content": text})
            last = env.step(ep["episode_id"], text)
            if last["done"]:
                return messages, last
            messages.append(last["observation"])
    except BaseException:
        drop(env, ep["episode_id"])
        raise


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

    started = []  # episodes for one batch step: not done after it, so deleted after it
    try:
        for _ in range(2):
            started.append(env.start(task_id, dialect)["episode_id"])
        results = env.batch_step([(started[0], malformed), (started[1], answer), ("0" * 32, answer)])
    finally:
        for episode_id in started:
            drop(env, episode_id)
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

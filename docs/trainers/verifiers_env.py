"""A verifiers MultiTurnEnv whose turns are played by `distill env serve`.

Written against PrimeIntellect-ai/verifiers at a60a606ecc4d309247edf9ff92c3eabca362781f:
verifiers/legacy/envs/multiturn_env.py (MultiTurnEnv: the abstract `env_response(messages,
state)`, `setup_state(state)`, the `has_final_env_response` stop on state["final_env_response"]),
verifiers/legacy/envs/environment.py (`init_state` puts the dataset row's `info` in the state)
and verifiers/legacy/rubrics/rubric.py (reward functions get `state` by keyword). The v0
modules answer at their old names (`vf.MultiTurnEnv`), as verifiers/__init__.py says.

The dataset is `distill env prompts` (docs/ENV.md "Prompt export") with an `info` column holding
the task: `{"task_id": ..., "dialect": ...}` (`dataset_from_prompts`). The server keeps the
episode: setup_state starts it, each env_response plays the policy's last reply and answers
with the observation, or ends the rollout when the server says the episode is done; the rubric
reads the server's final reward.

    env = load_environment(url="http://127.0.0.1:8090", prompts="prompts.parquet")
"""
import os
import sys

import verifiers as vf

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from env_client_async import AsyncEnvClient  # noqa: E402  (docs/env_client_async.py)


def dataset_from_prompts(path, subset="train"):
    """The exported prompts as a datasets.Dataset with `prompt` and `info` columns."""
    from datasets import Dataset
    import pyarrow.parquet as pq
    rows = pq.read_table(path, columns=["task_id", "dialect", "subset", "prompt"]).to_pylist()
    return Dataset.from_list([
        {"prompt": r["prompt"], "info": {"task_id": r["task_id"], "dialect": r["dialect"]}}
        for r in rows if subset is None or r["subset"] == subset])


class SQLEnv(vf.MultiTurnEnv):
    """Multi-turn text-to-SQL against the chainedsql environment server."""

    def __init__(self, client, **kwargs):
        super().__init__(**kwargs)
        self.client = client

    async def setup_state(self, state):
        info = state["info"]
        ep = await self.client.start(info["task_id"], info.get("dialect"))
        state["episode_id"] = ep["episode_id"]
        state["env_last"] = None
        return state

    async def env_response(self, messages, state, **kwargs):
        reply = messages[-1]
        content = reply["content"] if isinstance(reply, dict) else reply.content
        last = await self.client.step(state["episode_id"], content or "")
        state["env_last"] = last
        if last["done"]:
            state["final_env_response"] = []  # not None: the rollout stops, nothing appended
            return []
        return [last["observation"]]

    @vf.cleanup
    async def drop_episode(self, state):
        """An episode the rollout left unfinished (an error, a turn or token limit) is dropped."""
        last = state.get("env_last")
        if state.get("episode_id") and not (last and last["done"]):
            await self.client.delete(state["episode_id"])


def env_reward(state, **kwargs):
    """The episode's final reward, 0 when it did not finish."""
    last = state.get("env_last")
    return float(last["final_reward"] or 0) if last and last["done"] else 0.0


def load_environment(url="http://127.0.0.1:8090", prompts="prompts.parquet", max_turns=5, api_key=None):
    """The environment entry point verifiers loads."""
    return SQLEnv(AsyncEnvClient(url, api_key=api_key), dataset=dataset_from_prompts(prompts),
                  rubric=vf.Rubric(funcs=[env_reward]), max_turns=max_turns)

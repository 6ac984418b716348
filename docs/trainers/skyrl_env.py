"""A SkyRL-Gym BaseTextEnv whose turns are played by `distill env serve`.

Written against NovaSky-AI/SkyRL at a9564572eb8e91076be43c1bd5e4615e3de17265:
skyrl-gym/skyrl_gym/envs/base_text_env.py (BaseTextEnv: `init(prompt)` returns the first
prompt and metadata, `step(action)` returns BaseTextEnvStepOutput(observations, reward, done,
metadata), `close()`), skyrl/train/dataset/dataset.py (every dataset column but the prompt and
env_class reaches the env as `extras`) and skyrl/train/generators/skyrl_gym_generator.py
(`skyrl_gym.make(env_class, env_config=..., extras=...)`, extras["max_turns"] set by the
generator).

The dataset is `distill env prompts` (docs/ENV.md "Prompt export"): its `prompt` column is the
prompt and its `task_id` and `dialect` columns arrive in extras. Register the class and name it
in the dataset's env_class column (or the generator's default):

    from skyrl_gym.envs import register
    register(id="chainedsql", entry_point="skyrl_env:SQLEnv")

The server URL comes from env_config["url"] (or $CHAINEDSQL_ENV_URL); the reward of each step
is the server's turn reward under its --reward-mode (final: 0 until the last turn).
"""
import os
import sys

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from env_client import EnvClient  # noqa: E402  (docs/env_client.py)


class SQLEnv(BaseTextEnv):
    """Multi-turn text-to-SQL against the chainedsql environment server."""

    def __init__(self, env_config=None, extras=None):
        super().__init__()
        extras = extras or {}
        cfg = env_config or {}
        url = cfg.get("url") or os.environ.get("CHAINEDSQL_ENV_URL", "http://127.0.0.1:8090")
        self.client = EnvClient(url, api_key=cfg.get("api_key"))
        self.task_id, self.dialect = extras["task_id"], extras.get("dialect")
        self.max_turns = extras.get("max_turns", 5)
        self.episode_id, self.finished = None, False  # finished: the server ended the episode

    def init(self, prompt):
        ep = self.client.start(self.task_id, self.dialect)
        self.episode_id = ep["episode_id"]
        # The server's prompt is the dataset's (the export renders it the same way); using the
        # server's keeps them equal even for an older export.
        return ep["messages"], {"episode_id": self.episode_id, "max_turns": ep["max_turns"]}

    def step(self, action):
        self.turns += 1
        last = self.client.step(self.episode_id, action)
        self.finished = last["done"]
        obs = [] if last["done"] else [last["observation"]]
        done = last["done"] or self.turns >= self.max_turns
        return BaseTextEnvStepOutput(observations=obs, reward=float(last["reward"]), done=done,
                                     metadata={"rewards": last["rewards"], "info": last["info"],
                                               "final_reward": last["final_reward"]})

    def close(self):
        if self.episode_id and not self.finished:
            self.client.delete(self.episode_id)

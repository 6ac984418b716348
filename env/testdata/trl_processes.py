"""Plays docs/trainers/trl_rollout_func.py's EnvRollout on several simulated trainer processes
(threads) whose episodes end after different numbers of turns, against a fake of TRL's vLLM
server-mode generate: the prompts of all processes are gathered, and process i is handed the
completions [i*n, (i+1)*n) where n is the length of its own list. Each completion names the
episode it was generated for; every episode must get only its own, and every process must make
the same number of generate calls. Prints "ok" or raises. Usage: trl_processes.py ADAPTER_DIR
"""
import sys
import threading
import types

IM_END, EOS = 7, 8
PROCS, PER_PROC = 3, 2


class Collective:
    """all_gather of one object per process, for threads standing in for processes."""

    def __init__(self, n):
        self.n, self.barrier, self.slots, self.lock = n, threading.Barrier(n), {}, threading.Lock()
        self.rank = threading.local()

    def gather(self, obj):
        # every process's list, concatenated in process order
        with self.lock:
            self.slots[self.rank.i] = obj
        self.barrier.wait()
        out = [x for i in range(self.n) for x in self.slots[i]]
        self.barrier.wait()
        return out


class FakeGeneration:
    """VLLMGeneration.generate in server mode, as TRL's slicing is described above."""

    def __init__(self, coll):
        self.coll, self.calls = coll, {}

    def generate(self, prompts, images, num_generations):
        i = self.coll.rank.i
        self.calls[i] = self.calls.get(i, 0) + 1
        everyone = self.coll.gather(list(prompts))
        # a completion says which prompt it answers: the prompt's first id, then its length
        completions = [[p[0], 100 + len(p), IM_END] for p in everyone]
        mine = slice(i * len(prompts), (i + 1) * len(prompts))
        ids = completions[mine]
        return [list(p) for p in everyone[mine]], ids, [[[0.0]] * len(c) for c in ids], None


class FakeEnv:
    """Episodes done after a number of turns set by their task."""

    def __init__(self):
        self.eps, self.lock, self.errors = {}, threading.Lock(), []

    def start(self, task_id, dialect):
        with self.lock:
            eid = f"ep{len(self.eps)}"
            first = 1000 + len(self.eps)  # the prompt's first id names the episode
            self.eps[eid] = {"turns": int(task_id), "played": 0, "first": first}
        return {"episode_id": eid, "tokens": {"ids": [first, 1, 2]}}

    def step(self, eid, text, finish_reason=None):
        ep = self.eps[eid]
        ep["played"] += 1
        done = ep["played"] >= ep["turns"]
        return {"done": done, "final_reward": 1.0 if done else None, "rewards": {}, "tokens": {"ids": [IM_END, 3]}}

    def delete(self, eid):
        pass


class FakeTokenizer:
    eos_token_id = EOS
    all_special_ids = [EOS, IM_END]  # HF's: eos and the additional special tokens

    def convert_tokens_to_ids(self, tok):
        return IM_END

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(map(str, ids))


class FakeIndex:
    def task(self, prompt):
        return prompt, None  # the prompt is the task id: its number of turns


def main():
    sys.path.insert(0, sys.argv[1])
    coll = Collective(PROCS)
    accel = types.ModuleType("accelerate")
    accel.utils = types.ModuleType("accelerate.utils")
    accel.utils.gather_object = coll.gather
    sys.modules["accelerate"], sys.modules["accelerate.utils"] = accel, accel.utils
    import trl_rollout_func as adapter

    env, gen = FakeEnv(), FakeGeneration(coll)
    trainer = types.SimpleNamespace(num_generations=1, model=types.SimpleNamespace(training=True),
                                    processing_class=FakeTokenizer(), vllm_generation=gen)
    outs, errs = {}, []

    def run(i):
        coll.rank.i = i
        try:
            # process i's episodes last i+1 and i+3 turns: the processes finish at different turns
            outs[i] = adapter.EnvRollout(env, FakeIndex(), max_turns=6)([str(i + 1), str(i + 3)][:PER_PROC], trainer)
        except Exception as e:  # noqa: BLE001
            errs.append(e)
            coll.barrier.abort()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(PROCS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errs:
        raise errs[0]
    if len(set(gen.calls.values())) != 1:
        raise AssertionError(f"generate calls per process differ: {gen.calls}")
    for i, out in outs.items():
        for k, (p, c) in enumerate(zip(out["prompt_ids"], out["completion_ids"])):
            # every reply of the episode starts with the episode's own first prompt id
            for j in range(0, len(c), 4):  # reply [first, 100+len, (IM_END dropped)] then step [IM_END, 3]
                if c[j] != p[0]:
                    raise AssertionError(f"process {i} episode {k}: a completion of episode {c[j]}, want {p[0]}: {c}")
        if out["env_reward"] != [1.0] * PER_PROC:
            raise AssertionError(f"process {i}: episodes not finished: {out['env_reward']}")
    print("ok", gen.calls[0])


main()

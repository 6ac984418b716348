"""TRL GRPOTrainer(rollout_func=...) playing multi-turn episodes of `distill env serve`.

Written against huggingface/trl at f2cd57710ae345ea6428ae95363267fcf38a3dc8:
trl/trainer/grpo_trainer.py (RolloutFunc = Callable[[list, GRPOTrainer], dict]; `_generate`
checks the keys prompt_ids, completion_ids, logprobs, pops env_mask as the tool mask and passes
every other key to the reward functions) and trl/generation/vllm_generation.py
(VLLMGeneration.generate(prompts=token id lists, images, num_generations) returns
(prompt_ids, completion_ids, logprobs, logprob_token_ids), logprobs[i][t][0] the sampled token's).

The dataset is `distill env prompts --out prompts.parquet` (docs/ENV.md "Prompt export"): its
`prompt` column is all the trainer hands this function (not the row's task_id or dialect), so
the prompt's messages tell which task to play (PromptIndex): the system message names the
dialect's engine and holds its schema, the user message the question; the question alone is the
same in every dialect. Each prompt gets num_generations episodes; each turn generates for all
episodes still playing in one vLLM call, from the episode's running token list (the env's ids,
never re-tokenised, docs/ENV.md "Token-level turns"):

    from trl import GRPOConfig, GRPOTrainer
    index = PromptIndex.from_parquet("prompts.parquet")
    assert not index.ambiguous()  # else keep one row of each in the index's rows and the dataset
    rollout = EnvRollout(EnvClient("http://127.0.0.1:8090"), index, max_turns=5)
    trainer = GRPOTrainer(model=..., args=GRPOConfig(use_vllm=True, num_generations=8, ...),
                          reward_funcs=[env_reward], train_dataset=..., rollout_func=rollout)

The generate call is collective across the trainer's processes, and TRL assumes every process
passes it the same number of prompts: in vLLM server mode it gathers the prompts of all processes
(vllm_generation.py:552) and hands process i the slice [i*len(prompts), (i+1)*len(prompts)) of
the completions (vllm_generation.py:602-608), in colocate mode with tensor parallelism the same
within the TP group (vllm_generation.py:641, 690-692). A process whose episodes are done passing an
empty list (or fewer prompts) would shift every later process's slice onto another process's
episodes. So each turn the processes agree on the largest count of episodes still playing
(accelerate's gather_object of every process's count), each pads its prompts to that count with
a placeholder prompt whose completion is dropped, and all stop together once no process has an
episode playing: every process makes the same number of calls, at most max_turns.
(Line numbers are of trl/generation/vllm_generation.py at the commit above.)

A completion ends where the policy stopped: GRPOTrainer._generate counts one whose last id is not
the tokenizer's eos or pad as truncated (completions/clipped_ratio), and mask_truncated_completions
drops it from the loss. So an episode the server ended gives the ids up to its last reply's
closing <|im_end|> (the done step's ids are that <|im_end|> and the template's newline, which
nobody sampled), or, when that reply was cut by the token limit, up to its last sampled token
(then it is truncated). An episode still playing after max_turns ends with its last step's ids
(the observation and the next generation prompt): truncated too, and its env_reward is 0.

Stop strings and stop ids of GRPOConfig(generation_kwargs={"stop": [...], "stop_token_ids":
[...]}) reach vLLM's SamplingParams (TRL passes generation_kwargs through in server and colocate
mode), but TRL hands back only ids and log-probs, no text and no finish reason; vLLM's token_ids
run through the token that completed a stop string (only its text is cut). So the adapter reads
the same generation_kwargs (trainer.vllm_generation.generation_kwargs) and plays a reply as
student serve would end it: one whose text (skip_special_tokens) holds a stop string ended on
the token completing the first ("stop", not "length"; what vLLM generated past it in the same
step dropped, as its token_ids are not cut; under min_tokens only a stop string ending past the
first min_tokens tokens' text counts, as in vLLM), one that sampled a stop_token_ids id ended on
it. The reply's text is
that of every id kept, through the completing token and a stop id that is not special
(student serve's include_stop_str_in_output text; include_stop_str_in_output itself changes only
vLLM's text, which TRL drops), so the environment reads the </sql> the ids hold; the template's
<|im_end|> follows (log-prob 0, mask 0), and at done it ends the completion, which TRL then does
not count as truncated.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from env_client import EnvClient  # noqa: E402  (docs/env_client.py)

IM_END = "<|im_end|>"
ENDOFTEXT = "<|endoftext|>"  # Qwen2's other stop token; the template writes <|im_end|> for it


def _prompt_key(prompt):
    """What identifies a prompt: every message's role and text (system: the dialect's engine and
    the schema; user: the question and evidence)."""
    return tuple((m["role"], m["content"]) for m in prompt)


class PromptIndex:
    """Finds the task and dialect of a prompt (its messages) among the exported rows."""

    def __init__(self, rows):
        self._tasks = {}  # prompt key -> {(task_id, dialect), ...}
        for row in rows:
            self._tasks.setdefault(_prompt_key(row["prompt"]), set()).add((row["task_id"], row["dialect"]))

    @classmethod
    def from_parquet(cls, path):
        import pyarrow.parquet as pq  # only here: the adapter imports without it
        return cls(pq.read_table(path, columns=["task_id", "dialect", "prompt"]).to_pylist())

    def ambiguous(self):
        """The (task_id, dialect) pairs that share one prompt (a task file with a question twice
        on one database), a sorted list per prompt: task() refuses those prompts. Build the index
        and the training dataset from rows that keep one of each."""
        return sorted(sorted(found) for found in self._tasks.values() if len(found) > 1)

    def task(self, prompt):
        """(task_id, dialect) of a prompt as the trainer passes it (a list of messages)."""
        try:
            found = self._tasks.get(_prompt_key(prompt))
        except (KeyError, TypeError):
            found = None
        if not found:
            raise ValueError("a prompt that is not a row of the exported prompts (its system and user "
                             "messages must be a row's prompt exactly)")
        if len(found) > 1:
            raise ValueError(f"the prompt is the same for {sorted(found)}: it does not tell which to "
                             "play; build the index and the training dataset from rows that keep one "
                             "of them (PromptIndex.ambiguous lists every such prompt)")
        return next(iter(found))


class _Episode:
    def __init__(self, env, task_id, dialect):
        ep = env.start(task_id, dialect)
        self.id = ep["episode_id"]
        self.prompt_ids = list(ep["tokens"]["ids"])
        self.ids, self.logprobs, self.mask = [], [], []  # after the prompt, aligned
        self.last, self.done = None, False  # the last step's answer; whether it ended the episode

    def running(self):
        return self.prompt_ids + self.ids


def _gather_object(obj):
    """accelerate's gather_object: the lists of every process, concatenated (obj on one)."""
    from accelerate.utils import gather_object  # only here: the adapter imports without it
    return gather_object(obj)


class EnvRollout:
    """The rollout_func: call it as trainer(prompts) would."""

    def __init__(self, env, index, max_turns=5, reward_key="final_reward"):
        self.env, self.index, self.max_turns, self.reward_key = env, index, max_turns, reward_key

    def __call__(self, prompts, trainer):
        g = trainer.num_generations if trainer.model.training else trainer.num_generations_eval
        tok = trainer.processing_class
        im_end = tok.convert_tokens_to_ids(IM_END)
        # the ids a reply ends on: those vLLM stops on (generation_config's eos ids: <|im_end|>,
        # the tokenizer's eos, <|endoftext|>) and every other special token, which vLLM samples
        # on through but the student's rule makes a stop (docs/ROLLOUT.md, "Special tokens a reply
        # samples"): the reply is cut at the first, so its ids are those its text encodes to
        stops = {t for t in (im_end, tok.eos_token_id, tok.convert_tokens_to_ids(ENDOFTEXT), *tok.all_special_ids)
                 if t is not None and t != getattr(tok, "unk_token_id", None)}
        # and those the trainer's generation_kwargs give vLLM (a stop string ends a reply with
        # no stop id: its text tells)
        kwargs = getattr(trainer.vllm_generation, "generation_kwargs", None) or {}
        stops |= set(kwargs.get("stop_token_ids") or ())
        stop_strs = kwargs.get("stop") or []
        stop_strs = [s for s in ([stop_strs] if isinstance(stop_strs, str) else stop_strs) if s]
        min_tokens = kwargs.get("min_tokens") or 0
        eps = [_Episode(self.env, *self.index.task(p)) for p in prompts for _ in range(g)]
        pad = eps[0].prompt_ids if eps else [im_end]  # a placeholder prompt; its completion is dropped
        try:
            for _ in range(self.max_turns):
                playing = [e for e in eps if not e.done]
                width = max(_gather_object([len(playing)]))  # the same on every process
                if width == 0:
                    break  # no process has an episode playing: all stop at this call
                batch = [e.running() for e in playing] + [pad] * (width - len(playing))
                outs = trainer.vllm_generation.generate(prompts=batch, images=None, num_generations=1)
                _, completion_ids, logprobs, _ = outs
                for e, ids, lps in zip(playing, completion_ids, logprobs):
                    self._turn(e, list(ids), [lp[0] for lp in lps], im_end, stops, stop_strs, min_tokens, tok)
        finally:
            for e in eps:
                if not e.done:
                    self.env.delete(e.id)
        return {
            "prompt_ids": [e.prompt_ids for e in eps],
            "completion_ids": [e.ids for e in eps],
            "logprobs": [e.logprobs for e in eps],
            "env_mask": [e.mask for e in eps],
            # for reward functions (keyword arguments of the same names)
            "env_reward": [float(e.last[self.reward_key] or 0) if e.done else 0.0 for e in eps],
            "env_rewards": [e.last["rewards"] if e.last else None for e in eps],
        }

    def _turn(self, e, ids, lps, im_end, stops, stop_strs, min_tokens, tok):
        # the reply ends at its first stop id (what vLLM generated after a special token it did
        # not stop on is dropped); None: no stop id, so a stop string ended it or the token limit
        at = next((i for i, t in enumerate(ids) if t in stops), None)
        stop = ids[at] if at is not None else None
        reply, reply_lps = (ids[:at], lps[:at]) if stop is not None else (ids, lps)
        # or before it, at the token completing the first stop string: what vLLM generated past
        # it (a step of several tokens) is dropped, as student serve ends the reply there
        k = _stop_string_end(tok, reply, stop_strs, min_tokens)
        if k is not None:
            at, stop = None, None
            reply, reply_lps = reply[:k], reply_lps[:k]
        # the text of every id kept: a stop id's too (empty for a special one)
        text = tok.decode(reply + ([stop] if stop is not None else []), skip_special_tokens=True)
        stopped = stop is not None or k is not None
        e.last = step = self.env.step(e.id, text, finish_reason=None if stopped else "length")
        e.done = step["done"]
        e.ids += reply
        e.logprobs += reply_lps
        e.mask += [1] * len(reply)
        if stop is not None and stop != im_end:
            # another stop id ended the reply (<|endoftext|>, <|im_start|>, a stop_token_ids
            # id): the policy sampled it, so it is kept with its log-prob and mask 1, in the
            # running list the next turn is generated from too (as student rollout records it);
            # the template's <|im_end|> closes the turn after it
            e.ids.append(stop)
            e.logprobs.append(lps[at])
            e.mask.append(1)
        # The step's ids begin with the reply's closing <|im_end|>: the policy's token when it
        # stopped on it (its log-prob, mask 1), else the template's (after another stop id, a
        # stop string or a cut reply: mask 0). Then the template and the observation (mask 0);
        # at done only "\n", which ends no completion: the completion stops at that <|im_end|>,
        # TRL's eos, or, for a cut reply, at its last sampled token, which TRL counts as
        # truncated.
        after = list(step["tokens"]["ids"])
        if e.done:
            after = after[:1] if stopped else []
        if after:
            sampled = stop == im_end
            e.ids += after
            e.logprobs += [lps[at] if sampled else 0.0] + [0.0] * (len(after) - 1)
            e.mask += [1 if sampled else 0] + [0] * (len(after) - 1)


def _stop_string_end(tok, ids, stop_strs, min_tokens=0):
    """How many of ids run through the one completing the first of stop_strs in their text
    (skip_special_tokens), as vLLM's detokenizer checks after each token: a stop string counts
    only where it ends past the text of the first min_tokens ids. None: no stop string ends
    the reply. The text of ids[:k] only grows with k (but for the U+FFFD of a character not yet
complete at its end, which no stop string of real text holds), so the first k is found by
bisection."""
    if not stop_strs or len(ids) <= min_tokens:
        return None
    floor = len(tok.decode(ids[:min_tokens], skip_special_tokens=True)) if min_tokens else 0

    def hit(k):
        text = tok.decode(ids[:k], skip_special_tokens=True)
        return any(text.find(s, max(floor - len(s) + 1, 0)) >= 0 for s in stop_strs)

    lo, hi = min_tokens + 1, len(ids)
    if not hit(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if hit(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def env_reward(completions, env_reward, **kwargs):
    """A TRL reward function: the episode's final reward from the environment."""
    return list(env_reward)

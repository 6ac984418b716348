"""Runs docs/trainers/trl_rollout_func.py against a running environment server with fakes of
TRL's trainer, its vLLM generation and the Qwen2.5 tokenizer, and checks what it hands TRL.
Prints "ok ..." or raises. Usage: trl_adapter.py ADAPTER_DIR CASE.json

CASE.json: {"url": the server, "rows": the prompt export's rows (task_id, dialect, prompt,
prompt_ids) each with "gold" (its SQL in its dialect) and "plan", how the fake policy replies
in its episodes (every turn but the last the gold, stopping on <|im_end|>; the last turn):
  "stop"       the gold, stopping on <|im_end|>
  "endoftext"  the gold, stopping on <|endoftext|> (kept, sampled; the template still writes
               <|im_end|> after it)
  "special"    the gold, then <|im_start|> and more text up to <|im_end|>, as vLLM samples on
               through a special token that is not an eos id: the reply ends at <|im_start|>
               (kept, sampled; the template writes <|im_end|> after it), the rest is dropped
  "cut"        a reply the token limit cut inside its <sql> block (no stop token)
The server's turn budget is the number of turns every plan plays. The rollout is played twice:
as above, then with GRPOConfig's generation_kwargs {"stop": ["</sql>"], "stop_token_ids": [the
id of "sql>"]}, where vLLM ends every turn but the last on the stop string (no stop id: its ids
run through "sql>\n", the token completing "</sql>") and the plans become "stopstr" (so), "cut",
"stopid" (the answer through "</", then the "sql>" stop id, kept and sampled) and "stoppast"
(vLLM's ids run past the token completing "</sql>", as a step of several tokens gives them: the
reply ends on that token, the rest dropped).

Checked:
  - each prompt's episodes start the task and dialect of its own row: the server's messages
    for them are the prompt (a multi-dialect export has one user message per task for all
    dialects); a prompt shared by two rows, or none, is refused;
  - a completion ends with TRL's eos (<|im_end|>) exactly when its last reply stopped: TRL's
    is_truncated (last id not eos or pad) holds for the cut ones only;
  - completion_ids, logprobs and env_mask are aligned: mask 1 exactly on the sampled tokens,
    which carry the sampler's log-probs, 0 elsewhere; the env's ids are the server's;
  - a special stop other than <|im_end|> is in the completion (mask 1, its log-prob) before the
    template's <|im_end|> (mask 0);
  - each reply's text is that of the ids kept for it (a stop id's that is not special too, the
    stop string and the rest of its token too), sent as "stop" unless the token limit cut it;
    every episode but a cut one stays well-formed (format 1).
"""
import json
import sys
import types

IM_START, IM_END, ENDOFTEXT, NL = 151644, 151645, 151643, 198  # Qwen2.5's ids, as the server's tokenizer has them
REPLY_LP, STOP_LP = -0.25, -0.5  # the fake sampler's log-probs: reply tokens, stop tokens


class FakeTokenizer:
    """The student's tokenizer as the adapter uses it: reply ids are the fake policy's own (one
    id per reply text); the special ids are Qwen2.5's."""
    eos_token_id, pad_token_id, unk_token_id = IM_END, ENDOFTEXT, None
    all_special_ids = [ENDOFTEXT, IM_START, IM_END, 151646]  # HF's: eos, pad, additional_special_tokens

    def __init__(self):
        self.texts = {}

    def reply(self, text):
        rid = self.texts.setdefault(text, 200_000 + len(self.texts))
        return rid

    def convert_tokens_to_ids(self, tok):
        return {"<|im_end|>": IM_END, "<|endoftext|>": ENDOFTEXT}[tok]

    def decode(self, ids, skip_special_tokens=True):
        return "".join(self.texts_by_id()[i] for i in ids if i >= 200_000)

    def texts_by_id(self):
        return {v: k for k, v in self.texts.items()}


def sampled(tok, row, turn, plan, stop_id):
    """The fake policy's ids for a turn of row's episodes played by plan."""
    answer = f"<think>turn {turn}</think>\n<sql>{row['gold']}</sql>"
    if plan == "cut":
        return [tok.reply(answer[:answer.index("</sql>") - 3])]
    if plan == "special":
        return [tok.reply(answer), IM_START, tok.reply("user\nmore"), IM_END]
    if plan == "stopstr":  # vLLM stopped on "</sql>": the ids run through the token completing it
        return [tok.reply(answer[:-len("sql>")]), tok.reply("sql>\n")]
    if plan == "stoppast":  # vLLM took several tokens in one step, the first completing "</sql>"
        return [tok.reply(answer[:-len("sql>")]), tok.reply("sql>\n"), tok.reply("<think>more"), tok.reply("</think>")]
    if plan == "stopid":
        # the stop id is the token completing "</sql>": vLLM stops on it before its text is
        # searched for the stop string (a stop string in the text before it would have ended
        # the reply there, and the stop id would never have been sampled)
        return [tok.reply(answer[:-len("sql>")]), stop_id]
    return [tok.reply(answer), IM_END if plan == "stop" else ENDOFTEXT]


class FakeGeneration:
    """VLLMGeneration.generate for one process: each episode's reply by its row's plan, as vLLM
    ends it under generation_kwargs (which TRL passes to vLLM's SamplingParams)."""

    def __init__(self, rows, tok, max_turns, plans, generation_kwargs):
        self.by_prompt = {tuple(r["prompt_ids"]): r for r in rows}
        self.tok, self.max_turns, self.plans = tok, max_turns, plans
        self.generation_kwargs = generation_kwargs
        self.stop_id = tok.reply("sql>")
        self.stop_ids = {IM_END, ENDOFTEXT, IM_START, self.stop_id}

    def generate(self, prompts, images, num_generations):
        assert num_generations == 1 and images is None
        completions, logprobs = [], []
        for running in prompts:
            row = next(r for p, r in self.by_prompt.items() if tuple(running[:len(p)]) == p)
            # each step before this turn wrote two <|im_end|>: the reply's and the observation's
            turn = 1 + running[len(row["prompt_ids"]):].count(IM_END) // 2
            ids = sampled(self.tok, row, turn, self.plans(row, turn), self.stop_id)
            completions.append(ids)
            logprobs.append([[STOP_LP if i in self.stop_ids else REPLY_LP] for i in ids])
        return [list(p) for p in prompts], completions, logprobs, None


class RecordingEnv:
    """The adapter's client, recording what each episode started as."""

    def __init__(self, client):
        self.client, self.started, self.steps = client, {}, {}

    def start(self, task_id, dialect):
        ep = self.client.start(task_id, dialect)
        self.started[ep["episode_id"]] = ep
        return ep

    def step(self, eid, text, finish_reason=None):
        st = self.client.step(eid, text, finish_reason=finish_reason)
        self.steps.setdefault(eid, []).append(dict(st, sent=(text, finish_reason)))
        return st

    def delete(self, eid):
        return self.client.delete(eid)


def check_index(adapter, rows):
    index = adapter.PromptIndex(rows)
    for r in rows:
        if index.task(r["prompt"]) != (r["task_id"], r["dialect"]):
            raise AssertionError(f"the prompt of {r['task_id']} ({r['dialect']}) maps to {index.task(r['prompt'])}")
    if index.ambiguous():
        raise AssertionError(f"ambiguous: {index.ambiguous()}")
    twin = dict(rows[0], task_id=rows[0]["task_id"] + "-twin")
    shared = adapter.PromptIndex(rows + [twin])
    if shared.ambiguous() != [sorted([(rows[0]["task_id"], rows[0]["dialect"]), (twin["task_id"], twin["dialect"])])]:
        raise AssertionError(f"ambiguous: {shared.ambiguous()}")
    for bad in (rows[0]["prompt"], rows[0]["prompt"][-1:], "a text prompt"):
        try:
            got = shared.task(bad)
        except ValueError:
            continue
        raise AssertionError(f"{str(bad)[:60]!r}: {got}, want ValueError")


def check_stop_string_end(adapter):
    """The reply ends at the token completing the first stop string, as vLLM checks after each
    token; under min_tokens only a stop string ending past the first min_tokens tokens' text."""
    tok = FakeTokenizer()
    ids = [tok.reply(t) for t in ("a</s", "ql>b", "c</sql>", "d")]
    for stops, min_tokens, want in ((["</sql>"], 0, 2), (["</sql>", "c"], 0, 2), (["c", "</sql>"], 0, 2),
                                    (["</sql>"], 1, 2), (["</sql>"], 2, 3), (["x"], 0, None),
                                    (["</sql>"], 3, None), ([], 0, None), (["d"], 0, 4)):
        got = adapter._stop_string_end(tok, ids, stops, min_tokens)
        if got != want:
            raise AssertionError(f"stop {stops}, min_tokens {min_tokens}: ends after {got} ids, want {want}")


def play(adapter, case, generation_kwargs, base, last):
    """Plays the rollout with the fake trainer: every turn but the last by base, the last by
    last(row's plan); checks what it hands TRL."""
    rows, max_turns, g = case["rows"], case["max_turns"], 2
    tok = FakeTokenizer()
    env = RecordingEnv(adapter.EnvClient(case["url"]))
    plans = lambda row, turn: last(row["plan"]) if turn == max_turns else base  # noqa: E731
    gen = FakeGeneration(rows, tok, max_turns, plans, generation_kwargs)
    trainer = types.SimpleNamespace(num_generations=g, model=types.SimpleNamespace(training=True),
                                    processing_class=tok, vllm_generation=gen)
    prompts = [r["prompt"] for r in rows]
    out = adapter.EnvRollout(env, adapter.PromptIndex(rows), max_turns=max_turns)(prompts, trainer)

    eids = list(env.started)
    if len(eids) != g * len(rows) or any(len(out[k]) != len(eids) for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask")):
        raise AssertionError(f"{len(eids)} episodes for {len(rows)} prompts x {g}: {[(k, len(v)) for k, v in out.items()]}")
    eos_and_pad = (tok.eos_token_id, tok.pad_token_id)
    for k, eid in enumerate(eids):
        row, ep = rows[k // g], env.started[eid]
        what = f"episode {k} ({row['task_id']}, {row['dialect']}, {last(row['plan'])}, generation_kwargs {generation_kwargs})"
        if ep["messages"] != row["prompt"] or (ep["task_id"], ep["dialect"]) != (row["task_id"], row["dialect"]):
            raise AssertionError(f"{what}: started {ep['task_id']} ({ep['dialect']}), whose messages are not its prompt")
        if out["prompt_ids"][k] != row["prompt_ids"]:
            raise AssertionError(f"{what}: prompt ids differ from the row's")
        steps = env.steps[eid]
        if len(steps) != max_turns or not steps[-1]["done"] or out["env_reward"][k] != steps[-1]["final_reward"]:
            raise AssertionError(f"{what}: {len(steps)} steps, done {steps[-1]['done']}, reward {out['env_reward'][k]}")
        cut = last(row["plan"]) == "cut"
        if steps[-1]["rewards"]["format"] != (0 if cut else 1):
            raise AssertionError(f"{what}: format {steps[-1]['rewards']['format']}")
        ids, lps, mask = out["completion_ids"][k], out["logprobs"][k], out["env_mask"][k]
        if not (len(ids) == len(lps) == len(mask)):
            raise AssertionError(f"{what}: {len(ids)} ids, {len(lps)} log-probs, {len(mask)} mask bits")
        truncated = ids[-1] not in eos_and_pad  # GRPOTrainer's is_truncated
        if truncated != cut:
            raise AssertionError(f"{what}: ends with {ids[-3:]}, TRL's is_truncated {truncated}")
        if not cut and ids[-1] != IM_END:
            raise AssertionError(f"{what}: ends with {ids[-3:]}, want <|im_end|>")
        # the ids: each reply's, then its step's (at done: up to its <|im_end|>, none when cut)
        want, want_mask, want_lps = [], [], []
        for t, st in enumerate(steps):
            plan = plans(row, t + 1)
            got = sampled(tok, row, t + 1, plan, gen.stop_id)
            if plan == "stoppast":  # the ids past the token completing "</sql>" are dropped
                got = got[:2]
            reply, kept = (got, []) if plan in ("cut", "stopstr", "stoppast") else (got[:1], got[1:2] if plan != "stop" else [])
            after = st["tokens"]["ids"]
            if t == len(steps) - 1:
                after = after[:1] if plan != "cut" else []
            want += reply + kept + after
            want_mask += [1] * len(reply + kept) + [1 if plan == "stop" else 0] * bool(after) + [0] * (len(after) - 1)
            want_lps += [REPLY_LP] * len(reply) + [STOP_LP] * len(kept) + [STOP_LP if plan == "stop" else 0.0] * bool(after) + [0.0] * (len(after) - 1)
            sent = (tok.decode(reply + kept), "length" if plan == "cut" else None)
            if st["sent"] != sent:
                raise AssertionError(f"{what}: turn {t + 1} sent {st['sent']}, want {sent}")
        if ids != want or mask != want_mask or lps != want_lps:
            raise AssertionError(f"{what}:\n ids  {ids}\n want {want}\n mask {mask}\n want {want_mask}\n lps {lps}\n want {want_lps}")
        if steps[-1]["tokens"]["ids"] != [IM_END, NL]:
            raise AssertionError(f"{what}: the done step's ids {steps[-1]['tokens']['ids']}")
    return len(eids)


def main():
    sys.path.insert(0, sys.argv[1])
    with open(sys.argv[2]) as f:
        case = json.load(f)
    accel = types.ModuleType("accelerate")
    accel.utils = types.ModuleType("accelerate.utils")
    accel.utils.gather_object = lambda obj: list(obj)  # one process
    sys.modules["accelerate"], sys.modules["accelerate.utils"] = accel, accel.utils
    import trl_rollout_func as adapter

    check_index(adapter, case["rows"])
    check_stop_string_end(adapter)
    n = play(adapter, case, None, "stop", lambda plan: plan)
    stop_id = FakeTokenizer().reply("sql>")  # the first text each FakeTokenizer numbers
    as_stopped = {"stop": "stopstr", "cut": "cut", "endoftext": "stopid", "special": "stoppast"}
    n += play(adapter, case, {"stop": ["</sql>"], "stop_token_ids": [stop_id]}, "stopstr", as_stopped.get)
    print("ok", n, "episodes")


main()

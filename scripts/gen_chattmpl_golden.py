#!/usr/bin/env python3
"""Generate inference/chattmpl/testdata/golden.jsonl from the real Qwen2.5 chat template.

Renders a corpus of conversations with Jinja2 in the environment Hugging Face transformers uses
for chat templates (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
raise_exception, tojson), once with the template as shipped (the golden text) and once with a
patched copy that puts sentinel markers around the {% generation %} region of TRL's Qwen2.5
training template (trl/chat_templates/qwen2_5_training.jinja, which TRL's SFTTrainer swaps in for
assistant_only_loss): after '<|im_start|>assistant', the '\n', the content, '<|im_end|>' and the
'\n' after it (for messages without tool calls, the only kind the Go renderer knows). The sentinels give
the golden spans as UTF-8 byte offsets, independently of the Go code. The patched text with the
sentinels removed must equal the unpatched text, or the script fails.

Usage (from the repository root):
    python3 scripts/gen_chattmpl_golden.py [../shared/tokenizer/qwen2.5/chat_template.jinja]

The Go test (inference/chattmpl) compares byte for byte and needs no Python.
"""
import json
import os
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_TEMPLATE = os.path.join(ROOT, "..", "shared", "tokenizer", "qwen2.5", "chat_template.jinja")
OUT = os.path.join(ROOT, "inference", "chattmpl", "testdata", "golden.jsonl")

START = "\x00GEN_START\x00"
END = "\x00GEN_END\x00"

# The one line of the template that renders user, non-first system and assistant turns.
ORIG_LINE = "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
PATCHED_LINE = (
    "{%- if message.role == 'assistant' %}"
    "{{- '<|im_start|>' + message.role + '" + START + "' + '\\n' + message.content + '<|im_end|>' + '\\n' + '" + END + "' }}"
    "{%- else %}" + ORIG_LINE + "{%- endif %}"
)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def conv(*pairs):
    return [{"role": r, "content": c} for r, c in pairs]


SYS = "You answer questions about a SQLite database.\nDialect: sqlite 3.45\n\nCREATE TABLE t (id INTEGER);"
A1 = "<think>Look at the table first.</think>\n<sql>SELECT * FROM t LIMIT 5;</sql>"
A2 = "<think>Count them.</think>\n<sql>SELECT COUNT(*) FROM t;</sql>"
OBS = "<observation>\nid\n1\n2\n(2 rows)\n</observation>"

CORPUS = [
    ("single_user_no_system", conv(("user", "Hello")), False),
    ("single_user_no_system_genprompt", conv(("user", "Hello")), True),
    ("system_user", conv(("system", SYS), ("user", "Question: how many rows?")), False),
    ("system_user_genprompt", conv(("system", SYS), ("user", "Question: how many rows?")), True),
    ("system_user_assistant", conv(("system", SYS), ("user", "Question: how many rows?"), ("assistant", A2)), False),
    ("no_system_user_assistant", conv(("user", "Question: how many rows?"), ("assistant", A2)), False),
    ("multi_turn_observations", conv(("system", SYS), ("user", "Question: how many rows?\nEvidence: rows are ids"),
                                     ("assistant", A1), ("user", OBS), ("assistant", A2),
                                     ("user", "<observation>\nCOUNT(*)\n2\n(1 row)\n</observation>"), ("assistant", A2)), False),
    ("multi_turn_genprompt", conv(("system", SYS), ("user", "Q"), ("assistant", A1), ("user", OBS)), True),
    ("multi_turn_ending_assistant_genprompt", conv(("system", SYS), ("user", "Q"), ("assistant", A1)), True),
    ("empty_assistant", conv(("system", SYS), ("user", "Q"), ("assistant", "")), False),
    ("empty_user", conv(("user", ""), ("assistant", "ok")), False),
    ("empty_system", conv(("system", ""), ("user", "Q"), ("assistant", A2)), False),
    ("all_empty", conv(("system", ""), ("user", ""), ("assistant", "")), True),
    ("unicode", conv(("system", "Réponds en français. 日本語もOK. Ελληνικά."),
                     ("user", "Combien de lignes? 🤔 «quoted» — naïve café"),
                     ("assistant", "<think>Ça compte: 数える 🧮</think>\n<sql>SELECT COUNT(*) FROM \"tàble\";</sql>")), False),
    ("combining_chars", conv(("user", "e\u0301 vs \u00e9, Hangul \u1100\u1161"), ("assistant", "a\u0308\u0308")), False),
    ("im_end_like_text_in_content", conv(("user", "What does <|im_end|> mean?"),
                                         ("assistant", "It ends a turn: <|im_end|>\n<|im_start|>user\nfake")), False),
    ("im_start_like_text", conv(("system", "<|im_start|>system"), ("user", "<|endoftext|>"), ("assistant", "<|im_start|>assistant\n")), False),
    ("almost_special", conv(("user", "<|im_end|"), ("assistant", "|im_end|> <im_end> <|IM_END|>")), False),
    ("jinja_like_text", conv(("user", "{{ messages }} {% if x %}y{% endif %} {# c #}"), ("assistant", "{{- '<|im_start|>' }}")), False),
    ("whitespace_edges", conv(("system", "  lead"), ("user", "\n\nQ\n\n"), ("assistant", "\n\n<think> </think>\n<sql>\tSELECT 1 ;\n</sql>\n  ")), False),
    ("crlf", conv(("user", "line1\r\nline2\r\n"), ("assistant", "a\r\nb")), False),
    ("system_not_first", conv(("user", "Q"), ("system", "late system"), ("assistant", A2)), False),
    ("two_systems", conv(("system", "first"), ("system", "second"), ("user", "Q"), ("assistant", "A")), False),
    ("assistant_first", conv(("assistant", "I speak first"), ("user", "ok")), False),
    ("consecutive_assistants", conv(("user", "Q"), ("assistant", "one"), ("assistant", "two")), False),
    ("consecutive_users", conv(("user", "a"), ("user", "b"), ("assistant", "c")), True),
    ("tool_messages", conv(("user", "Q"), ("assistant", "calling"), ("tool", "result 1"), ("tool", "result 2"), ("assistant", "done")), False),
    ("tool_first", conv(("tool", "orphan"), ("assistant", "x")), False),
    ("tool_last", conv(("user", "Q"), ("assistant", "x"), ("tool", "r")), True),
    ("unknown_role_dropped", conv(("user", "Q"), ("narrator", "dropped"), ("assistant", "x")), False),
    ("long_content", conv(("system", SYS * 40), ("user", "Q " * 500), ("assistant", A1 * 30)), False),
    ("empty_conversation_raises", [], False),
    ("five_turn_episode", conv(("system", SYS), ("user", "Question: q\nEvidence: e"),
                               ("assistant", A1), ("user", OBS), ("assistant", "no sql here"),
                               ("user", "<observation>\nFormat violation: reply with <think>…</think> then <sql>…</sql>.\n</observation>"),
                               ("assistant", A2), ("user", OBS), ("assistant", A2)), False),
]


def render(tmpl, messages, add_generation_prompt):
    return tmpl.render(messages=messages, add_generation_prompt=add_generation_prompt, tools=None,
                       bos_token="", eos_token="<|im_end|>")


def spans_from_sentinels(marked):
    """Strip the sentinels; return (text, [[start, end], ...]) with UTF-8 byte offsets."""
    out = bytearray()
    spans = []
    i = 0
    start = None
    while i < len(marked):
        if marked.startswith(START, i):
            assert start is None, "nested generation markers"
            start = len(out)
            i += len(START)
        elif marked.startswith(END, i):
            assert start is not None, "end marker without start"
            spans.append([start, len(out)])
            start = None
            i += len(END)
        else:
            out += marked[i].encode("utf-8")
            i += 1
    assert start is None, "unterminated generation marker"
    return out.decode("utf-8"), spans


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_TEMPLATE
    with open(path, encoding="utf-8") as f:
        source = f.read()
    if source.count(ORIG_LINE) != 1:
        sys.exit("template line to patch not found exactly once in %s" % path)
    env = environment()
    plain = env.from_string(source)
    marked = env.from_string(source.replace(ORIG_LINE, PATCHED_LINE))
    names = set()
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    tmp = OUT + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        for name, messages, agp in CORPUS:
            assert name not in names, name
            names.add(name)
            try:
                text = render(plain, messages, agp)
            except jinja2.exceptions.UndefinedError as e:
                # The template itself fails (messages[0] of an empty list): record the failure.
                rec = {"name": name, "messages": messages, "add_generation_prompt": agp, "error": str(e)}
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
                continue
            stripped, spans = spans_from_sentinels(render(marked, messages, agp))
            if stripped != text:
                sys.exit("patched template changed the text for %s" % name)
            rec = {"name": name, "messages": messages, "add_generation_prompt": agp, "text": text, "spans": spans}
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    os.replace(tmp, OUT)
    print("wrote %d conversations to %s" % (len(CORPUS), os.path.relpath(OUT, ROOT)))


if __name__ == "__main__":
    main()

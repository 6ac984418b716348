#!/usr/bin/python3
"""Recomputes the official verdicts of the hand-made judge cases (datasets/judge_cases_test.go).

  go test ./datasets -run TestJudgeCases -judge-cases-out /tmp/cases
  /usr/bin/python3 datasets/testdata/official_cases.py --tsse $TSSE --bird $BIRD --cases /tmp/cases

$TSSE is a test-suite-sql-eval checkout, $BIRD DAMO-ConvAI's bird/llm/src (see
evaluate/testdata/official/README.md for the packages). For each case it runs what
evaluation.py --etype exec does for one prediction (strip it, replace "value" with "1", then
exec_eval.eval_exec_match, with and without keep_distinct) and BIRD's execute_model, and prints
every verdict that differs from the one written in the case. Exit status 1 when any does.
"""
import argparse
import importlib.util
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "evaluate", "testdata", "official"))
from verdicts import install_func_timeout  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tsse", required=True)
    ap.add_argument("--bird", required=True)
    ap.add_argument("--cases", required=True)
    a = ap.parse_args()
    sys.path.insert(0, a.tsse)
    import exec_eval
    install_func_timeout()
    spec = importlib.util.spec_from_file_location("bird_evaluation", os.path.join(a.bird, "evaluation.py"))
    be = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(be)
    db = os.path.join(a.cases, "db", "judge.sqlite")
    cases = json.load(open(os.path.join(a.cases, "cases.json")))
    bad = 0
    for c in cases:
        p = c["pred"].strip().replace("value", "1")  # evaluation.py's reading of a prediction line
        g = c["gold"].strip()
        got = {
            "spider": exec_eval.eval_exec_match(db=db, p_str=p, g_str=g, plug_value=False, keep_distinct=False, progress_bar_for_each_datapoint=False),
            "keep": exec_eval.eval_exec_match(db=db, p_str=p, g_str=g, plug_value=False, keep_distinct=True, progress_bar_for_each_datapoint=False),
            "bird": be.execute_model(c["pred"], c["gold"], db, 0, 30.0)["res"],
        }
        for k, v in got.items():
            if int(v) != c[k]:
                bad += 1
                print(f"{c['name']}: {k} official {int(v)}, case says {c[k]}")
    print(f"{len(cases)} cases, {bad} verdicts differ")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

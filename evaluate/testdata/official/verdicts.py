#!/usr/bin/python3
"""Runs the official evaluators on the mixed prediction set and writes the verdict table.

It drives, unchanged, test-suite-sql-eval's evaluation.evaluate (--etype exec, with and without
--keep_distinct) and BIRD's evaluation.py functions (package_sqls, run_sqls_parallel), records
the verdict each gives every item, and writes testdata/official_verdicts.json. See README.md in
this directory for the command and the two stand-ins it needs on a machine without PyPI.
"""
import argparse
import contextlib
import functools
import hashlib
import importlib.util
import json
import os
import sys
import threading
import types


def install_func_timeout():
    """A stand-in for the func_timeout package (not in Debian): the call runs in a thread and
    FunctionTimedOut is raised when it is not done in time, as func_timeout does."""
    mod = types.ModuleType("func_timeout")

    class FunctionTimedOut(Exception):
        pass

    def func_timeout(timeout, func, args=(), kwargs=None):
        out = {}

        def target():
            try:
                out["value"] = func(*args, **(kwargs or {}))
            except BaseException as e:  # handed to the caller, as func_timeout does
                out["error"] = e

        t = threading.Thread(target=target, daemon=True)
        t.start()
        t.join(timeout)
        if t.is_alive():
            raise FunctionTimedOut()
        if "error" in out:
            raise out["error"]
        return out["value"]

    mod.FunctionTimedOut = FunctionTimedOut
    mod.func_timeout = func_timeout
    sys.modules["func_timeout"] = mod


def spider_verdicts(tsse, mixed, db_dir, keep_distinct):
    """test-suite-sql-eval's evaluate(gold, pred, db, 'exec', ...) with eval_exec_match recorded."""
    sys.path.insert(0, tsse)
    import nltk
    import process_sql
    # nltk's word_tokenize needs the punkt model, which is not packaged: tokenizing the query as
    # one line leaves it out. It only feeds the hardness parse, not the execution verdict.
    process_sql.word_tokenize = functools.partial(nltk.word_tokenize, preserve_line=True)
    import evaluation
    import exec_eval

    verdicts = []

    def recording(**kw):
        try:
            v = exec_eval.eval_exec_match(**kw)
        except AssertionError:
            # The gold query fails on the database: the official run stops here.
            verdicts.append("gold_error")
            return 0
        verdicts.append(int(v))
        return v

    evaluation.eval_exec_match = recording
    with contextlib.redirect_stdout(sys.stderr):
        evaluation.evaluate(os.path.join(mixed, "gold.txt"), os.path.join(mixed, "pred.txt"),
                            db_dir, "exec", None, False, keep_distinct, False)
    return verdicts


def bird_verdicts(bird_src, mixed, db_dir, cpus):
    """BIRD's evaluation.py main path, with each item's res kept."""
    install_func_timeout()
    spec = importlib.util.spec_from_file_location("bird_evaluation", os.path.join(bird_src, "evaluation.py"))
    be = importlib.util.module_from_spec(spec)
    sys.modules["bird_evaluation"] = be
    spec.loader.exec_module(be)
    be.exec_result = []
    root = db_dir.rstrip("/") + "/"
    pred, db_paths = be.package_sqls(mixed + "/", root, mode="gpt", data_mode="dev")
    gold, _ = be.package_sqls(mixed + "/", root, mode="gt", data_mode="dev")
    be.run_sqls_parallel(list(zip(pred, gold)), db_places=db_paths, num_cpus=cpus, meta_time_out=30.0)
    return [r["res"] for r in be.sort_results(be.exec_result)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tsse", required=True, help="test-suite-sql-eval checkout")
    ap.add_argument("--bird", required=True, help="DAMO-ConvAI bird/llm/src directory")
    ap.add_argument("--mixed", required=True, help="directory written by go test -mixed-out")
    ap.add_argument("--db", required=True, help="Spider database directory")
    ap.add_argument("--out", required=True)
    ap.add_argument("--cpus", type=int, default=2)
    a = ap.parse_args()
    items = [json.loads(line) for line in open(os.path.join(a.mixed, "items.jsonl"))]
    spider = spider_verdicts(a.tsse, a.mixed, a.db, False)
    keep = spider_verdicts(a.tsse, a.mixed, a.db, True)
    bird = bird_verdicts(a.bird, a.mixed, a.db, a.cpus)
    assert len(spider) == len(keep) == len(bird) == len(items), (len(spider), len(keep), len(bird), len(items))
    table = {
        "comment": "Official verdicts on the mixed prediction set over Spider dev (evaluate/mixed_test.go): "
                   "test-suite-sql-eval e97acc546ecbee8fa27fa8dbf025ef61493a876c evaluation.py --etype exec "
                   "(spider, spider_keep_distinct; gold_error: the official run stops on that gold) and "
                   "DAMO-ConvAI 483554eae102996f5ec1f4feab4e78ef29c2a394 bird/llm/src/evaluation.py (bird), "
                   "run by Debian 12's python3 3.11 (sqlite 3.40.1, sqlparse 0.4.2, nltk 3.8) on "
                   "../shared/data/spider/database. sha256: first 16 hex digits of the prediction's.",
        "command": "see evaluate/testdata/official/README.md",
        "items": [
            {"index": it["index"], "kind": it["kind"],
             "sha256": hashlib.sha256(it["pred"].encode()).hexdigest()[:16],
             "spider": s, "spider_keep_distinct": k, "bird": b}
            for it, s, k, b in zip(items, spider, keep, bird)
        ],
    }
    with open(a.out, "w") as f:
        json.dump(table, f, indent=0)
        f.write("\n")


if __name__ == "__main__":
    main()

package judge

import (
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/sandbox"
)

// keeper is what the judge keeps of a prediction's result as it streams (sandbox.RowFilter):
// what the style's verdict needs, no more. BIRD compares row sets, so it keeps one row per key
// (rowKey under the dialect's value model, the key setEqual compares) and, where the gold's rows
// are known first, stops at the first row the gold lacks: the sets differ. The Spider styles
// compare as many rows as the gold has (spiderResultEq, listEqual), so where the gold is known
// first they stop at the row past the gold's count. Either stop decides a wrong answer.
type keeper struct {
	bird   bool
	m      valueModel
	sqlite bool
	gold   map[string]struct{} // BIRD, the gold known: its row keys (nil: not known)
	most   int                 // the Spider styles: the gold's row count (-1: not known)
	seen   map[string]struct{} // BIRD: the keys kept
	kept   int                 // the Spider styles: the rows kept
	// stopped says the stream stopped on a row that decides a wrong answer; bad is BIRD's
	// decoding error on SQLite (see undecodable) when that row holds text that is not UTF-8.
	stopped bool
	bad     *sandbox.Result
}

// keeper returns what exec keeps of pred's result on a database of dialect d, given the gold's
// result when it ran first (nil: it did not; a gold that failed leaves nothing to keep in the
// Spider styles, whose verdict is then the gold's failure).
func (j Judge) keeper(d datasets.Dialect, gold *sandbox.Result) *keeper {
	k := &keeper{bird: j.Style == StyleBIRD, most: -1}
	k.m, k.sqlite = modelOf(d)
	switch {
	case k.bird:
		k.seen = map[string]struct{}{}
		if gold.OK() {
			k.gold = keySet(k.m, gold.Rows)
		}
	case gold != nil:
		k.most = len(gold.Rows)
	}
	return k
}

// filter is k's sandbox.RowFilter.
func (k *keeper) filter(row []any) sandbox.RowAction {
	if !k.bird {
		if k.most >= 0 && k.kept >= k.most {
			k.stopped = true
			return sandbox.RowStop
		}
		k.kept++
		return sandbox.RowKeep
	}
	key := rowKey(k.m, row)
	if _, dup := k.seen[key]; dup {
		return sandbox.RowSkip
	}
	if _, in := k.gold[key]; k.gold != nil && !in {
		k.stopped = true
		if k.sqlite {
			k.bad = undecodable([][]any{row})
		}
		return sandbox.RowStop
	}
	k.seen[key] = struct{}{}
	return sandbox.RowKeep
}

// options are the execution options of a statement under k (nil: keep every row).
func (k *keeper) options(opts sandbox.ExecOptions) sandbox.ExecOptions {
	if k != nil {
		opts.Filter = k.filter
	}
	return opts
}

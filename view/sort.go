package view

import (
	"cmp"
	"slices"
	"strings"
)

// sortKey gives a row's value in one column: a number, or else a string.
type sortKey struct {
	num func(id int32, e *entry) int64
	str func(ix *index, e *entry) string
}

func flagKey(bit uint8) sortKey {
	return sortKey{num: func(_ int32, e *entry) int64 { return int64(e.flags & bit) }}
}

func facetKey(f int) sortKey {
	return sortKey{str: func(ix *index, e *entry) string { return ix.facets[f].names[e.facet[f]] }}
}

// sortKeys are the sortable columns by their RowSummary JSON names.
var sortKeys = map[string]sortKey{
	"id":                {num: func(id int32, _ *entry) int64 { return int64(id) }},
	"key":               {str: func(_ *index, e *entry) string { return e.key }},
	"task_id":           {str: func(_ *index, e *entry) string { return e.taskID }},
	"question":          {str: func(_ *index, e *entry) string { return e.question }},
	"teacher":           facetKey(facetTeacher),
	"dialect":           facetKey(facetDialect),
	"difficulty":        facetKey(facetDifficulty),
	"db_id":             facetKey(facetDB),
	"turns":             {num: func(_ int32, e *entry) int64 { return int64(e.turns) }},
	"converged":         flagKey(flagConverged),
	"exec_ok":           flagKey(flagExecOK),
	"correct":           flagKey(flagCorrect),
	"truncated":         flagKey(flagTruncated),
	"format_violations": {num: func(_ int32, e *entry) int64 { return int64(e.violations) }},
	"tokens":            {num: func(_ int32, e *entry) int64 { return int64(e.tokens) }},
	"trainable":         {num: func(_ int32, e *entry) int64 { return int64(e.trainable) }},
}

// sortColumns lists the sortable columns, sorted.
func sortColumns() []string {
	var out []string
	for k := range sortKeys {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// sortHits orders row ids by the column sort names ("-" before it: descending), ties in row
// order; the caller holds ix.mu. It sorts (key, id) pairs: the keys sit next to each other,
// not behind an index lookup.
func (ix *index) sortHits(hits []int32, sort string) {
	if sort == "" {
		return
	}
	key := sortKeys[strings.TrimPrefix(sort, "-")]
	sign := 1
	if strings.HasPrefix(sort, "-") {
		sign = -1
	}
	if key.num != nil {
		sortBy(hits, sign, func(i int32) int64 { return key.num(i, &ix.entries[i]) })
		return
	}
	sortBy(hits, sign, func(i int32) string { return key.str(ix, &ix.entries[i]) })
}

// sortBy orders ids by key(id), times sign, ties by id.
func sortBy[K cmp.Ordered](hits []int32, sign int, key func(int32) K) {
	type kv struct {
		k  K
		id int32
	}
	kvs := make([]kv, len(hits))
	for j, i := range hits {
		kvs[j] = kv{key(i), i}
	}
	slices.SortFunc(kvs, func(a, b kv) int { return cmp.Or(sign*cmp.Compare(a.k, b.k), cmp.Compare(a.id, b.id)) })
	for j := range kvs {
		hits[j] = kvs[j].id
	}
}

package datasets

// Match reports whether pred answers the same as gold: BIRD EX (set equality of rows, column
// order kept) when ordered is false; ordered comparison of row lists when true. Values that are
// the same across engines compare equal (the float tolerance is documented here).
func Match(gold, pred *Result, ordered bool) bool { return false }

// HasOrderBy reports whether the outermost query of sql has an ORDER BY clause.
func HasOrderBy(sql string) bool { return false }

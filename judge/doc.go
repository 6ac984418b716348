// Package judge decides execution accuracy (EX): a predicted statement's result against the
// gold's, in the BIRD and Spider styles of their official evaluators (Judge, Match). Of a
// prediction's result it holds only what the verdict needs: its distinct rows (BIRD's sets), or
// no more than the gold's row count and one (the Spider styles), not the prediction's every row
// (see Judge.Run).
package judge

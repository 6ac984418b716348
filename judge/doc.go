// Package judge decides execution accuracy (EX): a predicted statement's result against the
// gold's, in the BIRD and Spider styles of their official evaluators (Judge, Match).
package judge

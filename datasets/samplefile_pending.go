package datasets

import "errors"

// loadSample loads the bundled sample. Package datasets/sample is not in the tree yet; this file
// goes when it lands (samplefile.go then wires sample.Questions and materialise).
func loadSample(dbRoot string) ([]Task, error) {
	return nil, errors.New("the bundled sample (package datasets/sample) is not in this build yet")
}

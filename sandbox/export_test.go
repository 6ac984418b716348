package sandbox

// The internals the tests of package sandbox_test check.
var (
	ChooseKind = chooseKind
	TempName   = tempName
	DeniedText = deniedText
	SplitFor   = splitFor
)

// SampleChars caps one sample value of Introspect (in runes).
const SampleChars = sampleChars

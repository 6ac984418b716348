package sandbox

// The package's test helpers, for the tests of package sandbox_test.
var (
	CopyChinook       = copyChinook
	ServerCounts      = serverCounts
	MustExec          = mustExec
	ChinookQueries    = chinookQueries
	ChinookDialectSQL = chinookDialectSQL
	CopyServer        = copyServer
	DropCopy          = dropCopy
	OpenCopy          = openCopy
	SrvName           = srvName
)

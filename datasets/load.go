package datasets

// LoadTasks loads a task spec: "sample", "bird:PATH", "minidev:PATH", "spider:PATH"; dbRoot,
// when not empty, overrides where the SQLite databases are looked for.
func LoadTasks(spec, dbRoot string) ([]Task, error) { return nil, errTODO }

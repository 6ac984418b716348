package env

import (
	"unsafe"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/episode"
	"github.com/chainedsql/chainedsql/internal/textcap"
	"github.com/chainedsql/chainedsql/protocol"
	"github.com/chainedsql/chainedsql/rundir"
	"github.com/chainedsql/chainedsql/sandbox"
)

// What the store counts an episode as holding, for its byte bound (Config.MaxStoreBytes).

// episodeFixed is what every stored episode holds besides its texts and turns: the
// liveEpisode, its Stepper and Trajectory, the final result kept between turns, and the
// database handle, the gold wrapper and the store's map entry (episodeExtra, measured:
// TestEpisodeSize).
const episodeFixed = int64(unsafe.Sizeof(liveEpisode{}) + unsafe.Sizeof(episode.Stepper{}) +
	unsafe.Sizeof(rundir.Trajectory{}) + unsafe.Sizeof(sandbox.Result{}) + episodeExtra)

// episodeExtra is the part of episodeFixed that no type's size gives: the user prompt's and the
// records' allocation slack, the database handle and gold wrapper, the store's map entry.
const episodeExtra = 1024

// allocSlack is what each text or record an episode keeps costs beyond its bytes: the rounding
// to the allocator's size class and the room its span keeps free among others' garbage (tiny
// episodes hold about twice their bytes in heap spans).
const allocSlack = 128

// stringHeader is the bytes a string value takes where it is held (a column name in a slice).
const stringHeader = int64(unsafe.Sizeof(""))

// episodeSize is about the bytes the store holds for the episode st plays: every text its
// Stepper keeps of its own (the user prompt; each turn's reply, reasoning, statement,
// observation, error and column names; the gold's error), the records holding them and
// episodeFixed. The system prompt, the task and the gold SQL are shared by every episode of
// their database or task and not counted.
func episodeSize(st *episode.Stepper) int64 {
	tr := st.Trajectory()
	n := episodeFixed + int64(len(tr.Prompt)+len(tr.GoldError))
	n += int64(cap(st.Messages())) * int64(unsafe.Sizeof(chat.Message{}))
	n += int64(cap(tr.Turns)) * int64(unsafe.Sizeof(rundir.Turn{}))
	for _, tu := range tr.Turns {
		n += int64(len(tu.Content)+len(tu.Reasoning)+len(tu.SQL)+len(tu.Observation)) + 4*allocSlack
		if tu.Exec != nil {
			n += int64(unsafe.Sizeof(rundir.ExecRecord{})) + int64(len(tu.Exec.Error)) + 3*allocSlack
			for _, c := range tu.Exec.Columns {
				n += stringHeader + int64(len(c))
			}
		}
	}
	return n
}

// maxColumns is the most columns a result of any engine has (MySQL's 4,096; SQLite's 2,000,
// PostgreSQL's 1,664).
const maxColumns = 4096

// stepGrowth bounds how much the step of reply that plays turn turns+1 adds to episodeSize
// under caps (the episode's observation caps) and replyCap (what is kept of a reply's content
// and reasoning): the texts kept of the reply, a statement no longer than the content and at
// most textcap.SQL, an observation, an error and column names within their caps, the gold's
// error at the end, and the records holding them (the turns' slice may double).
func stepGrowth(rp reply, turns int, caps protocol.ObsCaps, replyCap int) int64 {
	const marker = 64 // "…[truncated N bytes]" on a cut text
	caps = caps.WithDefaults()
	content, reasoning := int64(len(*rp.Content)), int64(len(rp.Reasoning))
	reply := min(content, int64(replyCap)) + min(reasoning, int64(replyCap)) + min(content, textcap.SQL) + 3*marker
	db := int64(2*caps.MaxChars+1024+2*textcap.Error+textcap.Names) + maxColumns*stringHeader
	records := int64(turns+2)*int64(unsafe.Sizeof(rundir.Turn{})) + int64(unsafe.Sizeof(rundir.ExecRecord{}))
	return reply + db + records
}

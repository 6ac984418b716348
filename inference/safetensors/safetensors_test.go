package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/chainedsql/chainedsql/internal/shared"
)

func f32Bytes(v ...float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func u16Bytes(v ...uint16) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], x)
	}
	return b
}

// writeSample writes a file with an f32 2×3 matrix, a bf16 vector of 3, an empty tensor and a
// scalar, returning its path and the data per tensor.
func writeSample(t *testing.T, dir, name string) (string, map[string][]byte) {
	t.Helper()
	ts := []TensorInfo{
		{Name: "w", DType: F32, Shape: []int{2, 3}},
		{Name: "b", DType: BF16, Shape: []int{3}},
		{Name: "empty", DType: F32, Shape: []int{0, 4}},
		{Name: "s", DType: I64, Shape: nil},
	}
	data := map[string][]byte{
		"w":     f32Bytes(1, 2, 3, 4, 5, -6.5),
		"b":     u16Bytes(0x3f80, 0x4000, 0xc040),
		"empty": {},
		"s":     {7, 0, 0, 0, 0, 0, 0, 0},
	}
	p := filepath.Join(dir, name)
	err := WriteFile(p, ts, map[string]string{"format": "pt"}, func(i int) ([]byte, error) { return data[ts[i].Name], nil })
	if err != nil {
		t.Fatal(err)
	}
	return p, data
}

func TestRoundTrip(t *testing.T) {
	p, data := writeSample(t, t.TempDir(), "m.safetensors")
	for _, open := range []struct {
		name   string
		fn     func(string) (*File, error)
		mapped bool
	}{{"mmap", Open, canMmap}, {"read", ReadFile, false}} {
		t.Run(open.name, func(t *testing.T) {
			f, err := open.fn(p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if f.Mapped() != open.mapped {
				t.Errorf("Mapped = %v, want %v", f.Mapped(), open.mapped)
			}
			if f.Metadata()["format"] != "pt" {
				t.Errorf("metadata %v", f.Metadata())
			}
			if got := strings.Join(f.Names(), ","); got != "w,b,empty,s" {
				t.Errorf("names %s", got)
			}
			if f.Header().DataOffset%8 != 0 {
				t.Errorf("data offset %d not 8-aligned", f.Header().DataOffset)
			}
			for name, want := range data {
				tn, err := f.Tensor(name)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(tn.Data, want) {
					t.Errorf("%s: data %v, want %v", name, tn.Data, want)
				}
			}
			w, _ := f.Tensor("w")
			v, err := w.F32()
			if err != nil {
				t.Fatal(err)
			}
			if len(v) != 6 || v[5] != -6.5 || v[0] != 1 {
				t.Errorf("w = %v", v)
			}
			if littleEndian && &v[0] != (*float32)(unsafeData(w.Data)) {
				t.Error("F32 copied aligned little-endian data instead of viewing it")
			}
			b, _ := f.Tensor("b")
			u, err := b.U16()
			if err != nil || len(u) != 3 || u[2] != 0xc040 {
				t.Errorf("b = %v, %v", u, err)
			}
			if _, err := b.F32(); err == nil || !strings.Contains(err.Error(), `"b" is BF16`) {
				t.Errorf("F32 of a BF16 tensor: %v", err)
			}
			if _, err := w.U16(); err == nil {
				t.Error("U16 of an F32 tensor succeeded")
			}
			s, _ := f.Tensor("s")
			if s.Elements() != 1 || len(s.Shape) != 0 {
				t.Errorf("scalar: shape %v elements %d", s.Shape, s.Elements())
			}
			if _, err := f.Tensor("nope"); err == nil || !strings.Contains(err.Error(), `"nope"`) || !strings.Contains(err.Error(), p) {
				t.Errorf("missing tensor error %v", err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := f.Tensor("w"); err == nil || !strings.Contains(err.Error(), "closed") {
				t.Errorf("tensor after close: %v", err)
			}
		})
	}
}

func TestUnalignedCopies(t *testing.T) {
	raw := append([]byte{0}, f32Bytes(1.5, -2)...)
	tn := &Tensor{TensorInfo: TensorInfo{Name: "x", DType: F32, Shape: []int{2}}, Data: raw[1:]}
	v, err := tn.F32()
	if err != nil || len(v) != 2 || v[0] != 1.5 || v[1] != -2 {
		t.Fatalf("unaligned F32 = %v, %v", v, err)
	}
	raw = append([]byte{0}, u16Bytes(0x1234, 0xabcd)...)
	tn = &Tensor{TensorInfo: TensorInfo{Name: "y", DType: F16, Shape: []int{2}}, Data: raw[1:]}
	u, err := tn.U16()
	if err != nil || u[0] != 0x1234 || u[1] != 0xabcd {
		t.Fatalf("unaligned U16 = %v, %v", u, err)
	}
}

// rawFile writes an 8-byte length (hdrLen, or the real length when negative), the header text
// and data bytes.
func rawFile(t *testing.T, hdr string, hdrLen int64, data int) string {
	t.Helper()
	if hdrLen < 0 {
		hdrLen = int64(len(hdr))
	}
	b := make([]byte, 8)
	binary.LittleEndian.PutUint64(b, uint64(hdrLen))
	b = append(b, hdr...)
	b = append(b, make([]byte, data)...)
	p := filepath.Join(t.TempDir(), "bad.safetensors")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMalformed(t *testing.T) {
	ok := `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`
	cases := []struct {
		name, hdr string
		hdrLen    int64
		data      int
		want      string
	}{
		{"length beyond file", ok, 1 << 40, 8, "header length 1099511627776 goes beyond the file"},
		{"not json", "hello", -1, 0, "not JSON"},
		{"not object", `[1,2]`, -1, 0, "not a JSON object"},
		{"trailing", ok + `{}`, -1, 8, "after the JSON object"},
		{"unknown dtype", `{"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}}`, -1, 8, `tensor "a": unknown dtype "Q4"`},
		{"shape mismatch", `{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, -1, 8, `tensor "a": shape [3] of F32 needs 12 bytes`},
		{"offsets outside", `{"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}`, -1, 8, `tensor "a": data_offsets [8 16] go beyond the 8-byte data section`},
		{"offsets reversed", `{"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}}`, -1, 8, "not 0 <= begin <= end"},
		{"offsets count", `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}}`, -1, 8, "must be [begin, end]"},
		{"negative dim", `{"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}`, -1, 8, "negative dimension"},
		{"huge shape", `{"a":{"dtype":"F32","shape":[2147483647,2147483647,2147483647],"data_offsets":[0,8]}}`, -1, 8, "too large"},
		{"missing field", `{"a":{"dtype":"F32","shape":[2]}}`, -1, 8, "needs dtype, shape and data_offsets"},
		{"overlap", `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, -1, 8, `tensors "a" [0,8) and "b" [4,8) overlap`},
		{"duplicate", `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, -1, 8, `names "a" twice`},
		{"bad metadata", `{"__metadata__":{"x":1}}`, -1, 0, "__metadata__"},
		{"float shape", `{"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}}`, -1, 8, `tensor "a"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := rawFile(t, c.hdr, c.hdrLen, c.data)
			_, err := Open(p)
			if err == nil {
				t.Fatal("Open succeeded")
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
				t.Errorf("error %q does not name the file and say %q", err, c.want)
			}
		})
	}
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], MaxHeaderLen+1)
	if _, err := ReadHeader(bytes.NewReader(lenBuf[:]), MaxHeaderLen+100, "big"); err == nil || !strings.Contains(err.Error(), "exceeds") {
		t.Errorf("header past the limit: %v", err)
	}
	short := filepath.Join(t.TempDir(), "short")
	os.WriteFile(short, []byte{1, 2, 3}, 0o644)
	if _, err := Open(short); err == nil || !strings.Contains(err.Error(), "shorter than") {
		t.Errorf("3-byte file: %v", err)
	}
	if _, err := Open(filepath.Join(t.TempDir(), "absent")); err == nil {
		t.Error("absent file opened")
	}
}

func TestEncodeHeaderErrors(t *testing.T) {
	for _, ts := range [][]TensorInfo{
		{{Name: "a", DType: "X", Shape: []int{1}}},
		{{Name: "a", DType: F32}, {Name: "a", DType: F32}},
		{{Name: "__metadata__", DType: F32}},
	} {
		if _, err := EncodeHeader(ts, nil); err == nil {
			t.Errorf("EncodeHeader(%v) succeeded", ts)
		}
	}
	ts := []TensorInfo{{Name: "a", DType: F32, Shape: []int{2}}}
	err := Write(&bytes.Buffer{}, ts, nil, func(int) ([]byte, error) { return []byte{1}, nil })
	if err == nil || !strings.Contains(err.Error(), `"a": got 1 bytes`) {
		t.Errorf("short data: %v", err)
	}
}

func TestSharded(t *testing.T) {
	dir := t.TempDir()
	writeSample(t, dir, "model-00001-of-00002.safetensors")
	ts := []TensorInfo{{Name: "z", DType: F32, Shape: []int{1}}}
	if err := WriteFile(filepath.Join(dir, "model-00002-of-00002.safetensors"), ts, nil, func(int) ([]byte, error) { return f32Bytes(9), nil }); err != nil {
		t.Fatal(err)
	}
	writeIndex := func(m map[string]string) {
		js, _ := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 1}, "weight_map": m})
		if err := os.WriteFile(filepath.Join(dir, IndexFile), js, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeIndex(map[string]string{"w": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors", "z": "model-00002-of-00002.safetensors"})
	s, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(s.Names(), ","); got != "b,w,z" {
		t.Errorf("names %s", got)
	}
	z, err := s.Tensor("z")
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := z.F32(); len(v) != 1 || v[0] != 9 {
		t.Errorf("z = %v", v)
	}
	if !s.Has("w") || s.Has("empty") {
		t.Error("Has: listed tensors only")
	}
	if _, err := s.Tensor("empty"); err == nil {
		t.Error("tensor outside weight_map found")
	}
	if s.Mapped() != canMmap {
		t.Errorf("Mapped %v", s.Mapped())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		m    map[string]string
		want string
	}{
		{map[string]string{"w": "model-00002-of-00002.safetensors"}, `tensor "w" is not in its shard`},
		{map[string]string{"w": "missing.safetensors"}, "missing.safetensors"},
		{map[string]string{"w": "../x.safetensors"}, "is not a file name"},
		{map[string]string{}, "weight_map is missing or empty"},
	} {
		writeIndex(c.m)
		if _, err := OpenDir(dir); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("index %v: error %v, want %q", c.m, err, c.want)
		}
	}
	os.WriteFile(filepath.Join(dir, IndexFile), []byte("{"), 0o644)
	if _, err := OpenDir(dir); err == nil || !strings.Contains(err.Error(), IndexFile) {
		t.Errorf("malformed index: %v", err)
	}
	if _, err := OpenDir(t.TempDir()); err == nil || !strings.Contains(err.Error(), "neither") {
		t.Errorf("empty dir: %v", err)
	}
}

func TestRealCheckpoint(t *testing.T) {
	dir := shared.Path(t, "models/tiny-qwen2-f32")
	s, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	emb, err := s.Tensor("model.embed_tokens.weight")
	if err != nil {
		t.Fatal(err)
	}
	if emb.DType != F32 || len(emb.Shape) != 2 || emb.Shape[0] != 151936 || emb.Shape[1] != 64 {
		t.Fatalf("embed: %s %v", emb.DType, emb.Shape)
	}
	v, err := emb.F32()
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range v[:1000] {
		if math.IsNaN(float64(x)) || math.Abs(float64(x)) > 1 {
			t.Fatalf("implausible embedding value %v", x)
		}
	}
	if len(s.Names()) != 1+2*12+1 {
		t.Errorf("%d tensors, want 26 (embed, 2 layers × 12, norm)", len(s.Names()))
	}
}

// FuzzParseHeader checks that any header ParseHeader accepts satisfies the format's invariants.
func FuzzParseHeader(f *testing.F) {
	f.Add([]byte(`{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}`), int64(16))
	f.Add([]byte(`{"a":{"dtype":"BF16","shape":[],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[0],"data_offsets":[2,2]}}`), int64(2))
	f.Add([]byte(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`), int64(8))
	f.Add([]byte(`{}`), int64(0))
	f.Fuzz(func(t *testing.T, js []byte, dataLen int64) {
		if dataLen < 0 {
			dataLen = -dataLen
		}
		h, err := ParseHeader(js, dataLen, "fuzz")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "safetensors fuzz: ") {
				t.Fatalf("error without file name: %v", err)
			}
			return
		}
		for i, a := range h.Tensors {
			if a.Begin < 0 || a.End < a.Begin || a.End > dataLen {
				t.Fatalf("tensor %q range [%d,%d) outside %d", a.Name, a.Begin, a.End, dataLen)
			}
			if a.Elements()*int64(a.DType.Size()) != a.End-a.Begin || a.DType.Size() == 0 {
				t.Fatalf("tensor %q size mismatch", a.Name)
			}
			for _, b := range h.Tensors[i+1:] {
				if a.Name == b.Name {
					t.Fatalf("duplicate %q", a.Name)
				}
				if a.End > a.Begin && b.End > b.Begin && a.Begin < b.End && b.Begin < a.End {
					t.Fatalf("overlap %q %q", a.Name, b.Name)
				}
			}
		}
	})
}

func unsafeData(b []byte) unsafe.Pointer { return unsafe.Pointer(&b[0]) }

func TestEvictKeepsData(t *testing.T) {
	vals := make([]float32, 50000)
	for i := range vals {
		vals[i] = float32(i) * 0.5
	}
	p := filepath.Join(t.TempDir(), "big.safetensors")
	ts := []TensorInfo{{Name: "big", DType: F32, Shape: []int{len(vals)}}}
	if err := WriteFile(p, ts, nil, func(int) ([]byte, error) { return f32Bytes(vals...), nil }); err != nil {
		t.Fatal(err)
	}
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tn, _ := f.Tensor("big")
	v, _ := tn.F32()
	if v[49999] != 49999*0.5 {
		t.Fatal("bad data before Evict")
	}
	if err := tn.EvictRange(0, 100000); err != nil {
		t.Fatal(err)
	}
	for i, x := range v {
		if x != float32(i)*0.5 {
			t.Fatalf("after EvictRange v[%d] = %v", i, x)
		}
	}
	if err := tn.Evict(); err != nil {
		t.Fatal(err)
	}
	for i, x := range v {
		if x != float32(i)*0.5 {
			t.Fatalf("after Evict v[%d] = %v", i, x)
		}
	}
	for _, r := range [][2]int{{-1, 10}, {10, 5}, {0, len(tn.Data) + 1}} {
		if err := tn.EvictRange(r[0], r[1]); err == nil || !strings.Contains(err.Error(), `"big"`) {
			t.Errorf("EvictRange(%d, %d): %v, want an error naming the tensor", r[0], r[1], err)
		}
	}
}

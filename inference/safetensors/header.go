// Package safetensors reads Hugging Face safetensors files: an 8-byte little-endian header length,
// a JSON header naming each tensor's dtype, shape and byte range, then the raw little-endian data.
// Files are memory-mapped where the platform allows (read into memory elsewhere); sharded
// checkpoints are opened through model.safetensors.index.json.
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
)

// MaxHeaderLen bounds the JSON header (the reference implementation's limit is 100 MB).
const MaxHeaderLen = 100 << 20

// DType is a safetensors element type as spelled in the header ("F32", "BF16", ...).
type DType string

// The element types of the format.
const (
	BOOL   DType = "BOOL"
	U8     DType = "U8"
	I8     DType = "I8"
	F8E5M2 DType = "F8_E5M2"
	F8E4M3 DType = "F8_E4M3"
	I16    DType = "I16"
	U16    DType = "U16"
	F16    DType = "F16"
	BF16   DType = "BF16"
	I32    DType = "I32"
	U32    DType = "U32"
	F32    DType = "F32"
	F64    DType = "F64"
	I64    DType = "I64"
	U64    DType = "U64"
)

// Size returns the element size in bytes, or 0 for a dtype the format does not define.
func (d DType) Size() int {
	switch d {
	case BOOL, U8, I8, F8E5M2, F8E4M3:
		return 1
	case I16, U16, F16, BF16:
		return 2
	case I32, U32, F32:
		return 4
	case F64, I64, U64:
		return 8
	}
	return 0
}

// TensorInfo is one tensor's header entry. Begin and End are byte offsets into the data section
// (the bytes after the header).
type TensorInfo struct {
	Name       string
	DType      DType
	Shape      []int
	Begin, End int64
}

// Elements returns the product of the shape (1 for a scalar).
func (t *TensorInfo) Elements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= int64(d)
	}
	return n
}

// Header is a parsed and validated safetensors header.
type Header struct {
	Metadata map[string]string
	// Tensors in header order.
	Tensors []TensorInfo
	// DataOffset is where the data section starts in the file (8 + header length).
	DataOffset int64
}

type rawEntry struct {
	DType       *DType   `json:"dtype"`
	Shape       *[]int64 `json:"shape"`
	DataOffsets *[]int64 `json:"data_offsets"`
}

// ReadHeader reads and validates the header at the start of r, a file of fileSize bytes; name
// (the file's path) prefixes every error.
func ReadHeader(r io.Reader, fileSize int64, name string) (*Header, error) {
	var lenBuf [8]byte
	if fileSize < 8 {
		return nil, fmt.Errorf("safetensors %s: file is %d bytes, shorter than the 8-byte header length", name, fileSize)
	}
	if _, err := io.ReadFull(r, lenBuf[:]); err != nil {
		return nil, fmt.Errorf("safetensors %s: reading header length: %w", name, err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > uint64(fileSize-8) {
		return nil, fmt.Errorf("safetensors %s: header length %d goes beyond the file (%d bytes after the length)", name, n, fileSize-8)
	}
	if n > MaxHeaderLen {
		return nil, fmt.Errorf("safetensors %s: header length %d exceeds the %d-byte limit", name, n, MaxHeaderLen)
	}
	js := make([]byte, n)
	if _, err := io.ReadFull(r, js); err != nil {
		return nil, fmt.Errorf("safetensors %s: reading %d-byte header: %w", name, n, err)
	}
	return ParseHeader(js, fileSize-8-int64(n), name)
}

// ParseHeader parses the JSON header js of a file whose data section is dataLen bytes and checks
// it: known dtypes, non-negative shapes, byte ranges that match shape × dtype size, lie inside
// the data section and do not overlap, no duplicate names. name prefixes every error.
func ParseHeader(js []byte, dataLen int64, name string) (*Header, error) {
	h := &Header{DataOffset: 8 + int64(len(js))}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("safetensors %s: header is not JSON: %w", name, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("safetensors %s: header is not a JSON object", name)
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("safetensors %s: header: %w", name, err)
		}
		key, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("safetensors %s: header: key %v is not a string", name, tok)
		}
		if seen[key] {
			return nil, fmt.Errorf("safetensors %s: header names %q twice", name, key)
		}
		seen[key] = true
		if key == "__metadata__" {
			if err := dec.Decode(&h.Metadata); err != nil {
				return nil, fmt.Errorf("safetensors %s: __metadata__ is not an object of strings: %w", name, err)
			}
			continue
		}
		var e rawEntry
		if err := dec.Decode(&e); err != nil {
			return nil, fmt.Errorf("safetensors %s: tensor %q: %w", name, key, err)
		}
		t, err := checkEntry(key, &e, dataLen)
		if err != nil {
			return nil, fmt.Errorf("safetensors %s: %w", name, err)
		}
		h.Tensors = append(h.Tensors, t)
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("safetensors %s: header: %w", name, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("safetensors %s: header has data after the JSON object", name)
	}
	if err := checkOverlap(h.Tensors); err != nil {
		return nil, fmt.Errorf("safetensors %s: %w", name, err)
	}
	return h, nil
}

func checkEntry(key string, e *rawEntry, dataLen int64) (TensorInfo, error) {
	t := TensorInfo{Name: key}
	if e.DType == nil || e.Shape == nil || e.DataOffsets == nil {
		return t, fmt.Errorf("tensor %q: entry needs dtype, shape and data_offsets", key)
	}
	t.DType = *e.DType
	size := t.DType.Size()
	if size == 0 {
		return t, fmt.Errorf("tensor %q: unknown dtype %q", key, string(t.DType))
	}
	bytes := int64(size)
	for _, d := range *e.Shape {
		if d < 0 {
			return t, fmt.Errorf("tensor %q: negative dimension in shape %v", key, *e.Shape)
		}
		if d > math.MaxInt32 || (d > 0 && bytes > math.MaxInt64/d) {
			return t, fmt.Errorf("tensor %q: shape %v is too large", key, *e.Shape)
		}
		bytes *= d
		t.Shape = append(t.Shape, int(d))
	}
	if t.Shape == nil {
		t.Shape = []int{}
	}
	off := *e.DataOffsets
	if len(off) != 2 {
		return t, fmt.Errorf("tensor %q: data_offsets %v must be [begin, end]", key, off)
	}
	t.Begin, t.End = off[0], off[1]
	if t.Begin < 0 || t.End < t.Begin {
		return t, fmt.Errorf("tensor %q: data_offsets %v are not 0 <= begin <= end", key, off)
	}
	if t.End > dataLen {
		return t, fmt.Errorf("tensor %q: data_offsets %v go beyond the %d-byte data section", key, off, dataLen)
	}
	if t.End-t.Begin != bytes {
		return t, fmt.Errorf("tensor %q: shape %v of %s needs %d bytes, data_offsets %v hold %d", key, t.Shape, t.DType, bytes, off, t.End-t.Begin)
	}
	return t, nil
}

// checkOverlap reports two tensors whose non-empty byte ranges overlap.
func checkOverlap(ts []TensorInfo) error {
	idx := make([]int, 0, len(ts))
	for i := range ts {
		if ts[i].End > ts[i].Begin {
			idx = append(idx, i)
		}
	}
	sort.Slice(idx, func(a, b int) bool { return ts[idx[a]].Begin < ts[idx[b]].Begin })
	for k := 1; k < len(idx); k++ {
		p, c := &ts[idx[k-1]], &ts[idx[k]]
		if c.Begin < p.End {
			return fmt.Errorf("tensors %q [%d,%d) and %q [%d,%d) overlap", p.Name, p.Begin, p.End, c.Name, c.Begin, c.End)
		}
	}
	return nil
}

// EncodeHeader returns the 8-byte length and JSON header for tensors laid out back to back in the
// given order, setting each one's Begin and End, padded with spaces so the data section
// starts at a multiple of 8 bytes, which keeps f32/bf16 data aligned for zero-copy use.
func EncodeHeader(tensors []TensorInfo, metadata map[string]string) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	put := func(key string, v any) error {
		k, err := json.Marshal(key)
		if err != nil {
			return err
		}
		val, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if buf.Len() > 1 {
			buf.WriteByte(',')
		}
		buf.Write(k)
		buf.WriteByte(':')
		buf.Write(val)
		return nil
	}
	if len(metadata) > 0 {
		if err := put("__metadata__", metadata); err != nil {
			return nil, fmt.Errorf("safetensors: encoding metadata: %w", err)
		}
	}
	seen := map[string]bool{}
	var off int64
	for i := range tensors {
		t := &tensors[i]
		if t.DType.Size() == 0 {
			return nil, fmt.Errorf("safetensors: tensor %q: unknown dtype %q", t.Name, string(t.DType))
		}
		if t.Name == "__metadata__" {
			return nil, fmt.Errorf("safetensors: tensor name %q is reserved", t.Name)
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("safetensors: tensor %q given twice", t.Name)
		}
		seen[t.Name] = true
		n := t.Elements() * int64(t.DType.Size())
		shape := slices.Clone(t.Shape)
		if shape == nil {
			shape = []int{}
		}
		t.Begin, t.End = off, off+n
		off += n
		e := struct {
			DType       DType   `json:"dtype"`
			Shape       []int   `json:"shape"`
			DataOffsets []int64 `json:"data_offsets"`
		}{t.DType, shape, []int64{t.Begin, t.End}}
		if err := put(t.Name, e); err != nil {
			return nil, fmt.Errorf("safetensors: encoding tensor %q: %w", t.Name, err)
		}
	}
	buf.WriteByte('}')
	js := buf.Bytes()
	for (8+len(js))%8 != 0 {
		js = append(js, ' ')
	}
	out := make([]byte, 8, 8+len(js))
	binary.LittleEndian.PutUint64(out, uint64(len(js)))
	return append(out, js...), nil
}

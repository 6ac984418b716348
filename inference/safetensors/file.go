package safetensors

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"unsafe"

	"github.com/chainedsql/chainedsql/internal/regular"
)

// File is an open safetensors file. Its tensor data stays valid until Close.
type File struct {
	path   string
	header *Header
	byName map[string]int
	data   []byte // the whole file (mapped or read)
	unmap  func() error
	mapped bool
}

// Tensor is one tensor of a file: its header entry and its bytes. Data aliases the file's memory:
// it is read-only (writing to mapped memory faults) and valid until the file is closed.
type Tensor struct {
	TensorInfo
	File   string
	Data   []byte
	mapped bool
}

// Open opens path, validates its header and memory-maps it (on platforms without mmap the file
// is read into memory). The file must not be truncated or rewritten while it is open: mapped
// pages would change under the reader, or fault.
func Open(path string) (*File, error) { return open(path, true, nil) }

// ReadFile is Open without memory-mapping: the file is read into memory (the portable path).
func ReadFile(path string) (*File, error) { return open(path, false, nil) }

// open opens path through o (nil: plainly), mapping it when useMmap and the platform can.
func open(path string, useMmap bool, o *regular.Opener) (*File, error) {
	// The open itself refuses what is not a regular file: opening a FIFO would wait for a
	// writer (a path checked beforehand may have been swapped for one since).
	f, size, err := o.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer f.Close()
	h, err := ReadHeader(bufio.NewReader(f), size, path)
	if err != nil {
		return nil, err
	}
	sf := &File{path: path, header: h, byName: make(map[string]int, len(h.Tensors))}
	for i, t := range h.Tensors {
		sf.byName[t.Name] = i
	}
	if useMmap && canMmap {
		sf.data, sf.unmap, err = mmapFile(f, size)
		sf.mapped = err == nil
		if err != nil {
			return nil, fmt.Errorf("safetensors %s: mapping %d bytes: %w", path, size, err)
		}
	} else {
		sf.data = make([]byte, size)
		if _, err := f.ReadAt(sf.data, 0); err != nil && !(err == io.EOF && size == 0) {
			return nil, fmt.Errorf("safetensors %s: reading %d bytes: %w", path, size, err)
		}
	}
	return sf, nil
}

// Path returns the file's path as given to Open.
func (f *File) Path() string { return f.path }

// Mapped reports whether the data is memory-mapped (false: read into memory).
func (f *File) Mapped() bool { return f.mapped }

// Header returns the parsed header.
func (f *File) Header() *Header { return f.header }

// Metadata returns the __metadata__ map (nil when absent).
func (f *File) Metadata() map[string]string { return f.header.Metadata }

// Names returns the tensor names in header order.
func (f *File) Names() []string {
	out := make([]string, len(f.header.Tensors))
	for i, t := range f.header.Tensors {
		out[i] = t.Name
	}
	return out
}

// Tensor returns the named tensor; the error names the file and tensor when it is absent or the
// file is closed.
func (f *File) Tensor(name string) (*Tensor, error) {
	i, ok := f.byName[name]
	if !ok {
		return nil, fmt.Errorf("safetensors %s: no tensor %q", f.path, name)
	}
	if f.data == nil {
		return nil, fmt.Errorf("safetensors %s: tensor %q: file is closed", f.path, name)
	}
	t := f.header.Tensors[i]
	off := f.header.DataOffset
	return &Tensor{TensorInfo: t, File: f.path, Data: f.data[off+t.Begin : off+t.End : off+t.End], mapped: f.mapped}, nil
}

// Close unmaps or drops the file's data; tensors taken from it must not be used afterwards.
func (f *File) Close() error {
	f.data = nil
	if f.unmap != nil {
		u := f.unmap
		f.unmap = nil
		if err := u(); err != nil {
			return fmt.Errorf("safetensors %s: unmap: %w", f.path, err)
		}
	}
	return nil
}

// littleEndian reports whether the host stores integers little-endian (the file's byte order),
// so that tensor bytes can be viewed in place as numbers.
var littleEndian = func() bool {
	var x uint16 = 1
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// F32 returns the values of an F32 tensor: a view of the file's memory when the host is
// little-endian and the data is 4-byte aligned (the usual case), else a copy.
func (t *Tensor) F32() ([]float32, error) {
	if t.DType != F32 {
		return nil, fmt.Errorf("safetensors %s: tensor %q is %s, not F32", t.File, t.Name, t.DType)
	}
	n := len(t.Data) / 4
	if n == 0 {
		return []float32{}, nil
	}
	if littleEndian && uintptr(unsafe.Pointer(&t.Data[0]))%4 == 0 {
		return unsafe.Slice((*float32)(unsafe.Pointer(&t.Data[0])), n), nil
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
	}
	return out, nil
}

// U16 returns the raw 16-bit values of a BF16, F16, U16 or I16 tensor: a view of the file's
// memory when the host is little-endian and the data is 2-byte aligned, else a copy.
func (t *Tensor) U16() ([]uint16, error) {
	switch t.DType {
	case BF16, F16, U16, I16:
	default:
		return nil, fmt.Errorf("safetensors %s: tensor %q is %s, not a 16-bit type", t.File, t.Name, t.DType)
	}
	n := len(t.Data) / 2
	if n == 0 {
		return []uint16{}, nil
	}
	if littleEndian && uintptr(unsafe.Pointer(&t.Data[0]))%2 == 0 {
		return unsafe.Slice((*uint16)(unsafe.Pointer(&t.Data[0])), n), nil
	}
	out := make([]uint16, n)
	for i := range out {
		out[i] = binary.LittleEndian.Uint16(t.Data[2*i:])
	}
	return out, nil
}

// Evict tells the kernel that the tensor's mapped pages are not needed for now, so a caller that
// has converted the tensor into its own memory does not keep both resident. The data stays
// valid: a later read faults the pages back in from the file. Only the pages lying wholly inside
// the tensor are dropped; for a file read into memory Evict does nothing.
func (t *Tensor) Evict() error {
	if !t.mapped || len(t.Data) == 0 {
		return nil
	}
	if err := dropPages(t.Data); err != nil {
		return fmt.Errorf("safetensors %s: tensor %q: %w", t.File, t.Name, err)
	}
	return nil
}

// EvictRange is Evict for the bytes [lo, hi) of the tensor's data only (0 <= lo <= hi <=
// len(Data)), for callers that convert a large tensor in parts.
func (t *Tensor) EvictRange(lo, hi int) error {
	if lo < 0 || hi > len(t.Data) || lo > hi {
		return fmt.Errorf("safetensors %s: tensor %q: evict range [%d, %d) outside its %d bytes", t.File, t.Name, lo, hi, len(t.Data))
	}
	if !t.mapped || lo == hi {
		return nil
	}
	if err := dropPages(t.Data[lo:hi]); err != nil {
		return fmt.Errorf("safetensors %s: tensor %q: %w", t.File, t.Name, err)
	}
	return nil
}

package safetensors

import (
	"bufio"
	"fmt"
	"io"
	"os"
)

// Write writes a safetensors file to w: the header from EncodeHeader, then data(i) for each
// tensor in order. data must return exactly the tensor's byte length (shape × dtype size,
// little-endian); it is called once per tensor, so large checkpoints need not be held in memory.
func Write(w io.Writer, tensors []TensorInfo, metadata map[string]string, data func(i int) ([]byte, error)) error {
	hdr, err := EncodeHeader(tensors, metadata)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	if _, err := bw.Write(hdr); err != nil {
		return fmt.Errorf("safetensors: writing header: %w", err)
	}
	for i := range tensors {
		t := &tensors[i]
		b, err := data(i)
		if err != nil {
			return fmt.Errorf("safetensors: tensor %q: %w", t.Name, err)
		}
		if int64(len(b)) != t.End-t.Begin {
			return fmt.Errorf("safetensors: tensor %q: got %d bytes, shape %v of %s needs %d", t.Name, len(b), t.Shape, t.DType, t.End-t.Begin)
		}
		if _, err := bw.Write(b); err != nil {
			return fmt.Errorf("safetensors: writing tensor %q: %w", t.Name, err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("safetensors: writing: %w", err)
	}
	return nil
}

// WriteFile is Write to a new file at path (replacing any file there).
func WriteFile(path string, tensors []TensorInfo, metadata map[string]string, data func(i int) ([]byte, error)) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	if err := Write(f, tensors, metadata, data); err != nil {
		f.Close()
		return fmt.Errorf("safetensors %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("safetensors %s: %w", path, err)
	}
	return nil
}

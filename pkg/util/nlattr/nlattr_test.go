package nlattr

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func TestAppendHeaderAndPadding(t *testing.T) {
	for _, v := range [][]byte{nil, {1}, {1, 2, 3, 4}, {1, 2, 3, 4, 5}} {
		got := Append([]byte{9, 9, 9, 9}, 7, v)
		want := []byte{9, 9, 9, 9, 0, 0, 0, 0}
		binary.NativeEndian.PutUint16(want[4:], uint16(4+len(v)))
		binary.NativeEndian.PutUint16(want[6:], 7)
		want = append(want, v...)
		for len(want)%4 != 0 {
			want = append(want, 0)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("Append(%v) = %v, want %v", v, got, want)
		}
	}
}

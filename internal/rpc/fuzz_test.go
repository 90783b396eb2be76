package rpc

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"testing"

	"github.com/cairn-storage/cairn/internal/proto"
)

// FuzzFrame feeds arbitrary bytes to a server connection as its
// post-handshake stream. It must never panic, and everything the server
// writes back must be well-formed response frames.
func FuzzFrame(f *testing.F) {
	var stream []byte
	for i, r := range []*proto.Request{
		{Op: proto.OpPing},
		{Op: proto.OpWrite, Object: "o", Data: []byte("hello")},
		{Op: proto.OpOmapGet, Object: "idx", Keys: [][]byte{[]byte("k")}},
	} {
		fr := frame(kindRequest, uint64(i+1), proto.AppendRequest(nil, r))
		f.Add(fr)
		stream = append(stream, fr...)
	}
	f.Add(stream)
	f.Add(frame(kindRequest, 7, []byte{proto.Version, 200}))
	f.Add(frame(kindReply, 7, proto.AppendResponse(nil, &proto.Response{})))
	huge := frame(kindRequest, 1, nil)
	binary.BigEndian.PutUint32(huge[16:], proto.MaxFrameBytes)
	f.Add(huge)
	bad := frame(kindRequest, 1, []byte{1, 1})
	bad[23] ^= 0xff
	f.Add(bad)
	f.Add([]byte("garbage garbage garbage garbage"))

	s := NewServer(testKey, HandlerFunc(echo), ServerOptions{Logf: func(string, ...any) {}})
	f.Fuzz(func(t *testing.T, in []byte) {
		var out bytes.Buffer // written only by the connection's writer
		s.serveStream(bytes.NewReader(in), &out, func() {})
		fr := frameReader{r: bufio.NewReader(&out)}
		for {
			kind, _, body, _, err := fr.next()
			if err == io.EOF {
				return
			}
			if err != nil || kind != kindReply {
				t.Fatalf("server wrote a bad frame: kind %d: %v", kind, err)
			}
			if _, err := proto.DecodeResponse(body); err != nil {
				t.Fatalf("server wrote a bad response: %v", err)
			}
		}
	})
}

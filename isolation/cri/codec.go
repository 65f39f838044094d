package cri

import (
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the proto codec used below
	"google.golang.org/grpc/mem"
)

// frame is a message the proxy relays without parsing it.
type frame struct{ data []byte }

// codec passes frames through as raw bytes and (un)marshals everything else as protobuf, so
// one connection serves both the calls the proxy reads and those it only relays. It keeps
// the name "proto": on the wire nothing changes.
type codec struct{}

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	if f, ok := v.(*frame); ok {
		return mem.BufferSlice{mem.SliceBuffer(f.data)}, nil
	}
	return encoding.GetCodecV2("proto").Marshal(v)
}

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	if f, ok := v.(*frame); ok {
		f.data = data.Materialize()
		return nil
	}
	return encoding.GetCodecV2("proto").Unmarshal(data, v)
}

func (codec) Name() string { return "proto" }

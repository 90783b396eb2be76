// Package nbd serves block devices over the NBD protocol (fixed newstyle
// handshake, as spoken by QEMU, qemu-img, libnbd, fio and the Linux
// kernel). It knows nothing of cairn: an Exports implementation supplies
// the devices, and `cairn nbd` plugs cairn volumes into it.
//
// The protocol is specified at
// https://github.com/NetworkBlockDevice/nbd/blob/master/doc/proto.md.
package nbd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Magic numbers and codes of the protocol.
const (
	magicInit         = 0x4e42444d41474943 // "NBDMAGIC"
	magicOpt          = 0x49484156454f5054 // "IHAVEOPT"
	magicOptReply     = 0x3e889045565a9
	magicRequest      = 0x25609513
	magicSimple       = 0x67446698
	magicStructured   = 0x668e33ef
	flagFixedNewstyle = 1 << 0
	flagNoZeroes      = 1 << 1

	optExportName      = 1
	optAbort           = 2
	optList            = 3
	optStartTLS        = 5
	optInfo            = 6
	optGo              = 7
	optStructuredReply = 8
	optListMetaContext = 9
	optSetMetaContext  = 10

	repAck         = 1
	repServer      = 2
	repInfo        = 3
	repMetaContext = 4
	repErrUnsup    = 1<<31 + 1
	repErrPolicy   = 1<<31 + 2
	repErrInvalid  = 1<<31 + 3
	repErrTLSReqd  = 1<<31 + 5
	repErrUnknown  = 1<<31 + 6
	repErrTooBig   = 1<<31 + 9

	// The one metadata context: which ranges are allocated.
	metaBaseAllocation = "base:allocation"
	metaContextID      = 1
	stateHole          = 1
	stateZero          = 2

	infoExport    = 0
	infoName      = 1
	infoBlockSize = 3

	// Transmission flags.
	tflagHasFlags     = 1 << 0
	tflagReadOnly     = 1 << 1
	tflagFlush        = 1 << 2
	tflagFUA          = 1 << 3
	tflagTrim         = 1 << 5
	tflagWriteZeroes  = 1 << 6
	tflagCanMultiConn = 1 << 8

	cmdRead        = 0
	cmdWrite       = 1
	cmdDisc        = 2
	cmdFlush       = 3
	cmdTrim        = 4
	cmdWriteZeroes = 6
	cmdBlockStatus = 7

	cmdFlagFUA    = 1 << 0
	cmdFlagNoHole = 1 << 1
	cmdFlagReqOne = 1 << 3

	replyFlagDone    = 1 << 0
	replyNone        = 0
	replyOffsetData  = 1
	replyOffsetHole  = 2
	replyBlockStatus = 5
	replyError       = 1<<15 + 1

	// Errors sent to clients.
	errPerm     = 1
	errIO       = 5
	errInval    = 22
	errNoSpace  = 28
	errOverflow = 75
	errNotSup   = 95
)

// Limits this server sets.
const (
	maxOptionLen = 64 << 10 // option data: export names and info requests
	// MaxPayload bounds one read or write; advertised as the maximum block size.
	MaxPayload = 32 << 20
	// PreferredBlock is the advertised preferred block size.
	PreferredBlock = 4096
)

// errMalformed marks bytes that do not follow the protocol: the connection
// is closed.
var errMalformed = errors.New("nbd: malformed message")

// option is one option request of the handshake.
type option struct {
	code uint32
	data []byte
}

// readOption reads one option request.
func readOption(r io.Reader) (option, error) {
	var h [16]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return option{}, err
	}
	if binary.BigEndian.Uint64(h[:]) != magicOpt {
		return option{}, fmt.Errorf("%w: option magic %#x", errMalformed, binary.BigEndian.Uint64(h[:]))
	}
	o := option{code: binary.BigEndian.Uint32(h[8:])}
	n := binary.BigEndian.Uint32(h[12:])
	if n > maxOptionLen {
		return option{}, fmt.Errorf("%w: option %d carries %d bytes (limit %d)", errMalformed, o.code, n, maxOptionLen)
	}
	o.data = make([]byte, n)
	if _, err := io.ReadFull(r, o.data); err != nil {
		return option{}, err
	}
	return o, nil
}

// infoRequest is the data of NBD_OPT_INFO and NBD_OPT_GO.
type infoRequest struct {
	name  string
	infos []uint16
}

func decodeInfoRequest(b []byte) (infoRequest, error) {
	if len(b) < 4 {
		return infoRequest{}, fmt.Errorf("%w: info request of %d bytes", errMalformed, len(b))
	}
	n := binary.BigEndian.Uint32(b)
	if uint64(n)+6 > uint64(len(b)) {
		return infoRequest{}, fmt.Errorf("%w: export name of %d bytes in %d", errMalformed, n, len(b))
	}
	req := infoRequest{name: string(b[4 : 4+n])}
	b = b[4+n:]
	k := int(binary.BigEndian.Uint16(b))
	b = b[2:]
	if len(b) != 2*k {
		return infoRequest{}, fmt.Errorf("%w: %d info requests in %d bytes", errMalformed, k, len(b))
	}
	for i := 0; i < k; i++ {
		req.infos = append(req.infos, binary.BigEndian.Uint16(b[2*i:]))
	}
	return req, nil
}

// request is one transmission-phase request header.
type request struct {
	flags  uint16
	typ    uint16
	handle uint64
	offset uint64
	length uint32
}

const requestLen = 28

func decodeRequest(h []byte) (request, error) {
	if len(h) != requestLen {
		return request{}, fmt.Errorf("%w: request header of %d bytes", errMalformed, len(h))
	}
	if m := binary.BigEndian.Uint32(h); m != magicRequest {
		return request{}, fmt.Errorf("%w: request magic %#x", errMalformed, m)
	}
	return request{
		flags:  binary.BigEndian.Uint16(h[4:]),
		typ:    binary.BigEndian.Uint16(h[6:]),
		handle: binary.BigEndian.Uint64(h[8:]),
		offset: binary.BigEndian.Uint64(h[16:]),
		length: binary.BigEndian.Uint32(h[24:]),
	}, nil
}

func appendOptReply(b []byte, opt, typ uint32, data []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, magicOptReply)
	b = binary.BigEndian.AppendUint32(b, opt)
	b = binary.BigEndian.AppendUint32(b, typ)
	b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
	return append(b, data...)
}

func appendSimpleReply(b []byte, errno uint32, handle uint64) []byte {
	b = binary.BigEndian.AppendUint32(b, magicSimple)
	b = binary.BigEndian.AppendUint32(b, errno)
	return binary.BigEndian.AppendUint64(b, handle)
}

func appendChunkHeader(b []byte, flags, typ uint16, handle uint64, length uint32) []byte {
	b = binary.BigEndian.AppendUint32(b, magicStructured)
	b = binary.BigEndian.AppendUint16(b, flags)
	b = binary.BigEndian.AppendUint16(b, typ)
	b = binary.BigEndian.AppendUint64(b, handle)
	return binary.BigEndian.AppendUint32(b, length)
}

// metaRequest is the data of NBD_OPT_LIST_META_CONTEXT and _SET_.
type metaRequest struct {
	export  string
	queries []string
}

func decodeMetaRequest(b []byte) (metaRequest, error) {
	str := func() (string, error) {
		if len(b) < 4 {
			return "", fmt.Errorf("%w: meta context request cut short", errMalformed)
		}
		n := binary.BigEndian.Uint32(b)
		if uint64(n) > uint64(len(b)-4) {
			return "", fmt.Errorf("%w: string of %d bytes in %d", errMalformed, n, len(b)-4)
		}
		s := string(b[4 : 4+n])
		b = b[4+n:]
		return s, nil
	}
	var req metaRequest
	var err error
	if req.export, err = str(); err != nil {
		return req, err
	}
	if len(b) < 4 {
		return req, fmt.Errorf("%w: meta context request without a query count", errMalformed)
	}
	k := binary.BigEndian.Uint32(b)
	b = b[4:]
	for i := uint32(0); i < k; i++ {
		q, err := str()
		if err != nil {
			return req, err
		}
		req.queries = append(req.queries, q)
	}
	if len(b) != 0 {
		return req, fmt.Errorf("%w: %d bytes after the queries", errMalformed, len(b))
	}
	return req, nil
}

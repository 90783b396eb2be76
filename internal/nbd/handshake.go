package nbd

// The handshake: the greeting and the option haggling, which ends when
// the client has chosen an export (or gives up).

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// handshake runs the greeting and the option haggling; c.dev is set if
// the client chose an export.
func (c *conn) handshake() error {
	var b []byte
	b = binary.BigEndian.AppendUint64(b, magicInit)
	b = binary.BigEndian.AppendUint64(b, magicOpt)
	b = binary.BigEndian.AppendUint16(b, flagFixedNewstyle|flagNoZeroes)
	if err := c.send(b); err != nil {
		return err
	}
	var cf [4]byte
	if _, err := io.ReadFull(c.r, cf[:]); err != nil {
		return err
	}
	cflags := binary.BigEndian.Uint32(cf[:])
	if cflags&^(flagFixedNewstyle|flagNoZeroes) != 0 {
		return fmt.Errorf("%w: unknown client flags %#x", errMalformed, cflags)
	}
	noZeroes := cflags&flagNoZeroes != 0
	ctx := context.Background()
	for c.dev == nil {
		o, err := readOption(c.r)
		if err != nil {
			return err
		}
		if c.s.TLS != nil && !c.tls {
			switch o.code {
			case optStartTLS:
				if err := c.startTLS(o); err != nil {
					return err
				}
				continue
			case optAbort:
			case optExportName:
				return fmt.Errorf("NBD_OPT_EXPORT_NAME before TLS: this server requires TLS")
			default:
				if err := c.replyErr(o.code, repErrTLSReqd, "this server requires TLS: send NBD_OPT_STARTTLS first"); err != nil {
					return err
				}
				continue
			}
		}
		done, err := c.option(ctx, o, noZeroes)
		if err != nil || done {
			return err
		}
	}
	return nil
}

func (c *conn) send(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if _, err := c.w.Write(b); err != nil {
		return err
	}
	return c.w.Flush()
}

func (c *conn) reply(opt, typ uint32, data []byte) error {
	return c.send(appendOptReply(nil, opt, typ, data))
}

func (c *conn) replyErr(opt, typ uint32, format string, args ...any) error {
	return c.reply(opt, typ, []byte(fmt.Sprintf(format, args...)))
}

// transmissionFlags says what dev supports. Multi-conn is safe: a write is
// durable when answered and nothing is cached here, so every connection
// sees every answered write.
func transmissionFlags(dev Device) uint16 {
	f := uint16(tflagHasFlags | tflagFlush | tflagFUA | tflagTrim | tflagWriteZeroes | tflagCanMultiConn)
	if dev.ReadOnly() {
		f |= tflagReadOnly
	}
	return f
}

// option handles one option; done means the connection ends (abort).
func (c *conn) option(ctx context.Context, o option, noZeroes bool) (done bool, err error) {
	switch o.code {
	case optExportName:
		return c.exportName(ctx, o, noZeroes)
	case optAbort:
		c.reply(o.code, repAck, nil)
		return true, nil
	case optList:
		return false, c.list(ctx, o)
	case optInfo, optGo:
		return false, c.infoOrGo(ctx, o)
	case optStructuredReply:
		if len(o.data) != 0 {
			return false, c.replyErr(o.code, repErrInvalid, "NBD_OPT_STRUCTURED_REPLY takes no data")
		}
		c.structured = true
		return false, c.reply(o.code, repAck, nil)
	case optListMetaContext, optSetMetaContext:
		return false, c.metaContext(ctx, o)
	case optStartTLS:
		if c.tls {
			return false, c.replyErr(o.code, repErrInvalid, "the connection already uses TLS")
		}
		return false, c.replyErr(o.code, repErrPolicy, "TLS is not offered by this server")
	}
	return false, c.replyErr(o.code, repErrUnsup, "option %d is not supported", o.code)
}

// exportName answers NBD_OPT_EXPORT_NAME, the old way to choose an export:
// its reply has no way to report an error, so a failure ends the
// connection (done).
func (c *conn) exportName(ctx context.Context, o option, noZeroes bool) (done bool, err error) {
	dev, err := c.s.Exports.Open(ctx, string(o.data))
	if err != nil {
		return true, fmt.Errorf("export %q: %v", o.data, err)
	}
	c.dev, c.name = dev, string(o.data)
	var b []byte
	b = binary.BigEndian.AppendUint64(b, dev.Size())
	b = binary.BigEndian.AppendUint16(b, transmissionFlags(dev))
	if !noZeroes {
		b = append(b, make([]byte, 124)...)
	}
	return false, c.send(b)
}

// list answers NBD_OPT_LIST with one reply per export name.
func (c *conn) list(ctx context.Context, o option) error {
	if len(o.data) != 0 {
		return c.replyErr(o.code, repErrInvalid, "NBD_OPT_LIST takes no data")
	}
	names, err := c.s.Exports.List(ctx)
	if err != nil {
		return c.replyErr(o.code, repErrPolicy, "listing exports: %v", err)
	}
	for _, n := range names {
		d := binary.BigEndian.AppendUint32(nil, uint32(len(n)))
		if err := c.reply(o.code, repServer, append(d, n...)); err != nil {
			return err
		}
	}
	return c.reply(o.code, repAck, nil)
}

// infoOrGo answers NBD_OPT_INFO and NBD_OPT_GO: the export's size and
// flags, its block sizes and, if asked, its name. GO keeps the export open
// for the transmission; INFO closes it again.
func (c *conn) infoOrGo(ctx context.Context, o option) error {
	req, err := decodeInfoRequest(o.data)
	if err != nil {
		return c.replyErr(o.code, repErrInvalid, "%v", err)
	}
	dev, err := c.open(ctx, o.code, req.name)
	if dev == nil {
		return err
	}
	keep := false
	defer func() {
		if !keep {
			dev.Close()
		}
	}()
	info := binary.BigEndian.AppendUint16(nil, infoExport)
	info = binary.BigEndian.AppendUint64(info, dev.Size())
	info = binary.BigEndian.AppendUint16(info, transmissionFlags(dev))
	if err := c.reply(o.code, repInfo, info); err != nil {
		return err
	}
	bs := binary.BigEndian.AppendUint16(nil, infoBlockSize)
	bs = binary.BigEndian.AppendUint32(bs, 1)
	bs = binary.BigEndian.AppendUint32(bs, PreferredBlock)
	bs = binary.BigEndian.AppendUint32(bs, MaxPayload)
	if err := c.reply(o.code, repInfo, bs); err != nil {
		return err
	}
	for _, t := range req.infos {
		if t == infoName {
			d := binary.BigEndian.AppendUint16(nil, infoName)
			if err := c.reply(o.code, repInfo, append(d, req.name...)); err != nil {
				return err
			}
		}
	}
	if err := c.reply(o.code, repAck, nil); err != nil {
		return err
	}
	if o.code == optGo {
		c.dev, c.name, keep = dev, req.name, true
	}
	return nil
}

// metaContext answers NBD_OPT_LIST_META_CONTEXT and SET_META_CONTEXT. The
// one context offered is base:allocation, for a device that can map its
// allocation (Mapper); setting it allows NBD_CMD_BLOCK_STATUS.
func (c *conn) metaContext(ctx context.Context, o option) error {
	if !c.structured {
		return c.replyErr(o.code, repErrInvalid, "meta contexts need structured replies first")
	}
	req, err := decodeMetaRequest(o.data)
	if err != nil {
		return c.replyErr(o.code, repErrInvalid, "%v", err)
	}
	dev, err := c.open(ctx, o.code, req.export)
	if dev == nil {
		return err
	}
	_, mapper := dev.(Mapper)
	dev.Close()
	want := mapper && (o.code == optListMetaContext && len(req.queries) == 0)
	for _, q := range req.queries {
		want = want || mapper && (q == metaBaseAllocation || o.code == optListMetaContext && q == "base:")
	}
	if o.code == optSetMetaContext {
		c.allocation = want
	}
	if want {
		d := binary.BigEndian.AppendUint32(nil, metaContextID)
		if err := c.reply(o.code, repMetaContext, append(d, metaBaseAllocation...)); err != nil {
			return err
		}
	}
	return c.reply(o.code, repAck, nil)
}

// startTLS acknowledges NBD_OPT_STARTTLS and continues the handshake over
// TLS; a failed TLS handshake ends the connection.
func (c *conn) startTLS(o option) error {
	if len(o.data) != 0 {
		return c.replyErr(o.code, repErrInvalid, "NBD_OPT_STARTTLS takes no data")
	}
	if c.r.Buffered() != 0 {
		return fmt.Errorf("%w: data after NBD_OPT_STARTTLS before the TLS handshake", errMalformed)
	}
	if err := c.reply(o.code, repAck, nil); err != nil {
		return err
	}
	tc := tls.Server(c.c, c.s.TLS)
	if err := tc.Handshake(); err != nil {
		return fmt.Errorf("TLS handshake: %w", err)
	}
	c.c, c.tls = tc, true
	c.r, c.w = bufio.NewReaderSize(tc, 64<<10), bufio.NewWriterSize(tc, 64<<10)
	return nil
}

// open opens an export during option haggling; if it fails, the error is
// sent as the option's reply (unknown export, or refused) and dev is nil,
// with err the result of sending it.
func (c *conn) open(ctx context.Context, opt uint32, name string) (dev Device, err error) {
	dev, err = c.s.Exports.Open(ctx, name)
	switch {
	case err == nil:
		return dev, nil
	case errors.Is(err, ErrUnknownExport):
		return nil, c.replyErr(opt, repErrUnknown, "export %q: %v", name, err)
	}
	return nil, c.replyErr(opt, repErrPolicy, "export %q: %v", name, err)
}

package rpc

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// Handshake messages, big-endian:
//
//	server hello:   magic u32 | version u8 | server nonce [32]
//	client proof:   magic u32 | version u8 | client nonce [32] | HMAC-SHA256(key, "cairn client" || sn || cn)
//	server verdict: code u8 | length u16 | payload
//	                code 0: payload = HMAC-SHA256(key, "cairn server" || cn || sn)
//	                code 1, 2: payload = refusal text (auth, version)
//
// Both nonces are fresh per connection, so neither proof can be replayed on
// another connection. The key never crosses the wire.
const (
	helloMagic = 0x4341524e // "CARN"
	// protocolVersion 2: frames carry a body sum of block checksums; 3:
	// shard writes may carry parity deltas (proto.FlagShardXor), which a
	// peer speaking 2 would write as plain bytes, so the two refuse each
	// other rather than corrupt parity; 4: clients read erasure-coded
	// positions themselves (proto.FlagSettled), which a peer speaking 3
	// would serve without the shard's lock; 5: a put of an erasure-coded
	// object may name shards staged ahead (proto.FlagStaged), whose shard
	// writes a peer speaking 4 would apply without the shard's bytes.
	protocolVersion = 5
	nonceLen        = 32
	macLen          = sha256.Size
	helloLen        = 4 + 1 + nonceLen
	proofLen        = 4 + 1 + nonceLen + macLen
	maxVerdictLen   = 1024

	verdictOK      = 0
	verdictAuth    = 1
	verdictVersion = 2

	// HandshakeTimeout bounds the whole handshake on both sides unless a
	// Dial context ends sooner.
	HandshakeTimeout = 5 * time.Second
)

// refusalText is what a server tells a client whose proof is wrong.
const refusalText = "authentication failed: the peer does not have this cluster's key"

var (
	// ErrAuth is matched by every error caused by a peer that does not hold
	// the cluster key (or refuses ours).
	ErrAuth = errors.New("rpc: authentication failed")
	// ErrClosed is matched by the error of every Call on a connection that is
	// closed or broken; the caller should redial.
	ErrClosed = errors.New("rpc: connection closed")
)

// mac proves the key over both nonces and, on an encrypted connection,
// the TLS session's exported keying material (bind): a relay between two
// peers has a different session with each, so its proofs fail.
func mac(key []byte, label string, a, b, bind []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(label))
	h.Write(a)
	h.Write(b)
	h.Write(bind)
	return h.Sum(nil)
}

// serverHandshake authenticates the client on rw. It returns nil if the
// client proved it holds key; otherwise it has told the client why (when the
// client spoke the protocol at all) and returns the reason for the log.
func serverHandshake(rw io.ReadWriter, key, bind []byte) error {
	var hello [helloLen]byte
	binary.BigEndian.PutUint32(hello[0:4], helloMagic)
	hello[4] = protocolVersion
	sn := hello[5:]
	if _, err := rand.Read(sn); err != nil {
		return fmt.Errorf("rpc: server nonce: %w", err)
	}
	if _, err := rw.Write(hello[:]); err != nil {
		return fmt.Errorf("sending hello: %w", err)
	}
	var proof [proofLen]byte
	if _, err := io.ReadFull(rw, proof[:]); err != nil {
		return fmt.Errorf("reading client proof: %w", err)
	}
	if m := binary.BigEndian.Uint32(proof[0:4]); m != helloMagic {
		if proof[0] == tlsHandshakeRecord && proof[1] == 3 {
			return errors.New("the client encrypts its traffic (TLS) and this server does not: cairn.conf's encrypt setting must be the same on every daemon and client")
		}
		return fmt.Errorf("not a cairn client (handshake magic %#08x)", m)
	}
	if v := proof[4]; v != protocolVersion {
		msg := fmt.Sprintf("unsupported protocol version %d (this server speaks %d)", v, protocolVersion)
		writeVerdict(rw, verdictVersion, []byte(msg))
		return errors.New(msg)
	}
	cn := proof[5 : 5+nonceLen]
	if !hmac.Equal(proof[5+nonceLen:], mac(key, "cairn client", sn, cn, bind)) {
		writeVerdict(rw, verdictAuth, []byte(refusalText))
		return fmt.Errorf("%w: the peer does not have this cluster's key", ErrAuth)
	}
	if err := writeVerdict(rw, verdictOK, mac(key, "cairn server", cn, sn, bind)); err != nil {
		return fmt.Errorf("sending verdict: %w", err)
	}
	return nil
}

func writeVerdict(w io.Writer, code byte, payload []byte) error {
	b := make([]byte, 3, 3+len(payload))
	b[0] = code
	binary.BigEndian.PutUint16(b[1:3], uint16(len(payload)))
	_, err := w.Write(append(b, payload...))
	return err
}

// clientHandshake proves to the server that we hold key and checks that the
// server holds it too.
func clientHandshake(rw io.ReadWriter, key, bind []byte) error {
	var hello [helloLen]byte
	if _, err := io.ReadFull(rw, hello[:]); err != nil {
		if bind == nil && isTimeout(err) {
			return fmt.Errorf("no hello from the server: it may encrypt its traffic while this client does not (cairn.conf's encrypt setting must be the same everywhere): %w", err)
		}
		return fmt.Errorf("reading server hello: %w", err)
	}
	if m := binary.BigEndian.Uint32(hello[0:4]); m != helloMagic {
		return fmt.Errorf("not a cairn daemon (hello magic %#08x)", m)
	}
	if v := hello[4]; v != protocolVersion {
		return fmt.Errorf("server speaks protocol version %d, this client speaks %d", v, protocolVersion)
	}
	sn := hello[5:]
	var proof [proofLen]byte
	binary.BigEndian.PutUint32(proof[0:4], helloMagic)
	proof[4] = protocolVersion
	cn := proof[5 : 5+nonceLen]
	if _, err := rand.Read(cn); err != nil {
		return fmt.Errorf("client nonce: %w", err)
	}
	copy(proof[5+nonceLen:], mac(key, "cairn client", sn, cn, bind))
	if _, err := rw.Write(proof[:]); err != nil {
		return fmt.Errorf("sending proof: %w", err)
	}
	var vh [3]byte
	if _, err := io.ReadFull(rw, vh[:]); err != nil {
		return fmt.Errorf("reading verdict: %w", err)
	}
	n := binary.BigEndian.Uint16(vh[1:3])
	if n > maxVerdictLen {
		return fmt.Errorf("verdict of %d bytes exceeds limit %d", n, maxVerdictLen)
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(rw, payload); err != nil {
		return fmt.Errorf("reading verdict: %w", err)
	}
	switch vh[0] {
	case verdictOK:
		if !hmac.Equal(payload, mac(key, "cairn server", cn, sn, bind)) {
			return fmt.Errorf("%w: the server does not have this cluster's key", ErrAuth)
		}
		return nil
	case verdictAuth:
		return fmt.Errorf("%w: server refused this client: %q", ErrAuth, payload)
	case verdictVersion:
		return fmt.Errorf("server refused this client: %q", payload)
	default:
		return fmt.Errorf("unknown handshake verdict %d", vh[0])
	}
}

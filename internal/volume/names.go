package volume

import (
	"fmt"
	"regexp"
	"strings"
)

// Ref names a volume, or one of its snapshots: POOL/NAME[@SNAP]. The
// command line and the NBD export names use this one syntax.
type Ref struct {
	Pool, Name string
	Snap       string // "" for the volume itself
}

func (r Ref) String() string {
	if r.Snap == "" {
		return r.Pool + "/" + r.Name
	}
	return r.Pool + "/" + r.Name + "@" + r.Snap
}

// ParseRef parses POOL/NAME or POOL/NAME@SNAP. Every part must be present:
// "POOL/NAME@" (an empty snapshot name) is an error, not the volume.
func ParseRef(s string) (Ref, error) {
	vol, snap, atSnap := strings.Cut(s, "@")
	pool, name, ok := strings.Cut(vol, "/")
	switch {
	case !ok || pool == "" || name == "" || strings.Contains(name, "/"):
		return Ref{}, fmt.Errorf("%w: %q: want POOL/NAME or POOL/NAME@SNAP, e.g. default/vm-100-disk-0", ErrInvalid, s)
	case atSnap && snap == "":
		return Ref{}, fmt.Errorf("%w: %q: the snapshot name after @ is empty", ErrInvalid, s)
	case !validName.MatchString(name):
		return Ref{}, fmt.Errorf("%w: %q: volume name %q: use up to 128 letters, digits, '.', '_' or '-', starting with a letter or digit", ErrInvalid, s, name)
	case atSnap && !validName.MatchString(snap):
		return Ref{}, fmt.Errorf("%w: %q: snapshot name %q: use up to 128 letters, digits, '.', '_' or '-', starting with a letter or digit", ErrInvalid, s, snap)
	}
	return Ref{Pool: pool, Name: name, Snap: snap}, nil
}

// dataObjectName matches the names of data objects: "vol.", the volume's
// id (16 hex digits), ".", the index (16 hex digits).
var dataObjectName = regexp.MustCompile(`^vol\.[0-9a-f]{16}\.[0-9a-f]{16}$`)

// ReservedObject says whether an object name belongs to the volumes of a
// pool (their directory, headers or data) and names what it is, for a
// refusal. Only this package changes such objects: removing the directory
// with `cairn obj rm` would hide every volume of the pool.
func ReservedObject(name string) (what string, reserved bool) {
	switch {
	case name == directoryObject:
		return "the directory of the pool's volumes", true
	case strings.HasPrefix(name, headerPrefix) && validName.MatchString(name[len(headerPrefix):]):
		return "the header of volume " + name[len(headerPrefix):], true
	case dataObjectName.MatchString(name):
		return "data of a volume", true
	}
	return "", false
}

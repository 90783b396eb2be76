package proto

import (
	"fmt"
	"strings"
)

// ReservedPrefix starts the names of objects the OSDs keep for themselves
// (placement-group metadata); clients may not use it.
const ReservedPrefix = "\x00"

// ValidateObjectName checks a client-supplied object name.
func ValidateObjectName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("object name is empty")
	case len(name) > MaxObjectNameLen:
		return fmt.Errorf("object name is %d bytes long, more than the limit of %d", len(name), MaxObjectNameLen)
	case strings.Contains(name, "\x00"):
		return fmt.Errorf("object name %q contains a NUL byte", name)
	}
	return nil
}

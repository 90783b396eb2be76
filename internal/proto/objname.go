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

// ValidateShardEntryName checks the name of an object a shard entry (a
// trim or rollback of an erasure-coded write) names: a client's object,
// or a snapshot clone of one (its name, NUL, 'c' and 16 hex digits: see
// package snapset), never an object the OSDs keep for themselves.
func ValidateShardEntryName(name string) error {
	head, clone, ok := strings.Cut(name, "\x00")
	if !ok {
		return ValidateObjectName(name)
	}
	if err := ValidateObjectName(head); err != nil {
		return err
	}
	if len(clone) != 17 || clone[0] != 'c' || strings.Trim(clone[1:], "0123456789abcdef") != "" {
		return fmt.Errorf("object name %q contains a NUL byte and is not a snapshot clone's", name)
	}
	return nil
}

// Package clustermap defines the cluster map: the versioned description of
// hosts, OSDs and pools that every client and daemon places data with.
//
// The map is a plain value. It is stored as one JSON document in etcd (see
// package meta), changed only by compare-and-swap on its epoch, and handed to
// pure code (placement) by value. This package does no IO and imports nothing
// of the project.
package clustermap

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Epoch numbers versions of the map. Every change increments it by one.
type Epoch uint64

// OSDID identifies an OSD for the life of the cluster.
type OSDID int32

func (id OSDID) String() string { return "osd." + strconv.Itoa(int(id)) }

// PoolID identifies a pool; IDs are never reused.
type PoolID uint32

// PGID names a placement group: a pool and a seed in [0, pool.PGNum).
type PGID struct {
	Pool PoolID
	Seed uint32
}

// String renders a PGID the way Ceph users know it: "pool.seedhex", e.g. "1.2a".
func (p PGID) String() string { return fmt.Sprintf("%d.%x", p.Pool, p.Seed) }

// ParsePGID parses the form produced by PGID.String.
func ParsePGID(s string) (PGID, error) {
	dot := strings.IndexByte(s, '.')
	if dot < 0 {
		return PGID{}, fmt.Errorf("placement group id %q: want POOL.SEEDHEX, e.g. 1.2a", s)
	}
	pool, err := strconv.ParseUint(s[:dot], 10, 32)
	if err != nil {
		return PGID{}, fmt.Errorf("placement group id %q: bad pool number: %v", s, err)
	}
	seed, err := strconv.ParseUint(s[dot+1:], 16, 32)
	if err != nil {
		return PGID{}, fmt.Errorf("placement group id %q: bad seed: %v", s, err)
	}
	return PGID{Pool: PoolID(pool), Seed: uint32(seed)}, nil
}

// DeviceClass is the kind of device under an OSD; pools can be restricted to one.
type DeviceClass string

const (
	ClassHDD  DeviceClass = "hdd"
	ClassSSD  DeviceClass = "ssd"
	ClassNVMe DeviceClass = "nvme"
)

// ValidClass reports whether c is a known device class.
func ValidClass(c DeviceClass) bool {
	return c == ClassHDD || c == ClassSSD || c == ClassNVMe
}

// Failure-domain levels of the tree root → rack → host → osd.
const (
	DomainOSD  = "osd"
	DomainHost = "host"
	DomainRack = "rack"
)

// DefaultRack is the rack of hosts registered without one.
const DefaultRack = "default"

// Host is a machine holding OSDs, placed in a rack.
type Host struct {
	Name string `json:"name"`
	Rack string `json:"rack"`
}

// OSD is one storage daemon owning one device.
type OSD struct {
	ID     OSDID       `json:"id"`
	Host   string      `json:"host"`
	Addr   string      `json:"addr"` // host:port, IPv4 or [IPv6]
	Class  DeviceClass `json:"class"`
	Weight float64     `json:"weight"` // relative capacity, usually TiB; 0 takes no data
	// Up: the daemon holds a live lease. In: placement may map data to it.
	Up        bool      `json:"up"`
	In        bool      `json:"in"`
	UpSince   time.Time `json:"up_since,omitzero"`
	DownSince time.Time `json:"down_since,omitzero"`
	// AutoOut: marked out by the keeper because it stayed down; it is
	// marked in again when it returns. An operator's `osd out` clears it.
	AutoOut bool `json:"auto_out,omitempty"`
	// Full: the OSD's disk is FullRatio used. Primaries refuse new data
	// for PGs it holds; reads and deletes go on.
	Full bool `json:"full,omitempty"`
	// BackfillFull: the OSD's disk is BackfillFullRatio used. Recovery
	// and backfill stop copying objects to it (client writes go on until
	// it is Full), so moving data never fills a disk.
	BackfillFull bool `json:"backfill_full,omitempty"`
	// WritebackOff: the operator detached the OSD's write-back area
	// (`cairn osd writeback off`): it drains to the data disk and takes no
	// new writes until `on`.
	WritebackOff bool `json:"writeback_off,omitempty"`
	// Flash names the device holding the OSD's index, commit log and
	// write-back area when that is not its data device (`--meta-dir`).
	// OSDs of one host with the same Flash lose their indexes together, so
	// placement at level osd counts them as one failure domain.
	Flash string `json:"flash,omitempty"`
}

// MaxFlashLen bounds OSD.Flash, a device name or serial number.
const MaxFlashLen = 128

// Disk usage thresholds of an OSD, as UsedRatio counts: nearly full is a
// warning; backfill-full stops recovery and backfill from copying data to
// it; full stops new writes before the store's own reserve is reached,
// leaving room for deletes. A flag clears FullHysteresis below its mark.
const (
	NearFullRatio     = 0.85
	BackfillFullRatio = 0.90
	FullRatio         = 0.95
	FullHysteresis    = 0.02
)

// UsedRatio is how full an OSD's device is: the used share of the space its
// store lets writes use (all but the reserve it keeps free). At 1 the store
// refuses writes, so every threshold above is a share of that same space.
func UsedRatio(total, free, reserve int64) float64 {
	usable := total - max(reserve, 0)
	if total <= 0 {
		return 0
	}
	if usable <= 0 {
		return 1
	}
	return min(1, max(0, float64(total-free)/float64(usable)))
}

// Pool is a named set of placement groups with a replication rule.
type Pool struct {
	ID            PoolID      `json:"id"`
	Name          string      `json:"name"`
	Size          int         `json:"size"`     // copies of every object
	MinSize       int         `json:"min_size"` // copies below which writes stop
	PGNum         uint32      `json:"pg_num"`
	Class         DeviceClass `json:"class,omitempty"` // empty: any class
	FailureDomain string      `json:"failure_domain"`  // osd, host or rack
	// EC makes the pool erasure-coded: Size is then K+M shards, one per
	// position of a PG (placement.Shards), and MinSize at least K.
	EC *ECProfile `json:"ec,omitempty"`
}

// ECProfile is an erasure-coded pool's code: every object is cut into
// stripes of K data chunks of StripeUnit bytes plus M parity chunks, and
// any K of the K+M shards rebuild it (internal/ec has the arithmetic).
type ECProfile struct {
	K          int `json:"k"`
	M          int `json:"m"`
	StripeUnit int `json:"stripe_unit"`
}

// Limits of an erasure code: a chunk is a whole number of the stores'
// 4 KiB blocks, so no two chunks share a block.
const (
	ECUnitAlign       = 4096
	ECMaxUnit         = 1 << 20
	ECDefaultUnit     = 16 << 10
	ECMaxShards       = MaxPoolSize
	ecMinK, ecMinM    = 2, 1
	ecProfileExamples = "2+1, 4+2, 8+3"
)

// Validate says what is wrong with the profile, if anything.
func (e ECProfile) Validate() error {
	switch {
	case e.K < ecMinK || e.M < ecMinM:
		return fmt.Errorf("erasure code %d+%d: need at least %d data and %d parity chunk (%s ...)", e.K, e.M, ecMinK, ecMinM, ecProfileExamples)
	case e.K+e.M > ECMaxShards:
		return fmt.Errorf("erasure code %d+%d: at most %d chunks a stripe", e.K, e.M, ECMaxShards)
	case e.StripeUnit <= 0 || e.StripeUnit%ECUnitAlign != 0 || e.StripeUnit > ECMaxUnit:
		return fmt.Errorf("stripe unit %d: a multiple of %d bytes up to %d", e.StripeUnit, ECUnitAlign, ECMaxUnit)
	}
	return nil
}

// String is the profile as operators write it: "4+2".
func (e ECProfile) String() string { return fmt.Sprintf("%d+%d", e.K, e.M) }

// ParseECProfile reads "K+M" as `pool create --ec` takes it.
func ParseECProfile(s string, unit int) (ECProfile, error) {
	var e ECProfile
	k, m, ok := strings.Cut(s, "+")
	var err1, err2 error
	e.K, err1 = strconv.Atoi(k)
	e.M, err2 = strconv.Atoi(m)
	if !ok || err1 != nil || err2 != nil {
		return e, fmt.Errorf("erasure code %q: write it as K+M, data chunks plus parity chunks (%s)", s, ecProfileExamples)
	}
	e.StripeUnit = unit
	if unit == 0 {
		e.StripeUnit = ECDefaultUnit
	}
	return e, e.Validate()
}

// Erasure reports whether the pool is erasure-coded.
func (p *Pool) Erasure() bool { return p.EC != nil }

// Unit names what the pool keeps one per failure domain: "copies" or
// "shards".
func (p *Pool) Unit() string {
	if p.Erasure() {
		return "shards"
	}
	return "copies"
}

// Tolerates is how many of the pool's failure domains can be lost while
// every object stays readable: Size-1 copies, or M shards.
func (p *Pool) Tolerates() int {
	if p.Erasure() {
		return p.EC.M
	}
	return p.Size - 1
}

// Usable is the fraction of raw capacity that holds user data: 1/Size,
// or K/(K+M).
func (p *Pool) Usable() float64 {
	if p.Erasure() {
		return float64(p.EC.K) / float64(p.Size)
	}
	return 1 / float64(max(p.Size, 1))
}

// Protection says in words what the pool keeps and survives, as status,
// pool ls and the dashboard show it.
func (p *Pool) Protection() string {
	lose := fmt.Sprintf("can lose %d %s", p.Tolerates(), p.FailureDomain)
	if p.Tolerates() != 1 {
		lose += "s"
	}
	if !p.Erasure() {
		return fmt.Sprintf("%d copies, one per %s, writes need %d: %s", p.Size, p.FailureDomain, p.MinSize, lose)
	}
	s := fmt.Sprintf("erasure code %s, one shard per %s, any %d rebuild an object, writes need %d: %s, %.0f%% of raw space usable",
		p.EC, p.FailureDomain, p.EC.K, p.MinSize, lose, 100*p.Usable())
	if p.MinSize == p.EC.K {
		s += "; writes go on without redundancy"
	}
	return s
}

// Map is the whole cluster map at one epoch.
type Map struct {
	Epoch      Epoch     `json:"epoch"`
	FSID       string    `json:"fsid"`
	Created    time.Time `json:"created"`
	Modified   time.Time `json:"modified"`
	Hosts      []Host    `json:"hosts"` // sorted by Name
	OSDs       []OSD     `json:"osds"`  // sorted by ID
	Pools      []Pool    `json:"pools"` // sorted by ID
	NextPoolID PoolID    `json:"next_pool_id"`
	NextOSDID  OSDID     `json:"next_osd_id"`
	// DownOutSeconds: an OSD down this long is marked out and its data
	// re-replicated elsewhere (0: DefaultDownOut).
	DownOutSeconds int `json:"down_out_seconds,omitempty"`
}

// DefaultDownOut is how long an OSD may stay down before it is marked out.
const DefaultDownOut = 10 * time.Minute

// DownOutInterval returns how long an OSD may stay down before it is marked out.
func (m *Map) DownOutInterval() time.Duration {
	if m.DownOutSeconds > 0 {
		return time.Duration(m.DownOutSeconds) * time.Second
	}
	return DefaultDownOut
}

// Limits on names, so that keys stay small and printable.
const (
	MaxPoolNameLen = 128
	MaxHostNameLen = 253
	MaxPGNum       = 1 << 16
	MaxPoolSize    = 16
)

// Clone returns a deep copy, so a caller may change it and CAS it back.
func (m *Map) Clone() *Map {
	c := *m
	c.Hosts = append([]Host(nil), m.Hosts...)
	c.OSDs = append([]OSD(nil), m.OSDs...)
	c.Pools = append([]Pool(nil), m.Pools...)
	return &c
}

// OSD returns the OSD with the given id.
func (m *Map) OSD(id OSDID) (*OSD, bool) {
	i := sort.Search(len(m.OSDs), func(i int) bool { return m.OSDs[i].ID >= id })
	if i < len(m.OSDs) && m.OSDs[i].ID == id {
		return &m.OSDs[i], true
	}
	return nil, false
}

// Host returns the host with the given name.
func (m *Map) Host(name string) (*Host, bool) {
	i := sort.Search(len(m.Hosts), func(i int) bool { return m.Hosts[i].Name >= name })
	if i < len(m.Hosts) && m.Hosts[i].Name == name {
		return &m.Hosts[i], true
	}
	return nil, false
}

// PoolByName returns the pool with the given name.
func (m *Map) PoolByName(name string) (*Pool, bool) {
	for i := range m.Pools {
		if m.Pools[i].Name == name {
			return &m.Pools[i], true
		}
	}
	return nil, false
}

// Pool returns the pool with the given id.
func (m *Map) Pool(id PoolID) (*Pool, bool) {
	for i := range m.Pools {
		if m.Pools[i].ID == id {
			return &m.Pools[i], true
		}
	}
	return nil, false
}

// DomainOf returns the name of the failure domain of the given level that
// holds osd: its host, its host's rack, or the OSD itself (or, for an OSD
// behind a flash device, that device: FlashDomain).
func (m *Map) DomainOf(o *OSD, level string) string {
	switch level {
	case DomainOSD:
		if o.Flash != "" {
			return FlashDomain(o)
		}
		return o.ID.String()
	case DomainRack:
		if h, ok := m.Host(o.Host); ok {
			return h.Rack
		}
		return DefaultRack
	default:
		return o.Host
	}
}

// FlashDomain names the osd-level failure domain of an OSD behind a flash
// device: the device on its host.
func FlashDomain(o *OSD) string {
	return "flash:" + o.Host + "/" + o.Flash
}

// CountDomains counts the failure domains of the given level that hold at
// least one in OSD of the class with weight > 0 (class "" matches all).
func (m *Map) CountDomains(level string, class DeviceClass) int {
	seen := map[string]bool{}
	for i := range m.OSDs {
		o := &m.OSDs[i]
		if !o.In || o.Weight <= 0 || (class != "" && o.Class != class) {
			continue
		}
		seen[m.DomainOf(o, level)] = true
	}
	return len(seen)
}

// UpsertHost adds a host or moves it to rack; the list stays sorted.
func (m *Map) UpsertHost(name, rack string) {
	if rack == "" {
		rack = DefaultRack
	}
	if h, ok := m.Host(name); ok {
		h.Rack = rack
		return
	}
	m.Hosts = append(m.Hosts, Host{Name: name, Rack: rack})
	sort.Slice(m.Hosts, func(i, j int) bool { return m.Hosts[i].Name < m.Hosts[j].Name })
}

// UpsertOSD adds or replaces an OSD; the list stays sorted.
func (m *Map) UpsertOSD(o OSD) {
	if p, ok := m.OSD(o.ID); ok {
		*p = o
		return
	}
	m.OSDs = append(m.OSDs, o)
	sort.Slice(m.OSDs, func(i, j int) bool { return m.OSDs[i].ID < m.OSDs[j].ID })
	if o.ID >= m.NextOSDID {
		m.NextOSDID = o.ID + 1
	}
}

// ValidatePool checks a pool's own fields (not its fit to the OSDs).
func ValidatePool(p *Pool) error {
	if err := ValidatePoolName(p.Name); err != nil {
		return err
	}
	if p.Size < 1 || p.Size > MaxPoolSize {
		return fmt.Errorf("pool %q: size %d is out of range 1..%d", p.Name, p.Size, MaxPoolSize)
	}
	if p.MinSize < 1 || p.MinSize > p.Size {
		return fmt.Errorf("pool %q: min_size %d must be between 1 and size %d", p.Name, p.MinSize, p.Size)
	}
	if err := validateEC(p); err != nil {
		return err
	}
	if p.PGNum < 1 || p.PGNum > MaxPGNum {
		return fmt.Errorf("pool %q: pg_num %d is out of range 1..%d", p.Name, p.PGNum, MaxPGNum)
	}
	if p.Class != "" && !ValidClass(p.Class) {
		return fmt.Errorf("pool %q: unknown device class %q (want hdd, ssd or nvme)", p.Name, p.Class)
	}
	switch p.FailureDomain {
	case DomainOSD, DomainHost, DomainRack:
	default:
		return fmt.Errorf("pool %q: unknown failure domain %q (want osd, host or rack)", p.Name, p.FailureDomain)
	}
	return nil
}

// validateEC checks an erasure-coded pool's profile against its sizes:
// one shard per position, and no write with fewer than K shards, which
// could not be read back.
func validateEC(p *Pool) error {
	if p.EC == nil {
		return nil
	}
	if err := p.EC.Validate(); err != nil {
		return fmt.Errorf("pool %q: %v", p.Name, err)
	}
	if p.Size != p.EC.K+p.EC.M {
		return fmt.Errorf("pool %q: size %d must be K+M = %d for erasure code %s", p.Name, p.Size, p.EC.K+p.EC.M, p.EC)
	}
	if p.MinSize < p.EC.K {
		return fmt.Errorf("pool %q: min_size %d is below K = %d: a write on fewer than K shards cannot be read back", p.Name, p.MinSize, p.EC.K)
	}
	return nil
}

// ValidatePoolName rejects names that would not survive a CLI or a key, or
// that read as something else: "." and ".." look like paths, and a name
// starting with '-' like a flag.
func ValidatePoolName(name string) error {
	if name == "" {
		return errors.New("pool name is empty")
	}
	if len(name) > MaxPoolNameLen {
		return fmt.Errorf("pool name is %d bytes long, more than the limit of %d", len(name), MaxPoolNameLen)
	}
	if name == "." || name == ".." {
		return fmt.Errorf("pool name %q reads as a directory: choose a name with a letter or digit", name)
	}
	if name[0] == '-' {
		return fmt.Errorf("pool name %q starts with '-', which reads as a flag: start it with a letter, digit, '_' or '.'", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("pool name %q: only letters, digits, '-', '_' and '.' are allowed", name)
		}
	}
	return nil
}

// Validate checks the invariants of a whole map; Decode calls it so a
// damaged or hand-edited map is refused before anyone places data with it.
func (m *Map) Validate() error {
	for i := range m.Hosts {
		h := &m.Hosts[i]
		if h.Name == "" || len(h.Name) > MaxHostNameLen {
			return fmt.Errorf("cluster map: host %d has a bad name %q", i, h.Name)
		}
		if i > 0 && m.Hosts[i-1].Name >= h.Name {
			return fmt.Errorf("cluster map: hosts not sorted or duplicated at %q", h.Name)
		}
	}
	for i := range m.OSDs {
		o := &m.OSDs[i]
		if o.ID < 0 {
			return fmt.Errorf("cluster map: negative OSD id %d", o.ID)
		}
		if i > 0 && m.OSDs[i-1].ID >= o.ID {
			return fmt.Errorf("cluster map: OSDs not sorted or duplicated at %s", o.ID)
		}
		if _, ok := m.Host(o.Host); !ok {
			return fmt.Errorf("cluster map: %s is on unknown host %q", o.ID, o.Host)
		}
		if !ValidClass(o.Class) {
			return fmt.Errorf("cluster map: %s has unknown device class %q", o.ID, o.Class)
		}
		if err := ValidFlash(o.Flash); err != nil {
			return fmt.Errorf("cluster map: %s: %w", o.ID, err)
		}
		if o.Weight < 0 || o.Weight != o.Weight || o.Weight > 1e6 {
			return fmt.Errorf("cluster map: %s has bad weight %v", o.ID, o.Weight)
		}
		if o.ID >= m.NextOSDID {
			return fmt.Errorf("cluster map: %s is not below next_osd_id %d", o.ID, m.NextOSDID)
		}
	}
	for i := range m.Pools {
		p := &m.Pools[i]
		if err := ValidatePool(p); err != nil {
			return fmt.Errorf("cluster map: %w", err)
		}
		if i > 0 && m.Pools[i-1].ID >= p.ID {
			return fmt.Errorf("cluster map: pools not sorted or duplicated at id %d", p.ID)
		}
		if p.ID >= m.NextPoolID {
			return fmt.Errorf("cluster map: pool %q id %d is not below next_pool_id %d", p.Name, p.ID, m.NextPoolID)
		}
		for j := 0; j < i; j++ {
			if m.Pools[j].Name == p.Name {
				return fmt.Errorf("cluster map: two pools named %q", p.Name)
			}
		}
	}
	return nil
}

// ValidFlash checks a flash device name: empty (none) or up to MaxFlashLen
// printable ASCII characters other than space and '/'.
func ValidFlash(f string) error {
	if len(f) > MaxFlashLen {
		return fmt.Errorf("flash device name of %d bytes is longer than %d", len(f), MaxFlashLen)
	}
	for i := 0; i < len(f); i++ {
		if c := f[i]; c <= ' ' || c > '~' || c == '/' {
			return fmt.Errorf("flash device name %q has a byte %q not allowed (use letters, digits and punctuation other than '/')", f, c)
		}
	}
	return nil
}

// Encode serialises the map for storage in etcd.
func (m *Map) Encode() []byte {
	b, err := json.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("clustermap: encode: %v", err)) // only plain fields: cannot fail
	}
	return b
}

// Decode parses and validates a map stored by Encode.
func Decode(b []byte) (*Map, error) {
	var m Map
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("cluster map: %w", err)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

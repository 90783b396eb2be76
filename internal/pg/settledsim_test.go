package pg

import (
	"fmt"
	"testing"
)

// Clients' reads from the positions (DecideSettled) in the shard
// simulation. A read takes two steps, so that writes, lost trims,
// positions going down and peering run between one position's answer and
// another's, as they do on the wire; the primary vouches at one of the
// two. What a read serves a client has seen, so from then on it counts as
// acknowledged: no later peering may roll it back, which the simulation's
// own checks then hold it to.

type ecRead struct {
	name    string
	answers []ShardCopy // by position; Listed once it answered
	vals    []uint64
	before  ecWrite // the write acknowledged when the read began
	hadAck  bool
	vouched *bool // the primary's answer, once given
}

// readStep begins a read of a random object, or finishes the one begun.
func (s *ecSim) readStep() error {
	if s.read == nil {
		s.startRead(ecNames[s.r.IntN(len(ecNames))])
		return nil
	}
	return s.finishRead()
}

func (s *ecSim) startRead(name string) {
	rd := &ecRead{name: name, answers: make([]ShardCopy, s.n), vals: make([]uint64, s.n)}
	rd.before, rd.hadAck = s.acked[name]
	for i := range s.up {
		if s.r.IntN(2) == 0 {
			s.answer(rd, i)
		}
	}
	if s.r.IntN(2) == 0 {
		s.vouch(rd)
	}
	s.read = rd
	fmt.Fprintf(&s.trace, "read %s begins\n", name)
}

// answer: position i, if up, sends its shard's meta (under its shard
// lock: meta and bytes of one version).
func (s *ecSim) answer(rd *ecRead, i int) {
	if !s.up[i] {
		return
	}
	rd.answers[i] = s.copyOf(i, rd.name)
	rd.vals[i] = s.shards[i][rd.name].val
}

// vouch is the primary's check (osd vouchSettled): the PG is active with
// every position up, complete in its record, and nothing unfound.
func (s *ecSim) vouch(rd *ecRead) {
	ok := !s.down && len(s.last) == s.n
	for _, u := range s.up {
		ok = ok && u
	}
	for _, name := range ecNames {
		ok = ok && !s.unfound[name]
	}
	rd.vouched = &ok
}

func (s *ecSim) finishRead() error {
	rd := s.read
	s.read = nil
	for i := range rd.answers {
		if !rd.answers[i].Listed {
			s.answer(rd, i)
		}
	}
	if rd.vouched == nil {
		s.vouch(rd)
	}
	v, ok := DecideSettled(rd.answers)
	if !*rd.vouched || !ok {
		fmt.Fprintf(&s.trace, "read %s goes to the primary (vouched %v)\n", rd.name, *rd.vouched)
		return nil
	}
	s.reads++
	fmt.Fprintf(&s.trace, "read %s serves %s=%d\n", rd.name, v, rd.vals[0])
	return s.served(rd, v)
}

// served checks what a read served and makes it count as acknowledged.
func (s *ecSim) served(rd *ecRead, v EVersion) error {
	for i, val := range rd.vals {
		if want := s.bytesAt(v, i); val != want {
			return fmt.Errorf("read %s: position %d holds %d, where %s has %d", rd.name, i, val, v, want)
		}
	}
	if rd.hadAck && v.Less(rd.before.ver) {
		return fmt.Errorf("read %s served %s, older than %s, acknowledged before it began", rd.name, v, rd.before.ver)
	}
	if a, ok := s.acked[rd.name]; ok && !a.ver.Less(v) {
		return nil // the acknowledged write is this one, or came during the read
	}
	later := s.later[rd.name]
	for j, w := range later {
		if w.ver == v {
			s.acked[rd.name], s.later[rd.name] = w, append([]ecWrite(nil), later[j+1:]...)
			return nil
		}
	}
	return fmt.Errorf("read %s served %s, which no write made (acknowledged %+v, later %v)", rd.name, v, s.acked[rd.name], later)
}

// The simulation's reads do serve: the check above is not vacuous.
func TestShardSimulationServesReads(t *testing.T) {
	reads := 0
	for seed := uint64(1); seed <= 300; seed++ {
		s := newECSim(seed)
		if err := s.run(300); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		reads += s.reads
	}
	if reads < 100 {
		t.Errorf("%d reads served from the positions in 300 seeds of 300 steps", reads)
	}
	t.Logf("%d reads served from the positions", reads)
}

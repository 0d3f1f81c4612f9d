package gitops

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tenant-worker/tenant-worker/internal/history"
	"github.com/tenant-worker/tenant-worker/internal/ledger"
)

// What the ledger holds of a tenant's history, one line a record (see
// internal/ledger for the files):
//
//	log/<tenant>/<sent>/<message> <sent> <kind>,<tier>,<release>[,rejected]
//	base/<tenant>            <sent>  absent,<message> | in,<tier>,<release>,<asked>,<message>
//	tierlog/<tier>/<message> <sent>  <release>
//	hold/<tenant>/<sent>/<message> <sent>
//
// A tenant's log and base are one group file; a tier's deployments share
// the group of its tier; the holds are one file.

// eventValue is the value of an event's log record.
func eventValue(e history.Event) string {
	v := string(e.Kind) + "," + e.Tier + "," + e.Release
	if e.Rejected {
		v += ",rejected"
	}
	return v
}

// slot is an event's part of its log key: its send time and message id,
// as the ledger tells messages apart (an id seen again at another send
// time is another message).
func slot(e history.Event) string { return strconv.FormatInt(e.Sent, 10) + "/" + e.ID }

// eventOf reads a log record: key is its slot.
func eventOf(key string, r ledger.Record) (history.Event, error) {
	ms, id, ok := strings.Cut(key, "/")
	if !ok || ms != strconv.FormatInt(r.MS, 10) {
		return history.Event{}, fmt.Errorf("log record %s: want <send time>/<message id>, the send time the record's", key)
	}
	f := strings.Split(r.Value, ",")
	if len(f) < 3 || len(f) > 4 || len(f) == 4 && f[3] != "rejected" {
		return history.Event{}, fmt.Errorf("log record %s: want <kind>,<tier>,<release>[,rejected], got %q", key, r.Value)
	}
	e := history.Event{Sent: r.MS, ID: id, Kind: history.Kind(f[0]), Tier: f[1], Release: f[2], Rejected: len(f) == 4}
	switch e.Kind {
	case history.Onboard, history.Offboard, history.Deploy, history.Set:
	default:
		return history.Event{}, fmt.Errorf("log record %s: unknown kind %q", key, f[0])
	}
	return e, nil
}

// baseRecord is the record of a tenant's base.
func baseRecord(b history.Base) ledger.Record {
	if !b.Present {
		return ledger.Record{MS: b.Sent, Value: "absent," + b.ID}
	}
	return ledger.Record{MS: b.Sent, Value: strings.Join([]string{"in", b.Tier, b.Release, b.Asked, b.ID}, ",")}
}

// baseOf reads a base record.
func baseOf(r ledger.Record) (history.Base, error) {
	if id, ok := strings.CutPrefix(r.Value, "absent,"); ok {
		return history.Base{Sent: r.MS, ID: id}, nil
	}
	f := strings.SplitN(r.Value, ",", 5)
	if len(f) != 5 || f[0] != "in" || f[1] == "" {
		return history.Base{}, fmt.Errorf("base record: want absent,<message> or in,<tier>,<release>,<asked>,<message>, got %q", r.Value)
	}
	return history.Base{State: history.State{Present: true, Tier: f[1], Release: f[2], Asked: f[3]}, Sent: r.MS, ID: f[4]}, nil
}

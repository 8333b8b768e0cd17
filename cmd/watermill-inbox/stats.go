package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	inbox "github.com/effectively-once/watermill-inbox"
)

func statsCommand(ctx context.Context, c *common, args []string, stdout, stderr io.Writer) int {
	fs := c.flags("Shows the rows of each consumer by state, how far back each remembers, the table's size, and how\n" +
		"many consumer ids are left for new consumer names.")
	asJSON := fs.Bool("json", false, "print the stats as JSON (durations in seconds)")
	var warn days
	fs.Var(&warn, "warn-below", "exit 4 if a consumer remembers less than this (the longest redelivery of your sources); "+
		"a consumer younger than that trips it too")
	if code := c.parse(args); code >= 0 {
		return code
	}
	db, database, err := c.open(ctx)
	if err != nil {
		return c.fail(err)
	}
	defer db.Close()
	st, err := database.ReadStats(ctx, inbox.WithTable(c.table))
	if err != nil {
		return c.fail(err)
	}

	if *asJSON {
		if err := writeStatsJSON(stdout, st); err != nil {
			return c.fail(err)
		}
	} else {
		writeStats(stdout, st)
	}
	code := exitOK
	for _, cs := range st.Consumers {
		if warn > 0 && !cs.RemembersSince.IsZero() && cs.Age < time.Duration(warn) {
			fmt.Fprintf(stderr, "warning: %s remembers %s, less than %s: a copy redelivered from further back would be applied again\n",
				cs.Consumer, days(cs.Age), warn)
			code = exitShort
		}
	}
	return code
}

func writeStats(w io.Writer, st inbox.Stats) {
	var rows, expired int64
	for _, cs := range st.Consumers {
		rows += cs.Rows
		expired += cs.Expired
	}
	fmt.Fprintf(w, "table %s: %s rows; heap %s, indexes %s, total %s", st.Table, group(rows),
		bytesOf(st.TableBytes), bytesOf(st.IndexBytes), bytesOf(st.TotalBytes))
	if rows > 0 {
		fmt.Fprintf(w, " (%.0f bytes per row)", float64(st.TotalBytes)/float64(rows))
	}
	fmt.Fprintln(w)
	if st.ConsumerIDs > 0 {
		fmt.Fprintf(w, "consumer ids: %s of %s left\n", group(st.ConsumerIDsLeft), group(st.ConsumerIDs))
		if st.ConsumerIDsLeft == 0 {
			fmt.Fprint(w, "No new consumer name can be registered: its messages are held back. Give consumers fixed names,\n"+
				"and new ones a table of their own.\n")
		}
	}
	if len(st.Consumers) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "consumer\trows\tdone\tfailed\treleased\tprocessing\texpired leases\tremembers\toldest row (UTC)\t")
	for _, cs := range st.Consumers {
		remembers, oldest := "-", "-"
		if !cs.RemembersSince.IsZero() {
			remembers = days(cs.Age).String()
		}
		if !cs.Oldest.IsZero() {
			oldest = cs.Oldest.UTC().Format("2006-01-02 15:04:05")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", cs.Consumer, group(cs.Rows), group(cs.Done), group(cs.Failed),
			group(cs.Released), group(cs.Processing), group(cs.Expired), remembers, oldest)
	}
	tw.Flush()
	switch {
	case expired == 1:
		fmt.Fprint(w, "\n1 'processing' row has an expired lease: its holder died, and the next copy takes it over.\n"+
			"If it is old, that copy never came: settle the side effect with its provider, then 'watermill-inbox forget' it.\n")
	case expired > 1:
		fmt.Fprintf(w, "\n%s 'processing' rows have an expired lease: their holder died, and the next copy takes them over.\n"+
			"Old ones were never redelivered: settle the side effect with its provider, then 'watermill-inbox forget' them.\n", group(expired))
	}
}

func writeStatsJSON(w io.Writer, st inbox.Stats) error {
	type consumer struct {
		Consumer         string  `json:"consumer"`
		Rows             int64   `json:"rows"`
		Done             int64   `json:"done"`
		Failed           int64   `json:"failed"`
		Released         int64   `json:"released"`
		Processing       int64   `json:"processing"`
		ExpiredLeases    int64   `json:"expired_leases"`
		Oldest           *string `json:"oldest"`
		RemembersSince   *string `json:"remembers_since"`
		RemembersSeconds float64 `json:"remembers_seconds"`
	}
	out := struct {
		Table      string `json:"table"`
		Now        string `json:"now"`
		TableBytes int64  `json:"table_bytes"`
		IndexBytes int64  `json:"index_bytes"`
		TotalBytes int64  `json:"total_bytes"`
		// null when the table has no limit on consumer names
		ConsumerIDs     *int64     `json:"consumer_ids"`
		ConsumerIDsLeft *int64     `json:"consumer_ids_left"`
		Consumers       []consumer `json:"consumers"`
	}{Table: st.Table, Now: st.Now.UTC().Format(time.RFC3339Nano), TableBytes: st.TableBytes, IndexBytes: st.IndexBytes,
		TotalBytes: st.TotalBytes, Consumers: []consumer{}}
	if st.ConsumerIDs > 0 {
		out.ConsumerIDs, out.ConsumerIDsLeft = &st.ConsumerIDs, &st.ConsumerIDsLeft
	}
	for _, cs := range st.Consumers {
		c := consumer{Consumer: cs.Consumer, Rows: cs.Rows, Done: cs.Done, Failed: cs.Failed, Released: cs.Released,
			Processing: cs.Processing, ExpiredLeases: cs.Expired, RemembersSeconds: cs.Age.Seconds()}
		c.Oldest, c.RemembersSince = timestamp(cs.Oldest), timestamp(cs.RemembersSince)
		out.Consumers = append(out.Consumers, c)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// timestamp is t for JSON, or nil when t is zero.
func timestamp(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(time.RFC3339Nano)
	return &s
}

package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"
)

// fileMessage is one line of the file a gochannel consumer publishes from.
type fileMessage struct {
	UUID     string            `json:"uuid"`
	Metadata map[string]string `json:"metadata"`
	Payload  []byte            `json:"payload"`
}

func writeMessagesFile(path string, msgs []*message.Message) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, m := range msgs {
		if err := enc.Encode(fileMessage{UUID: m.UUID, Metadata: m.Metadata, Payload: m.Payload}); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// publishFromFile publishes every message of path, one Publish call each. Unpaced, it publishes to the one topic
// it is given from one goroutine, and GoChannel hands each message to its subscriber on a goroutine of its own, so
// the router runs as many handlers at once as messages are waiting, and a republished copy races its original
// through the inbox. Paced, over a GoChannel that blocks each Publish until the ack, one goroutine per topic
// publishes to its topic whichever message is next, and so each topic has one message in flight at any time.
func publishFromFile(pub message.Publisher, topics []string, path string, paced bool) error {
	msgs, err := readMessagesFile(path)
	if err != nil {
		return err
	}
	if !paced {
		for _, m := range msgs {
			if err := pub.Publish(topics[0], m); err != nil {
				return err
			}
		}
		return nil
	}
	var next atomic.Int64
	errs := make(chan error, len(topics))
	var wg sync.WaitGroup
	for _, topic := range topics {
		wg.Go(func() {
			for {
				n := int(next.Add(1) - 1)
				if n >= len(msgs) {
					return
				}
				if err := pub.Publish(topic, msgs[n]); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// readMessagesFile reads the whole file first, so that publishing is not paced by the disk.
func readMessagesFile(path string) ([]*message.Message, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := json.NewDecoder(bufio.NewReader(f))
	var msgs []*message.Message
	for {
		var fm fileMessage
		if err := dec.Decode(&fm); errors.Is(err, io.EOF) {
			return msgs, nil
		} else if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		m := message.NewMessage(fm.UUID, fm.Payload)
		for k, v := range fm.Metadata {
			m.Metadata.Set(k, v)
		}
		msgs = append(msgs, m)
	}
}

package testkit

import (
	"fmt"
	"strings"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

type RecordingLogger struct {
	mu      sync.Mutex
	entries []LogEntry
}

type LogEntry struct {
	// Level is "error", "info", "debug" or "trace".
	Level string
	Msg   string
	// Err is the error an Error call logged, nil for the other levels.
	Err error
	// Fields are the call's fields over those of the With calls that made its logger.
	Fields watermill.LogFields
}

func (l *RecordingLogger) log(level, msg string, err error, fields watermill.LogFields) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, LogEntry{Level: level, Msg: msg, Err: err, Fields: fields})
}

// Error records msg at level "error".
func (l *RecordingLogger) Error(msg string, err error, fields watermill.LogFields) {
	l.log("error", msg, err, fields)
}

// Info records msg at level "info".
func (l *RecordingLogger) Info(msg string, fields watermill.LogFields) {
	l.log("info", msg, nil, fields)
}

// Debug records msg at level "debug".
func (l *RecordingLogger) Debug(msg string, fields watermill.LogFields) {
	l.log("debug", msg, nil, fields)
}

// Trace records msg at level "trace".
func (l *RecordingLogger) Trace(msg string, fields watermill.LogFields) {
	l.log("trace", msg, nil, fields)
}

// With returns a logger that records into l, adding fields to every entry.
func (l *RecordingLogger) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return withFields{l: l, fields: fields}
}

// Find returns the entries whose message contains text, in order.
func (l *RecordingLogger) Find(text string) []LogEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []LogEntry
	for _, e := range l.entries {
		if strings.Contains(e.Msg, text) {
			out = append(out, e)
		}
	}
	return out
}

// Count returns how many logged messages contain text.
func (l *RecordingLogger) Count(text string) int { return len(l.Find(text)) }

// withFields is a RecordingLogger's With: it records into the same logger.
type withFields struct {
	l      *RecordingLogger
	fields watermill.LogFields
}

func (w withFields) Error(msg string, err error, fields watermill.LogFields) {
	w.l.log("error", msg, err, w.fields.Add(fields))
}
func (w withFields) Info(msg string, fields watermill.LogFields) {
	w.l.log("info", msg, nil, w.fields.Add(fields))
}
func (w withFields) Debug(msg string, fields watermill.LogFields) {
	w.l.log("debug", msg, nil, w.fields.Add(fields))
}
func (w withFields) Trace(msg string, fields watermill.LogFields) {
	w.l.log("trace", msg, nil, w.fields.Add(fields))
}
func (w withFields) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return withFields{l: w.l, fields: w.fields.Add(fields)}
}

type RecordingPublisher struct {
	FailFirst int
	mu        sync.Mutex
	attempts  int
	published map[string][]*message.Message
}

// Publish keeps copies of msgs under topic, or fails while FailFirst says so.
func (p *RecordingPublisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.attempts++
	if p.attempts <= p.FailFirst {
		return fmt.Errorf("publish attempt %d: broker unavailable", p.attempts)
	}
	if p.published == nil {
		p.published = map[string][]*message.Message{}
	}
	for _, m := range msgs {
		p.published[topic] = append(p.published[topic], m.Copy())
	}
	return nil
}

// Close does nothing.
func (p *RecordingPublisher) Close() error { return nil }

// Messages returns what was published to topic, in order.
func (p *RecordingPublisher) Messages(topic string) []*message.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*message.Message(nil), p.published[topic]...)
}

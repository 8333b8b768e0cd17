package inbox

import "io"

// WithDefaultLogOutput points the default logger (the one an Inbox gets without WithLogger) at w instead of standard
// error, so that tests can read what an operator would see there.
func WithDefaultLogOutput(w io.Writer) SharedOption {
	return sharedOption(func(c *config) { c.logOutput = w })
}

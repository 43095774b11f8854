package idemtest

// pauseGate lets a test end each FaultDelay pause when it chooses, instead
// of after Options.Delay of real time, to order concurrent requests without
// sleeping: a pause hands the test a channel once its claim is made, and
// ends when the test closes that channel. Nil, as outside tests, leaves
// the real-time pause.
type pauseGate chan chan struct{}

// pause waits for the test to end this pause; false if Close, closing done,
// cut it short.
func (g pauseGate) pause(done <-chan struct{}) bool {
	release := make(chan struct{})
	select {
	case g <- release:
	case <-done:
		return false
	}
	select {
	case <-release:
		return true
	case <-done:
		return false
	}
}

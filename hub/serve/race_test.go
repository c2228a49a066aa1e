//go:build race

package serve

// raceEnabled: the race detector drops a sync.Pool's items at random, so what a pool saves is
// not measured under it.
const raceEnabled = true

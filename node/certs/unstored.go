package certs

import (
	"context"
	"log/slog"
	"time"
)

// storeRetry is how often writing an issued certificate that could not be stored is tried again.
const storeRetry = time.Minute

// unstored is an issued certificate whose file could not be written (a full or read-only disk).
// It is used from memory and its write retried — never thrown away for a new CSR, which a fleet
// of gateways with full disks would otherwise file every minute. Run's goroutine owns it.
type unstored func() error

// retry writes it; when that fails again it waits storeRetry (jittered, at most until renewal is
// due) and reports false. ok is false when ctx ended.
func (u unstored) retry(ctx context.Context, log *slog.Logger, what string, renewAt time.Time) (stored, ok bool) {
	err := u()
	if err == nil {
		log.Info("certs: "+what+" stored", "after", "retry")
		return true, true
	}
	wait := min(jittered(storeRetry), max(time.Until(renewAt), time.Second))
	log.Warn("certs: "+what+" still not stored; used from memory", "err", err, "retryIn", wait.Round(time.Second))
	return false, sleep(ctx, wait, nil)
}

//go:build !linux

package workload

import "time"

func threadCPUTime() (time.Duration, bool) { return 0, false }

func newSleeper() sleeper { return newGoSleeper() }

func allocTouchable(n int) ([]byte, func(), error) { return make([]byte, n), func() {}, nil }

func residentBytes() int64 { return -1 }

package correct

import "errors"

// The package's sentinel errors, in one place: every error a caller can branch on with errors.Is.
var (
	// ErrReplay marks a replay that cannot run as configured.
	ErrReplay = errors.New("correct: replay")

	// errEpochFenced marks a transaction the broker refused because this producer's epoch was bumped:
	// by a successor with the same transactional id (a zombie must stop), or by the broker itself
	// when a transaction of ours outlived its timeout during an outage (we may carry on).
	errEpochFenced = errors.New("producer epoch fenced")

	// ErrConfig is wrapped by every Config validation failure.
	ErrConfig = errors.New("correct: invalid config")

	// ErrConfigChanged stops the consumer when the calibration changelog holds state built with a
	// different correction config than the running one (Config.AllowConfigChange overrides it).
	ErrConfigChanged = errors.New("correct: correction config differs from the one the stored state was built with")

	// ErrSettingsChanged stops a replay whose DigestConfig is not the one the live consumer sealed
	// the run with (ReplayConfig.AllowConfigChange overrides it).
	ErrSettingsChanged = errors.New("correct: replay settings differ from the live consumer's")

	// ErrChangelog marks a calibration changelog the consumer cannot rebuild state from.
	ErrChangelog = errors.New("correct: calibration changelog")
)

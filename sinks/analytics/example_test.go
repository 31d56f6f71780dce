package analytics_test

import (
	"context"
	"fmt"
	"log"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/wmrl/wmrl/sinks/analytics"
	"github.com/wmrl/wmrl/topics"
)

// Run the tap until SIGTERM; it flushes partial files and commits before returning.
func ExampleTap_Run() {
	tap, err := analytics.New(analytics.Config{
		Brokers:   []string{"127.0.0.1:9092"},
		Names:     topics.NewNames(""),
		Dir:       "/var/lib/wmrl/parquet",
		RollSteps: 10,
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := tap.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// Read the files back, e.g. to compare with the trainer's view or to plot calibration drift.
func ExampleReadCalibrationFile() {
	files, _ := filepath.Glob("/var/lib/wmrl/parquet/calibration-run-7-*.parquet")
	for _, f := range files {
		rows, err := analytics.ReadCalibrationFile(f)
		if err != nil {
			log.Fatal(err)
		}
		for _, r := range rows {
			fmt.Println(r.Step, r.Stream, r.BiasBefore, r.BiasAfter, r.AnchorWeight)
		}
	}
}
